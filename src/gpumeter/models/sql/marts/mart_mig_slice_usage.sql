-- One row per MIG GPU × layout × MIG instance of the day, and one `unpartitioned` row per MIG GPU and layout:
-- compute slice-seconds (slices of 7) held, busy and free per instance, and those no instance covers (R3).
-- Samples are summed under integer keys; names are joined to the sums.
with instances as (
    select
        node_key,
        gpu_key,
        mig_layout_key as layout_key,
        device_key,
        gpu_model,
        profile_key,
        compute_slices,
        observed_seconds,
        held_slice_seconds,
        busy_slice_seconds,
        free_slice_seconds
    from int_mig_layout_instances
),
layout_slices as (
    select gpu_key, mig_layout_key as layout_key, slices from int_mig_layouts
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
        g.layout_key,
        null::integer as device_key,
        min(c.gpu_model) as gpu_model,
        null::integer as profile_key,
        null::integer as compute_slices,
        sum(g.samples) * getvariable('scrape_s') as observed_seconds,
        cast(0 as decimal(38, 12)) as held_slice_seconds,
        cast(0 as decimal(38, 12)) as busy_slice_seconds,
        cast(0 as decimal(38, 12)) as free_slice_seconds,
        -- R1: a sample's slice-seconds as DECIMAL, times the samples of the layout: exact.
        sum(g.samples * sample_seconds(greatest(7 - coalesce(s.slices, 0), 0))) as unpartitioned_slice_seconds
    from (
        -- A GPU's MIG samples by layout (null: no instance at the sample), whatever their health.
        select node_key, gpu_key, model_key, mig_layout_key as layout_key, sum(samples) as samples
        from int_mig_layout_samples
        group by all
    ) as g
    join int_keyed_device_classes as c on c.model_key = g.model_key and c.profile_key is null
    left join layout_slices as s on s.gpu_key = g.gpu_key and s.layout_key = g.layout_key
    group by g.node_key, g.gpu_key, g.layout_key
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
