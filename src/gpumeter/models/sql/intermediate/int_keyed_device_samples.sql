-- One row per billable device sample (R1, R3): a GPU's where it is not MIG-partitioned (int_gpu_samples), else a
-- MIG instance's (int_mig_instance_samples), by integer keys. Ephemeral: a view, so that each reader takes the
-- columns it needs and DuckDB reads no others.
select
    device_key, ts_ms, gpu_key, node_key, model_key, null::integer as profile_key, weight, price_units, busy,
    fb_used_mib, unhealthy,
    -- A whole GPU's energy is its own; an instance's is its GPU's, apportioned by weight already (R10).
    energy_joules * weight as energy_joules,
    energy_mj, unschedulable, labelled, holder_key
from int_gpu_samples
where not is_mig
union all
select
    device_key, ts_ms, gpu_key, node_key, model_key, profile_key, weight, price_units, busy, fb_used_mib, unhealthy,
    energy_joules, energy_mj, unschedulable, labelled, holder_key
from int_mig_instance_samples
