-- One row per billable device sample (R1, R3): a whole GPU, or one MIG instance, with its class, price, busy
-- fraction, energy and schedulability; vgpu copies of one device collapse into one row (R6).
with device_samples as (
    select
        d.cluster,
        s.ts_ms,
        d.device_id,
        d.uuid,
        d.gpu_i_id,
        min(d.model_name) as model_name,
        min(d.mig_profile) as mig_profile,
        max(s.gr_engine_active) as gr_engine_active,
        max(s.gpu_util_pct) as gpu_util_pct,
        max(s.fb_used_mib) as fb_used_mib
    from stg_dcgm_samples as s
    join stg_dcgm_series as d on d.series_key = s.series_key
    where s.in_day
    group by d.cluster, s.ts_ms, d.device_id, d.uuid, d.gpu_i_id
)
select
    d.cluster,
    d.ts_ms,
    d.device_id,
    d.uuid,
    d.gpu_i_id,
    -- The GPU's node, not the device rows' own: a MIG instance reported on another node (one UUID on two
    -- nodes) stays with its GPU, so R11 sums to capacity per node (R4).
    g.node,
    d.model_name,
    c.gpu_model,
    d.mig_profile,
    c.compute_slices,
    c.weight,
    -- R8: the rate card's device price (weight × GPU price, or a MIG profile's own), else weight × the
    -- node's OpenCost price at the sample.
    coalesce(c.device_price_per_hour, c.weight * g.gpu_price_per_hour) as device_price_per_hour,
    -- The same price exactly (R12), in 1e-8 of the currency per hour: a MIG profile's own price per
    -- instance-hour, else the GPU's (int_device_classes says which, and the weight to apply).
    coalesce(c.device_price_units, g.gpu_price_units) as price_units,
    -- R10: GR_ENGINE_ACTIVE where present, else GPU_UTIL / 100; clamped to [0, 1].
    least(greatest(coalesce(d.gr_engine_active, d.gpu_util_pct / 100.0), 0.0), 1.0) as busy,
    -- R10: a MIG instance that reports no frame buffer of its own takes its GPU's, apportioned by weight.
    coalesce(d.fb_used_mib, case when d.gpu_i_id is not null then g.gpu_fb_used_mib * c.weight end) as fb_used_mib,
    g.unhealthy,
    g.energy_joules * c.weight as energy_joules,
    g.energy_mj,
    u.node is not null as unschedulable
from device_samples as d
-- The GPU's mode at this sample decides what its devices are (R3).
join int_gpu_samples as g on g.uuid = d.uuid and g.ts_ms = d.ts_ms and g.is_mig = (d.gpu_i_id is not null)
join int_device_classes as c
    on c.model_name = d.model_name and c.mig_profile is not distinct from d.mig_profile
-- R11: spans are disjoint per node, so a device sample meets at most one.
left join int_node_unschedulable_spans as u
    on u.node = g.node and d.ts_ms >= u.from_ms and d.ts_ms < u.until_ms
