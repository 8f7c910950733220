-- One row per node × category of the day: where observed capacity went (R11), in GPU-seconds; a node's
-- categories sum to its observed GPU-seconds exactly. Stranded is every category but allocated_active.
with device_parts as (
    select cluster, node, category, sum(gpu_seconds) as gpu_seconds
    from int_device_categories
    group by all
),
mig_instance_weights as (
    select uuid, ts_ms, sum(gpu_seconds) as gpu_seconds
    from int_device_categories
    where gpu_i_id is not null
    group by all
),
mig_remainders as (
    -- The part of a MIG GPU no instance covers is capacity too (R4): Δ minus its instances, in DECIMAL so
    -- that the parts add up to Δ exactly.
    select
        g.cluster,
        g.node,
        case when g.unhealthy then 'unhealthy' else 'mig_unpartitioned' end as category,
        sum(sample_seconds(1) - coalesce(w.gpu_seconds, 0)) as gpu_seconds
    from int_gpu_samples as g
    left join mig_instance_weights as w on w.uuid = g.uuid and w.ts_ms = g.ts_ms
    where g.is_mig
    group by all
),
parts as (
    select * from device_parts
    union all
    select * from mig_remainders
)
select
    cluster,
    metered_day() as day,
    node,
    category,
    sum(gpu_seconds) as gpu_seconds,
    category <> 'allocated_active' as is_stranded
from parts
group by cluster, node, category
