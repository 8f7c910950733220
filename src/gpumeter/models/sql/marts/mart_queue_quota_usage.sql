-- One row per Kueue ClusterQueue × flavor × resource of the day: nominal quota, usage and borrowing in
-- resource-seconds (GPU-seconds for nvidia.com/gpu, R1), beside the GPU-seconds metered for the queue's tenant.
with queue_tenants as (
    select
        unnest(getvariable('kueue_queues')::varchar[]) as cluster_queue,
        unnest(getvariable('kueue_queue_tenants')::varchar[]) as tenant
),
queue_samples as (
    -- One row per (queue, flavor, resource, sample time) with the three gauges side by side.
    select
        cluster,
        ts_ms,
        cluster_queue,
        flavor,
        resource,
        max(cohort) as cohort,
        max(value) filter (where quantity = 'nominal_quota') as nominal_quota,
        max(value) filter (where quantity = 'resource_usage') as used,
        max(value) filter (where quantity = 'borrowing_limit') as borrowing_limit,
        -- How often the queue was sampled: each sample stands for Δ (docs/tariffs.md), so a queue sampled
        -- less often reads low (models/day_checks.py kueue_sampled_once_per_interval).
        ts_ms - lag(ts_ms) over (partition by cluster, cluster_queue, flavor, resource order by ts_ms) as since_prev_ms
    from stg_kueue_queue_samples
    where cluster_queue is not null and quantity <> 'local_queue_usage'
    group by cluster, ts_ms, cluster_queue, flavor, resource
),
per_day as (
    select
        cluster,
        metered_day() as day,
        cluster_queue,
        max(cohort) as cohort,
        flavor,
        resource,
        count(*) as samples,
        median(since_prev_ms) / 1000.0 as sample_interval_s,
        sum(sample_seconds(nominal_quota)) as nominal_quota_seconds,
        sum(sample_seconds(used)) as used_seconds,
        -- Usage above the nominal quota is borrowed from the cohort.
        sum(sample_seconds(case when used > nominal_quota then used - nominal_quota else 0 end)) as borrowed_seconds,
        sum(sample_seconds(borrowing_limit)) as borrowing_limit_seconds,
        max(used) as peak_used
    from queue_samples
    group by cluster, cluster_queue, flavor, resource
),
tenant_metered as (
    select tenant, sum(gpu_seconds) as gpu_seconds
    from mart_device_seconds
    group by tenant
)
select
    d.cluster,
    d.day,
    d.cluster_queue,
    d.cohort,
    d.flavor,
    d.resource,
    q.tenant,
    d.samples,
    d.sample_interval_s,
    d.nominal_quota_seconds,
    d.used_seconds,
    d.borrowed_seconds,
    d.borrowing_limit_seconds,
    d.peak_used,
    case when q.tenant is not null then coalesce(m.gpu_seconds, 0) end as tenant_metered_gpu_seconds
from per_day as d
left join queue_tenants as q on q.cluster_queue = d.cluster_queue
left join tenant_metered as m on m.tenant = q.tenant
