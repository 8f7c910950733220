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
mig_layout_parts as (
    -- A layout's parts at one of its samples (R4): the part of the GPU no instance covers, from whole 56ths of
    -- the GPU (its instances' 7ths or 8ths, R3), so that instances covering the GPU leave exactly 0 (below 0
    -- where they over-book it, which mart_data_quality reports); and the residue, what Δ minus that part
    -- leaves of the instances' GPU-seconds rounded per sample (a few 10^-12 s at most, mostly 0).
    select
        gpu_key,
        mig_layout_key,
        first_device_key,
        uncovered_seconds,
        sample_seconds(1) - instance_gpu_seconds - uncovered_seconds as residue_seconds
    from (
        select *, sample_seconds((56 - weight_units) / 56) as uncovered_seconds from int_mig_layouts
    )
),
mig_residues as (
    -- The residue is counted with the layout's first instance (by key), in its category at each sample: so a
    -- MIG GPU's categories add up to Δ at every sample, exactly.
    select
        d.node_key,
        capacity_category(d.unhealthy, d.labelled or c.device_key is not null, d.busy, d.unschedulable) as category,
        sum(l.residue_seconds) as gpu_seconds
    from int_mig_instance_samples as d
    join mig_layout_parts as l
        on l.gpu_key = d.gpu_key and l.mig_layout_key = d.mig_layout_key and l.first_device_key = d.device_key
    left join claimed as c on c.device_key = d.device_key and c.ts_ms = d.ts_ms
    where l.residue_seconds <> 0
    group by all
),
mig_remainders as (
    -- The part of a MIG GPU no instance covers is capacity too (R4), times the GPU's samples in that layout
    -- (null: no instance, the whole GPU). None where the instances cover the GPU.
    select
        g.node_key,
        case when g.unhealthy then 'unhealthy' else 'mig_unpartitioned' end as category,
        sum(g.samples * coalesce(l.uncovered_seconds, sample_seconds(1))) as gpu_seconds
    from int_mig_layout_samples as g
    left join mig_layout_parts as l on l.gpu_key = g.gpu_key and l.mig_layout_key = g.mig_layout_key
    group by all
    having sum(g.samples * coalesce(l.uncovered_seconds, sample_seconds(1))) <> 0
),
parts as (
    select * from device_parts
    union all
    select * from mig_residues
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
