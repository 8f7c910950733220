-- One row per DCGM series × timestamp of the day and its lookback with a reading of a field the accounting reads
-- (R1, R4): the metrics of one scrape pivoted onto one row, hostile values judged (stg_dcgm_judged).
with pivoted as (
    select
        series_key,
        ts_ms,
        max(clean_value) filter (where metric = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE') as gr_engine_active,
        max(clean_value) filter (where metric = 'DCGM_FI_DEV_GPU_UTIL') as gpu_util_pct,
        max(clean_value) filter (where metric = 'DCGM_FI_DEV_FB_USED') as fb_used_mib,
        max(clean_value) filter (where metric = 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION') as energy_mj,
        max(clean_value) filter (where metric = 'DCGM_FI_DEV_XID_ERRORS') as xid_error,
        count(clean_value) as read_values,
        -- R4 (our reading, docs/rules.md): the series is observed at this time only with a reading the
        -- accounting uses, whatever its value (a NaN utilization is a sample without a value). An XID reading
        -- alone is not a sample: the XID still tells the health of its GPU, wherever another series
        -- of the GPU is observed then (int_gpu_samples).
        bool_or(observes) as observed
    from stg_dcgm_judged
    -- Rows of fields never read (GPU_TEMP, FB_FREE, POWER_USAGE) tell nothing: the Prometheus source does not
    -- pull them.
    where not dropped and value_read
    group by series_key, ts_ms
)
select
    series_key,
    ts_ms,
    within_day(ts_ms) as in_day,
    observed,
    gr_engine_active,
    gpu_util_pct,
    fb_used_mib,
    energy_mj,
    xid_error,
    -- R1: some metric was read more than once for this sample (each metric read gives one value above).
    read_values > (gr_engine_active is not null)::int + (gpu_util_pct is not null)::int
        + (fb_used_mib is not null)::int + (energy_mj is not null)::int + (xid_error is not null)::int
        as has_copies
from pivoted
