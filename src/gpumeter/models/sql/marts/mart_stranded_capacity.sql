-- One row per node × category of the day: where observed capacity went (R11), in GPU-seconds; a node's
-- categories sum to its observed GPU-seconds exactly. Stranded is every category but allocated_active.
with claimed as (
    -- Device samples held through a DRA claim (the others' holders are their pod labels).
    select distinct device_key, ts_ms from int_keyed_device_holders where holder_source = 'dra'
),
device_parts as (
    select
        d.node_key,
        capacity_category(d.unhealthy, d.labelled or c.device_key is not null, d.busy, d.unschedulable) as category,
        sum(sample_seconds(d.weight)) as gpu_seconds
    from int_keyed_device_samples as d
    left join claimed as c on c.device_key = d.device_key and c.ts_ms = d.ts_ms
    group by all
),
mig_layout_seconds as (
    -- A layout's instances' GPU-seconds at one of its samples (R3).
    select gpu_key, mig_layout_key, instance_gpu_seconds as gpu_seconds from int_mig_layouts
),
mig_remainders as (
    -- The part of a MIG GPU no instance covers is capacity too (R4): Δ minus its instances, in DECIMAL so
    -- that the parts add up to Δ exactly, times the GPU's samples in that layout (null: no instance).
    select
        g.node_key,
        case when g.unhealthy then 'unhealthy' else 'mig_unpartitioned' end as category,
        sum(g.samples * (sample_seconds(1) - coalesce(w.gpu_seconds, 0))) as gpu_seconds
    from int_mig_layout_samples as g
    left join mig_layout_seconds as w on w.gpu_key = g.gpu_key and w.mig_layout_key = g.mig_layout_key
    group by all
),
parts as (
    select * from device_parts
    union all
    select * from mig_remainders
)
select
    getvariable('cluster') as cluster,
    metered_day() as day,
    n.node,
    p.category,
    sum(p.gpu_seconds) as gpu_seconds,
    p.category <> 'allocated_active' as is_stranded
from parts as p
left join stg_dcgm_nodes as n on n.node_key = p.node_key
group by n.node, p.category
