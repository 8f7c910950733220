-- One row per observed device sample: its R11 category (unhealthy, allocated_active, allocated_idle,
-- unschedulable or unallocated) and its GPU-equivalent seconds.
with held as (
    select distinct device_id, ts_ms from int_device_holders
)
select
    d.cluster,
    d.ts_ms,
    d.node,
    d.uuid,
    d.gpu_i_id,
    d.device_id,
    d.gpu_model,
    d.mig_profile,
    d.compute_slices,
    d.weight,
    d.busy,
    h.device_id is not null as is_held,
    case
        when d.unhealthy then 'unhealthy'
        -- A held device with no utilization series shows no evidence of work: idle (docs/accounting.md).
        when h.device_id is not null and coalesce(d.busy, 0) >= getvariable('idle_threshold') then 'allocated_active'
        when h.device_id is not null then 'allocated_idle'
        when d.unschedulable then 'unschedulable'
        else 'unallocated'
    end as category,
    sample_seconds(d.weight) as gpu_seconds
from int_device_samples as d
left join held as h on h.device_id = d.device_id and h.ts_ms = d.ts_ms
