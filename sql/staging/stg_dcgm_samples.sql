-- One row per device series sample (R1): the dcgm-exporter metrics of one scrape pivoted onto one row,
-- per (GPU, MIG instance, holder labels, timestamp). vgpu copies stay separate rows here (one per pod);
-- int_device_samples collapses them into one device (R6).
-- Window: the day plus a lookback before it, so that energy counters have a previous sample (R10).
-- Hostile telemetry is judged in stg_dcgm_quarantine, and applied here: dropped rows are taken out, an
-- ignored value stays as a sample with no value (it still proves the GPU was observed, R4), a clamped
-- value comes back at its clamp. Duplicates collapse in the group by (max: order-free, R1).
-- min() rather than any_value() wherever labels could disagree: the result must not depend on row
-- order (R1).
-- `in_day` marks the samples that belong to the day (R2, half-open).
with accepted as (
    -- Every copy of a judged raw row has its own quarantine row: taking all copies out and putting the
    -- quarantine's rows back keeps the count of copies (an anti join, cheap when little is quarantined).
    select r.*
    from raw_dcgm_samples as r
    anti join stg_dcgm_quarantine as q
        on q.action in ('dropped', 'value_ignored', 'clamped')
        and q.cluster is not distinct from r.cluster
        and q.ts_ms is not distinct from r.ts_ms
        and q.metric is not distinct from r.metric
        and q.value is not distinct from r.value
        and q.hostname is not distinct from r.hostname
        and q.uuid is not distinct from r.uuid
        and q.gpu is not distinct from r.gpu
        and q.model_name is not distinct from r.model_name
        and q.gpu_i_id is not distinct from r.gpu_i_id
        and q.gpu_i_profile is not distinct from r.gpu_i_profile
        and q.namespace is not distinct from r.namespace
        and q.pod is not distinct from r.pod
        and q.container is not distinct from r.container
        and q.vgpu is not distinct from r.vgpu
        and q.dra_claim_name is not distinct from r.dra_claim_name
        and q.dra_claim_namespace is not distinct from r.dra_claim_namespace
        and q.dra_driver_name is not distinct from r.dra_driver_name
        and q.dra_pool_name is not distinct from r.dra_pool_name
        and q.dra_device_name is not distinct from r.dra_device_name
    union all
    select * exclude (reason, action, clean_value) replace (clean_value as value)
    from stg_dcgm_quarantine
    where action in ('value_ignored', 'clamped')
)
select
    cluster,
    ts_ms,
    ts_ms >= getvariable('day_start_ms') and ts_ms < getvariable('day_end_ms') as in_day,
    hostname as node,
    uuid,
    uuid || coalesce('/' || gpu_i_id, '') as device_id,
    min(gpu) as gpu_index,
    min(model_name) as model_name,
    gpu_i_id,
    min(gpu_i_profile) as mig_profile,
    namespace,
    pod,
    container,
    min(dra_pool_name) as dra_pool_name,
    min(dra_device_name) as dra_device_name,
    max(value) filter (where metric = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE') as gr_engine_active,
    max(value) filter (where metric = 'DCGM_FI_DEV_GPU_UTIL') as gpu_util_pct,
    max(value) filter (where metric = 'DCGM_FI_DEV_FB_USED') as fb_used_mib,
    max(value) filter (where metric = 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION') as energy_mj,
    max(value) filter (where metric = 'DCGM_FI_DEV_XID_ERRORS') as xid_error,
    max(value) filter (where metric = 'DCGM_FI_DEV_POWER_USAGE') as power_w
from accepted
group by cluster, ts_ms, hostname, uuid, gpu_i_id, namespace, pod, container
