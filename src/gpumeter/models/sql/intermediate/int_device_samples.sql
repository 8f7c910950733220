-- One row per billable device sample (R1, R3): a GPU where it is not MIG-partitioned (int_gpu_samples), else a
-- MIG instance (int_mig_instance_samples), with names, class and price per hour, for audits and the dashboard
-- (stored under warehouse.persist_models: all; the marts read the keyed models).
with devices as (
    select
        device_key, ts_ms, gpu_key, node_key, model_key, profile_key, price_units, busy, fb_used_mib, unhealthy,
        energy_joules, energy_mj, unschedulable
    from int_keyed_device_samples
)
select
    v.cluster,
    k.ts_ms,
    v.device_id,
    v.uuid,
    v.gpu_i_id,
    n.node,
    c.model_name,
    c.gpu_model,
    c.mig_profile,
    c.compute_slices,
    c.weight,
    -- R8: the rate card's device price (weight × GPU price, or a MIG profile's own), else weight × the
    -- node's OpenCost price at the sample.
    coalesce(c.device_price_per_hour, c.weight * g.gpu_price_per_hour) as device_price_per_hour,
    k.price_units,
    k.busy,
    k.fb_used_mib,
    k.unhealthy,
    k.energy_joules,
    k.energy_mj,
    k.unschedulable
from devices as k
join stg_dcgm_devices as v on v.device_key = k.device_key
join int_keyed_device_classes as c on c.model_key = k.model_key and c.profile_key is not distinct from k.profile_key
join int_gpu_samples as g on g.gpu_key = k.gpu_key and g.ts_ms = k.ts_ms
left join stg_dcgm_nodes as n on n.node_key = k.node_key
