-- One row per MIG GPU × layout × MIG instance of the day, and one `unpartitioned` row per MIG GPU and layout:
-- compute slice-seconds (slices of 7) held, busy and free per instance, and those no instance covers (R3).
with layouts as (
    -- A layout is keyed by an order-free hash of its instances while samples are grouped; it is named once
    -- per GPU and layout below.
    select uuid, ts_ms, bit_xor(hash(gpu_i_id, mig_profile)) as layout_key, sum(compute_slices) as slices
    from int_device_categories
    where gpu_i_id is not null
    group by uuid, ts_ms
),
instances as (
    select
        c.cluster,
        c.node,
        c.uuid,
        l.layout_key,
        c.gpu_i_id,
        min(c.gpu_model) as gpu_model,
        c.mig_profile,
        min(c.compute_slices) as compute_slices,
        count(*) * getvariable('scrape_s') as observed_seconds,
        sum(sample_seconds(c.compute_slices)) filter (where c.is_held) as held_slice_seconds,
        sum(sample_seconds(c.compute_slices, coalesce(c.busy, 0))) as busy_slice_seconds,
        sum(sample_seconds(c.compute_slices)) filter (where not c.is_held) as free_slice_seconds
    from int_device_categories as c
    join layouts as l on l.uuid = c.uuid and l.ts_ms = c.ts_ms
    where c.gpu_i_id is not null
    group by c.cluster, c.node, c.uuid, l.layout_key, c.gpu_i_id, c.mig_profile
),
layout_names as (
    select uuid, layout_key, string_agg(mig_profile, '+' order by mig_profile) as layout
    from instances
    group by uuid, layout_key
),
unpartitioned as (
    select
        g.cluster,
        g.node,
        g.uuid,
        s.layout_key,
        null::varchar as gpu_i_id,
        min(c.gpu_model) as gpu_model,
        'unpartitioned' as mig_profile,
        null::integer as compute_slices,
        count(*) * getvariable('scrape_s') as observed_seconds,
        cast(0 as decimal(38, 12)) as held_slice_seconds,
        cast(0 as decimal(38, 12)) as busy_slice_seconds,
        cast(0 as decimal(38, 12)) as free_slice_seconds,
        cast(sum(greatest(7 - coalesce(s.slices, 0), 0) * getvariable('scrape_s')) as decimal(38, 12))
            as unpartitioned_slice_seconds
    from int_gpu_samples as g
    join int_device_classes as c on c.model_name = g.model_name and c.mig_profile is null
    left join layouts as s on s.uuid = g.uuid and s.ts_ms = g.ts_ms
    where g.is_mig
    group by g.cluster, g.node, g.uuid, s.layout_key
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
    p.cluster, metered_day() as day, p.node, p.uuid,
    -- A MIG sample whose instances were all set aside (stg_dcgm_quarantine) has no layout to name.
    coalesce(n.layout, '') as layout,
    p.gpu_i_id, p.gpu_model, p.mig_profile, p.compute_slices, p.observed_seconds, p.held_slice_seconds,
    p.busy_slice_seconds, p.free_slice_seconds, p.unpartitioned_slice_seconds
from parts as p
left join layout_names as n on n.uuid = p.uuid and n.layout_key is not distinct from p.layout_key
