-- Grain: day × GPU × MIG instance (and one `unpartitioned` row per MIG GPU). Compute slice-seconds
-- (slices of 7) held, busy and free per instance, and those no instance covers. Decimal sums: the
-- result must not depend on row order (R1).
with instances as (
    select
        cluster,
        node,
        uuid,
        gpu_i_id,
        min(gpu_model) as gpu_model,
        min(mig_profile) as mig_profile,
        min(compute_slices) as compute_slices,
        count(*) * getvariable('scrape_s') as observed_seconds,
        sum(cast(compute_slices * getvariable('scrape_s') as decimal(38, 12))) filter (where is_held)
            as held_slice_seconds,
        sum(cast(compute_slices * getvariable('scrape_s') * coalesce(busy, 0) as decimal(38, 12)))
            as busy_slice_seconds,
        sum(cast(compute_slices * getvariable('scrape_s') as decimal(38, 12))) filter (where not is_held)
            as free_slice_seconds
    from int_device_categories
    where gpu_i_id is not null
    group by cluster, node, uuid, gpu_i_id
),
instance_slices as (
    select uuid, ts_ms, sum(compute_slices) as slices
    from int_device_categories
    where gpu_i_id is not null
    group by all
),
unpartitioned as (
    select
        g.cluster,
        g.node,
        g.uuid,
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
    left join instance_slices as s on s.uuid = g.uuid and s.ts_ms = g.ts_ms
    where g.is_mig
    group by g.cluster, g.node, g.uuid
)
select
    cluster, getvariable('day')::date as day, node, uuid, gpu_i_id, gpu_model, mig_profile, compute_slices,
    observed_seconds,
    coalesce(held_slice_seconds, 0) as held_slice_seconds,
    coalesce(busy_slice_seconds, 0) as busy_slice_seconds,
    coalesce(free_slice_seconds, 0) as free_slice_seconds,
    cast(0 as decimal(38, 12)) as unpartitioned_slice_seconds
from instances
union all by name
select *, getvariable('day')::date as day
from unpartitioned
