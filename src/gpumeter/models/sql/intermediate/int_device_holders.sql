-- One row per device sample × holder (R5, R6), with the device's and the holder's names, for audits and the
-- dashboard (stored under warehouse.persist_models: all; the marts read the keyed models): the device samples
-- one labelled pod holds alone (their `holder_key`, the share int_holders gives it) and the holders
-- int_keyed_device_holders lists for the others.
with keyed as (
    select device_key, ts_ms, holder_key, holder_source, holder_count, share_numerator, share_denominator, share
    from int_keyed_device_holders
    union all
    select
        d.device_key,
        d.ts_ms,
        d.holder_key,
        'labels' as holder_source,
        1::bigint as holder_count,
        h.alone_share_numerator as share_numerator,
        h.alone_share_denominator as share_denominator,
        h.alone_share_numerator / h.alone_share_denominator as share
    from int_keyed_device_samples as d
    -- A KAI reservation pod's group holds what it holds (int_keyed_device_holders lists them).
    join int_holders as h on h.holder_key = d.holder_key and not h.kai_reservation
)
select
    k.ts_ms,
    v.device_id,
    h.namespace,
    h.pod,
    h.container,
    k.holder_source,
    k.holder_count,
    k.share_numerator,
    k.share_denominator,
    k.share
from keyed as k
join stg_dcgm_devices as v on v.device_key = k.device_key
join int_holders as h on h.holder_key = k.holder_key
