-- The holders of the device samples one labelled pod does not hold alone (R5: several pods' labels, KAI GPU
-- groups, DRA claims) and each one's exact share (R6), by integer keys. A pod that holds a sample alone is the
-- sample's own `holder_key` with the share int_holders gives it: those samples, nearly all of a day's, are
-- not repeated here.
with series_holders as (
    -- Pod labels on a series name its holder (R5); copies of one device for several pods are one device
    -- shared by them (R6): the sample pass lists the pods of each such sample.
    select ts_ms, device_key, holder_key from int_shared_sample_series_holders
    union all
    -- A KAI reservation pod alone on a device sample: its group's Running pods hold it.
    select g.ts_ms, g.device_key, g.holder_key
    from int_keyed_device_samples as g
    join int_holders as k on k.holder_key = g.holder_key and k.kai_reservation
),
kai_groups as (
    -- KAI Scheduler: fractional pods and the reservation pod that holds their GPU share the label
    -- `runai-gpu-group`; reservation pods live in namespace kai-resource-reservation.
    select distinct
        namespace,
        pod,
        labels_json ->> 'label_runai_gpu_group' as gpu_group,
        namespace = 'kai-resource-reservation' as is_reservation
    from stg_kube_pod_labels
    where labels_json ->> 'label_runai_gpu_group' is not null
),
kai_reservations as (
    select h.holder_key, m.namespace, m.pod
    from int_holders as h
    join kai_groups as r on r.namespace = h.namespace and r.pod = h.pod and r.is_reservation
    join kai_groups as m on m.gpu_group = r.gpu_group and not m.is_reservation
),
kai_members as (
    -- R5/R6 KAI: a sample held by a reservation pod is held by the pods of its GPU group that are Running
    -- then (int_pod_running_spans). With none Running, the reservation pod itself stays the holder
    -- (docs/accounting.md R6).
    select distinct h.ts_ms, h.device_key, h.holder_key as reservation_key, k.holder_key
    from series_holders as h
    join kai_reservations as r on r.holder_key = h.holder_key
    join int_pod_running_spans as p
        on p.namespace = r.namespace and p.pod = r.pod and h.ts_ms >= p.from_ms and h.ts_ms < p.until_ms
    join int_holders as k on k.namespace = r.namespace and k.pod = r.pod and k.container is null
),
labelled_holders as (
    select h.ts_ms, h.device_key, h.holder_key, 'labels' as holder_source
    from series_holders as h
    anti join kai_members as k
        on k.device_key = h.device_key and k.ts_ms = h.ts_ms and k.reservation_key = h.holder_key
    union all
    select distinct ts_ms, device_key, holder_key, 'kai' as holder_source
    from kai_members
),
unlabelled_samples as (
    -- Device samples no pod label names a holder of (a KAI reservation's stays held by it or its group), of the
    -- devices the DRA map knows: only those can be held through a claim. A device sample is a GPU's where it
    -- is not MIG-partitioned, else an instance's.
    select d.ts_ms, d.device_key
    from int_keyed_device_samples as d
    semi join int_dra_device_map as m on m.device_key = d.device_key
    where not d.labelled
),
claim_candidates as (
    -- R5: a pod-less device sample -> the slice device it is then -> the claim results on that device valid
    -- then -> their reserved pods. Each slice device and claim result is used only for the samples with
    -- valid_from_ms <= ts_ms < valid_until_ms (null = unbounded; stg_dra_*): claims and slices change during
    -- a day, and each is used for the time it was valid.
    select
        u.ts_ms,
        u.device_key,
        a.claim_namespace as namespace,
        a.reserved_pod as pod,
        a.reserved_pod_uid as pod_uid
    from unlabelled_samples as u
    join int_dra_device_map as m
        on m.device_key = u.device_key
        and (m.valid_from_ms is null or u.ts_ms >= m.valid_from_ms)
        and (m.valid_until_ms is null or u.ts_ms < m.valid_until_ms)
    join stg_dra_allocations as a
        on a.driver = m.driver
        and a.pool = m.pool
        and a.device = m.device
        and (a.valid_from_ms is null or u.ts_ms >= a.valid_from_ms)
        and (a.valid_until_ms is null or u.ts_ms < a.valid_until_ms)
),
claim_holders as (
    -- A claim holds its device only while its pod is Running (R5): the pod of the claim's reservedFor uid,
    -- or, where the claim names no uid, any pod of that name.
    select distinct c.ts_ms, c.device_key, k.holder_key, 'dra' as holder_source
    from claim_candidates as c
    join int_pod_running_spans as p
        on p.namespace = c.namespace
        and p.pod = c.pod
        and (c.pod_uid is null or p.pod_uid = c.pod_uid)
        and c.ts_ms >= p.from_ms
        and c.ts_ms < p.until_ms
    join int_holders as k on k.namespace = c.namespace and k.pod = c.pod and k.container is null
),
holders as (
    select * from labelled_holders
    union all
    select * from claim_holders
),
declared as (
    -- Declared fractions in millionths, so that a share is an exact ratio of integers (R12).
    select h.holder_key, round(f.requested_fraction * 1000000)::bigint as requested_millionths
    from int_holders as h
    join stg_kube_pod_gpu_fractions as f on f.namespace = h.namespace and f.pod = h.pod
),
shares as (
    select
        h.*,
        count(*) over sample as holder_count,
        f.requested_millionths,
        -- share: requested applies only where every holder of the sample declared a fraction.
        count(f.requested_millionths) over sample = count(*) over sample as all_declared,
        sum(f.requested_millionths) over sample as declared_millionths
    from holders as h
    left join declared as f on f.holder_key = h.holder_key
    window sample as (partition by h.device_key, h.ts_ms)
),
exact_shares as (
    -- R6: 1/n by default; by declared fractions under share: requested (as declared when they fit in the
    -- device, in proportion when it is over-committed). Σ share ≤ 1 either way. A share is
    -- share_numerator / share_denominator, exactly.
    select
        *,
        case when getvariable('share') = 'requested' and all_declared then requested_millionths else 1 end
            as share_numerator,
        case
            when getvariable('share') = 'requested' and all_declared
                then greatest(declared_millionths, 1000000)
            else holder_count
        end as share_denominator
    from shares
)
select
    device_key,
    ts_ms,
    holder_key,
    holder_source,
    holder_count,
    share_numerator,
    share_denominator,
    share_numerator / share_denominator as share
from exact_shares
