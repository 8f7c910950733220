-- One row per device sample × holder: the pods that hold a device at a sample (R5: DCGM pod labels, KAI GPU
-- groups, DRA claims) and each holder's exact share of it (R6).
with series_holders as (
    -- Pod labels on a series name its holder (R5); copies of one device for several pods are one
    -- device shared by them (R6).
    select distinct s.ts_ms, d.device_id, d.namespace, d.pod, d.container
    from stg_dcgm_samples as s
    join stg_dcgm_series as d on d.series_key = s.series_key
    where s.in_day and d.pod is not null and d.namespace is not null
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
kai_candidates as (
    select h.ts_ms, h.device_id, h.namespace as reservation_namespace, h.pod as reservation_pod, m.namespace, m.pod
    from series_holders as h
    join kai_groups as r on r.namespace = h.namespace and r.pod = h.pod and r.is_reservation
    join kai_groups as m on m.gpu_group = r.gpu_group and not m.is_reservation
),
kai_members as (
    -- R5/R6 KAI: a sample held by a reservation pod is held by the pods of its GPU group that are Running
    -- then (int_pod_running_spans). With none Running, the reservation pod itself stays the holder
    -- (docs/accounting.md R6).
    select distinct c.ts_ms, c.device_id, c.reservation_namespace, c.reservation_pod, c.namespace, c.pod
    from kai_candidates as c
    join int_pod_running_spans as p
        on p.namespace = c.namespace and p.pod = c.pod and c.ts_ms >= p.from_ms and c.ts_ms < p.until_ms
),
labelled_holders as (
    select h.ts_ms, h.device_id, h.namespace, h.pod, h.container, 'labels' as holder_source
    from series_holders as h
    anti join kai_members as k
        on k.device_id = h.device_id
        and k.ts_ms = h.ts_ms
        and k.reservation_namespace = h.namespace
        and k.reservation_pod = h.pod
    union all
    select distinct ts_ms, device_id, namespace, pod, null::varchar as container, 'kai' as holder_source
    from kai_members
),
unlabelled_samples as (
    select d.ts_ms, d.device_id
    from int_device_samples as d
    anti join labelled_holders as l on l.device_id = d.device_id and l.ts_ms = d.ts_ms
),
claim_candidates as (
    -- R5: a pod-less device sample -> the slice device it is then -> the claim results on that device valid
    -- then -> their reserved pods. Each slice device and claim result is used only for the samples with
    -- valid_from_ms <= ts_ms < valid_until_ms (null = unbounded; stg_dra_*): claims and slices change during
    -- a day, and each is used for the time it was valid.
    select
        u.ts_ms,
        u.device_id,
        a.claim_namespace as namespace,
        a.reserved_pod as pod,
        a.reserved_pod_uid as pod_uid
    from unlabelled_samples as u
    join int_dra_device_map as m
        on m.device_id = u.device_id
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
    select distinct c.ts_ms, c.device_id, c.namespace, c.pod, null::varchar as container, 'dra' as holder_source
    from claim_candidates as c
    join int_pod_running_spans as p
        on p.namespace = c.namespace
        and p.pod = c.pod
        and (c.pod_uid is null or p.pod_uid = c.pod_uid)
        and c.ts_ms >= p.from_ms
        and c.ts_ms < p.until_ms
),
holders as (
    select * from labelled_holders
    union all
    select * from claim_holders
),
shares as (
    select
        h.*,
        count(*) over (partition by h.device_id, h.ts_ms) as holder_count,
        -- Declared fractions in millionths, so that a share is an exact ratio of integers (R12).
        round(f.requested_fraction * 1000000)::bigint as requested_millionths,
        -- share: requested applies only where every holder of the sample declared a fraction.
        count(f.requested_fraction) over (partition by h.device_id, h.ts_ms) = count(*) over (
            partition by h.device_id, h.ts_ms
        ) as all_declared,
        sum(round(f.requested_fraction * 1000000)::bigint) over (partition by h.device_id, h.ts_ms)
            as declared_millionths
    from holders as h
    left join stg_kube_pod_gpu_fractions as f on f.namespace = h.namespace and f.pod = h.pod
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
    ts_ms,
    device_id,
    namespace,
    pod,
    container,
    holder_source,
    holder_count,
    share_numerator,
    share_denominator,
    share_numerator / share_denominator as share
from exact_shares
