-- One row per MIG instance sample (R1, R3): an instance of a GPU at a sample where the GPU is MIG-partitioned,
-- with its price, busy fraction, energy and schedulability; vgpu copies of one instance collapse into one row
-- (R6). Instances, GPUs, nodes, models and profiles by their integer keys (stg_dcgm_series). A GPU that is not
-- MIG-partitioned at a sample is its own device then: int_gpu_samples has it.
with instance_samples as (
    select
        d.device_key,
        s.ts_ms,
        -- The instance's GPU (stg_dcgm_series): grouped by, so that it costs no aggregate state.
        d.gpu_key,
        min(d.model_key) as model_key,
        min(d.profile_key) as profile_key,
        max(s.gr_engine_active) as gr_engine_active,
        max(s.gpu_util_pct) as gpu_util_pct,
        max(s.fb_used_mib) as fb_used_mib,
        -- Pod labels on a series of the instance name its holders (R5; int_keyed_device_holders).
        min(d.holder_key) as first_holder,
        max(d.holder_key) as last_holder
    from stg_dcgm_samples as s
    join stg_dcgm_series as d on d.series_key = s.series_key
    -- A scrape of the instance with nothing but an XID or power reading is no sample of it (R4).
    where s.in_day and s.observed and d.gpu_i_id is not null
    group by d.device_key, s.ts_ms, d.gpu_key
)
select
    i.device_key,
    i.ts_ms,
    i.gpu_key,
    -- The GPU's node, not the instance rows' own: an instance reported on another node (one UUID on two
    -- nodes) stays with its GPU, so R11 sums to capacity per node (R4).
    g.node_key,
    i.model_key,
    i.profile_key,
    c.weight,
    -- The price exactly (R12), in 1e-8 of the currency per hour: a MIG profile's own price per instance-hour,
    -- else the GPU's (int_device_classes says which, and the weight to apply).
    coalesce(c.device_price_units, g.gpu_price_units) as price_units,
    -- R10: GR_ENGINE_ACTIVE where present, else GPU_UTIL / 100; clamped to [0, 1].
    least(greatest(coalesce(i.gr_engine_active, i.gpu_util_pct / 100.0), 0.0), 1.0) as busy,
    -- R10: an instance that reports no frame buffer of its own takes its GPU's, apportioned by weight.
    coalesce(i.fb_used_mib, g.gpu_fb_used_mib * c.weight) as fb_used_mib,
    g.unhealthy,
    g.energy_joules * c.weight as energy_joules,
    g.energy_mj,
    g.unschedulable,
    i.first_holder is not null as labelled,
    -- The only pod its series name at the sample; null where none or several do (int_keyed_device_holders).
    case when i.first_holder = i.last_holder then i.first_holder end as holder_key,
    -- R3: the GPU sample's layout, an order-free key of its instances (device, profile, modelName).
    bit_xor(hash(i.device_key, i.profile_key, i.model_key)) over (partition by i.gpu_key, i.ts_ms) as mig_layout_key
from instance_samples as i
-- An instance series at a sample makes it a MIG sample of the GPU (int_gpu_samples.is_mig, R3).
join reference_gpu_samples as g on g.gpu_key = i.gpu_key and g.ts_ms = i.ts_ms and g.is_mig
join int_keyed_device_classes as c on c.model_key = i.model_key and c.profile_key = i.profile_key
