-- One row per MIG GPU × layout × MIG instance of the day, and one `unpartitioned` row per MIG GPU and layout:
-- compute slice-seconds (slices of 7) held, busy and free per instance, and those no instance covers (R3).
-- Samples are summed under integer keys; names are joined to the sums.
with claimed as (
    -- Device samples held through a DRA claim (the others' holders are their pod labels).
    select distinct device_key, ts_ms from int_keyed_device_holders where holder_source = 'dra'
),
instance_samples as (
    select
        d.gpu_key,
        d.node_key,
        d.device_key,
        d.profile_key,
        d.ts_ms,
        d.busy,
        c.compute_slices,
        c.gpu_model,
        d.labelled or h.device_key is not null as is_held
    from int_mig_instance_samples as d
    join int_keyed_device_classes as c on c.model_key = d.model_key and c.profile_key = d.profile_key
    left join claimed as h on h.device_key = d.device_key and h.ts_ms = d.ts_ms
),
layouts as (
    -- A layout is keyed by an order-free hash of its instances (int_mig_sample_layouts); it is named once per
    -- GPU and layout below.
    select gpu_key, ts_ms, layout_key, slices from int_mig_sample_layouts
),
instances as (
    select
        i.node_key,
        i.gpu_key,
        l.layout_key,
        i.device_key,
        min(i.gpu_model) as gpu_model,
        i.profile_key,
        min(i.compute_slices) as compute_slices,
        count(*) * getvariable('scrape_s') as observed_seconds,
        sum(sample_seconds(i.compute_slices)) filter (where i.is_held) as held_slice_seconds,
        sum(sample_seconds(i.compute_slices, coalesce(i.busy, 0))) as busy_slice_seconds,
        sum(sample_seconds(i.compute_slices)) filter (where not i.is_held) as free_slice_seconds
    from instance_samples as i
    join layouts as l on l.gpu_key = i.gpu_key and l.ts_ms = i.ts_ms
    group by i.node_key, i.gpu_key, l.layout_key, i.device_key, i.profile_key
),
profiles as (
    select distinct profile_key, mig_profile from stg_dcgm_series where profile_key is not null
),
layout_names as (
    select i.gpu_key, i.layout_key, string_agg(p.mig_profile, '+' order by p.mig_profile) as layout
    from instances as i
    join profiles as p on p.profile_key = i.profile_key
    group by i.gpu_key, i.layout_key
),
unpartitioned as (
    select
        g.node_key,
        g.gpu_key,
        s.layout_key,
        null::integer as device_key,
        min(c.gpu_model) as gpu_model,
        null::integer as profile_key,
        null::integer as compute_slices,
        count(*) * getvariable('scrape_s') as observed_seconds,
        cast(0 as decimal(38, 12)) as held_slice_seconds,
        cast(0 as decimal(38, 12)) as busy_slice_seconds,
        cast(0 as decimal(38, 12)) as free_slice_seconds,
        cast(sum(greatest(7 - coalesce(s.slices, 0), 0) * getvariable('scrape_s')) as decimal(38, 12))
            as unpartitioned_slice_seconds
    from int_gpu_samples as g
    join int_keyed_device_classes as c on c.model_key = g.model_key and c.profile_key is null
    left join layouts as s on s.gpu_key = g.gpu_key and s.ts_ms = g.ts_ms
    where g.is_mig
    group by g.node_key, g.gpu_key, s.layout_key
),
parts as (
    select
        * exclude (held_slice_seconds, busy_slice_seconds, free_slice_seconds),
        coalesce(held_slice_seconds, 0) as held_slice_seconds,
        coalesce(busy_slice_seconds, 0) as busy_slice_seconds,
        coalesce(free_slice_seconds, 0) as free_slice_seconds,
        cast(0 as decimal(38, 12)) as unpartitioned_slice_seconds
    from instances
    union all by name
    select * from unpartitioned
)
select
    getvariable('cluster') as cluster,
    metered_day() as day,
    nd.node,
    gp.uuid,
    -- A MIG sample whose instances were all set aside (int_dcgm_quarantine) has no layout to name.
    coalesce(n.layout, '') as layout,
    v.gpu_i_id,
    p.gpu_model,
    coalesce(pr.mig_profile, 'unpartitioned') as mig_profile,
    p.compute_slices,
    p.observed_seconds,
    p.held_slice_seconds,
    p.busy_slice_seconds,
    p.free_slice_seconds,
    p.unpartitioned_slice_seconds
from parts as p
left join layout_names as n on n.gpu_key = p.gpu_key and n.layout_key is not distinct from p.layout_key
left join stg_dcgm_nodes as nd on nd.node_key = p.node_key
join (select distinct gpu_key, uuid from stg_dcgm_devices) as gp on gp.gpu_key = p.gpu_key
left join stg_dcgm_devices as v on v.device_key = p.device_key
left join profiles as pr on pr.profile_key = p.profile_key
