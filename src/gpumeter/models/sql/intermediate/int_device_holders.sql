-- One row per device sample × holder (R5, R6): int_keyed_device_holders with the device's and the holder's
-- names, for audits and the dashboard (stored under warehouse.persist_models: all; the marts read the keyed
-- model).
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
from int_keyed_device_holders as k
join (select distinct device_key, device_id from stg_dcgm_series) as v on v.device_key = k.device_key
join int_holders as h on h.holder_key = k.holder_key
