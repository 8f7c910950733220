-- One row per device series sample (R1): the dcgm-exporter metrics of one scrape pivoted onto one row, per
-- (series, timestamp). The series' labels are in stg_dcgm_series (joined by `series_key`); vgpu copies stay
-- separate series here (one per pod); int_device_samples collapses them into one device (R6).
-- Window: the day plus a lookback before it, so that energy counters have a previous sample (R10).
-- Hostile telemetry is judged in stg_dcgm_judged and applied here: dropped rows are taken out, an ignored
-- value stays as a sample with no value (it still proves the GPU was observed, R4), a clamped value comes
-- back at its clamp. Duplicates collapse in the group by (max: order-free, R1); stg_dcgm_quarantine reports
-- them, starting from `has_copies`.
-- `in_day` marks the samples that belong to the day (R2, half-open).
with pivoted as (
    select
        series_key,
        ts_ms,
        max(clean_value) filter (where metric = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE') as gr_engine_active,
        max(clean_value) filter (where metric = 'DCGM_FI_DEV_GPU_UTIL') as gpu_util_pct,
        max(clean_value) filter (where metric = 'DCGM_FI_DEV_FB_USED') as fb_used_mib,
        max(clean_value) filter (where metric = 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION') as energy_mj,
        max(clean_value) filter (where metric = 'DCGM_FI_DEV_XID_ERRORS') as xid_error,
        max(clean_value) filter (where metric = 'DCGM_FI_DEV_POWER_USAGE') as power_w,
        count(clean_value) filter (where value_read) as read_values
    from stg_dcgm_judged
    where not dropped
    group by series_key, ts_ms
)
select
    series_key,
    ts_ms,
    ts_ms >= getvariable('day_start_ms') and ts_ms < getvariable('day_end_ms') as in_day,
    gr_engine_active,
    gpu_util_pct,
    fb_used_mib,
    energy_mj,
    xid_error,
    power_w,
    -- R1: some metric was read more than once for this sample (each metric read gives one value above).
    read_values > (gr_engine_active is not null)::int + (gpu_util_pct is not null)::int
        + (fb_used_mib is not null)::int + (energy_mj is not null)::int + (xid_error is not null)::int
        + (power_w is not null)::int as has_copies
from pivoted
