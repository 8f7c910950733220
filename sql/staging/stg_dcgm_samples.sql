-- One row per device series sample (R1): the dcgm-exporter metrics of one scrape pivoted onto one row,
-- per (GPU, MIG instance, holder labels, timestamp). vgpu copies stay separate rows here (one per pod);
-- int_device_samples collapses them into one device (R6).
-- Window: the day plus a lookback before it, so that energy counters have a previous sample (R10).
-- min() rather than any_value() wherever labels could disagree: the result must not depend on row
-- order (R1).
-- `in_day` marks the samples that belong to the day (R2, half-open).
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
    -- Non-finite values say nothing about the device: null, never a number (R10).
    max(value) filter (where metric = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE' and isfinite(value)) as gr_engine_active,
    max(value) filter (where metric = 'DCGM_FI_DEV_GPU_UTIL' and isfinite(value)) as gpu_util_pct,
    max(value) filter (where metric = 'DCGM_FI_DEV_FB_USED' and isfinite(value)) as fb_used_mib,
    max(value) filter (where metric = 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION' and isfinite(value)) as energy_mj,
    max(value) filter (where metric = 'DCGM_FI_DEV_XID_ERRORS' and isfinite(value)) as xid_error,
    max(value) filter (where metric = 'DCGM_FI_DEV_POWER_USAGE' and isfinite(value)) as power_w
from raw_dcgm_samples
where cluster = getvariable('cluster')
  and ts_ms >= getvariable('window_start_ms')
  and ts_ms < getvariable('day_end_ms')
  and uuid is not null
group by cluster, ts_ms, hostname, uuid, gpu_i_id, namespace, pod, container
