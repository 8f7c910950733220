-- One row per observed device sample: its R11 category (unhealthy, allocated_active, allocated_idle,
-- unschedulable or free) and its GPU-equivalent seconds, with names, for audits and the dashboard
-- (stored under warehouse.persist_models: all; the marts compute the category from the keyed models).
with devices as (
    select device_key, ts_ms, node_key, model_key, profile_key, busy, unhealthy, unschedulable, labelled
    from int_keyed_device_samples
),
claimed as (
    select distinct device_key, ts_ms from int_keyed_device_holders where holder_source = 'dra'
)
select
    v.cluster,
    k.ts_ms,
    n.node,
    v.uuid,
    v.gpu_i_id,
    v.device_id,
    c.gpu_model,
    c.mig_profile,
    c.compute_slices,
    c.weight,
    k.busy,
    k.labelled or h.device_key is not null as is_held,
    capacity_category(k.unhealthy, k.labelled or h.device_key is not null, k.busy, k.unschedulable) as category,
    sample_seconds(c.weight) as gpu_seconds
from devices as k
join stg_dcgm_devices as v on v.device_key = k.device_key
join int_keyed_device_classes as c on c.model_key = k.model_key and c.profile_key is not distinct from k.profile_key
left join stg_dcgm_nodes as n on n.node_key = k.node_key
left join claimed as h on h.device_key = k.device_key and h.ts_ms = k.ts_ms
