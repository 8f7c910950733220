-- One row per (device sample, holder), with each holder's share of it (R5, R6).
with labelled_holders as (
    -- Pod labels on a series name its holder (R5); copies of one device for several pods are one
    -- device shared by them (R6).
    select distinct ts_ms, device_id, namespace, pod, container, 'labels' as holder_source
    from stg_dcgm_samples
    where in_day and pod is not null and namespace is not null
),
unlabelled_samples as (
    select d.ts_ms, d.device_id
    from int_device_samples as d
    anti join labelled_holders as l on l.device_id = d.device_id and l.ts_ms = d.ts_ms
),
claim_candidates as (
    select u.ts_ms, u.device_id, a.claim_namespace as namespace, a.reserved_pod as pod
    from unlabelled_samples as u
    join int_dra_device_map as m on m.device_id = u.device_id
    join stg_dra_allocations as a on a.driver = m.driver and a.pool = m.pool and a.device = m.device
),
claim_holders as (
    -- A claim holds its device only while its pod is Running (R5), by the latest pod sample.
    select distinct c.ts_ms, c.device_id, c.namespace, c.pod, null::varchar as container, 'dra' as holder_source
    from claim_candidates as c
    asof join stg_kube_pod_phases as p
        on p.namespace = c.namespace and p.pod = c.pod and c.ts_ms >= p.ts_ms
    where p.running and c.ts_ms - p.ts_ms <= getvariable('lookback_ms')
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
        f.requested_fraction,
        -- share: requested applies only where every holder of the sample declared a fraction.
        count(f.requested_fraction) over (partition by h.device_id, h.ts_ms) = count(*) over (
            partition by h.device_id, h.ts_ms
        ) as all_declared,
        sum(f.requested_fraction) over (partition by h.device_id, h.ts_ms) as declared_sum
    from holders as h
    left join stg_kube_pod_gpu_fractions as f on f.namespace = h.namespace and f.pod = h.pod
)
select
    ts_ms,
    device_id,
    namespace,
    pod,
    container,
    holder_source,
    holder_count,
    -- R6: 1/n by default; by declared fractions under share: requested (as declared when they fit in the
    -- device, in proportion when it is over-committed). Σ share ≤ 1 either way.
    case
        when getvariable('share') = 'requested' and all_declared
            then requested_fraction / greatest(declared_sum, 1.0)
        else 1.0 / holder_count
    end as share
from shares
