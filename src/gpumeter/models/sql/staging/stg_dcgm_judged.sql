-- One row per raw DCGM row: the judgement of its own labels and value (a reason where it is not taken as it
-- came, whether it is dropped, the value it is taken at), with its series key. Ephemeral: a view.
with read_rows as (
    -- The raw columns by name, so that a column added to the raw schema is not carried on unread;
    -- `value_read`: the row is of a metric whose value the accounting reads (the one list of them).
    select
        cluster, ts_ms, metric, value, hostname, uuid, gpu, model_name, gpu_i_id, gpu_i_profile, namespace, pod,
        container, vgpu, dra_claim_name, dra_claim_namespace, dra_driver_name, dra_pool_name, dra_device_name,
        -- The series a row belongs to: one integer for every label the accounting reads, stored with the row
        -- or a hash of those labels (gpumeter.models.runner), so that the day's largest group-by
        -- (the sample pass) groups one integer instead of nine strings; stg_dcgm_series checks that each
        -- series has one key and no two series share one.
        series_key,
        holder_unverified,
        -- A list search, not `metric in (...)`, which DuckDB would plan as a join paid on every raw row.
        -- A row with no metric name is of no metric read (false, where an IN would say null). POWER_USAGE is
        -- not read: no figure uses a sample's power, and the Prometheus source does not pull it.
        list_position([
            'DCGM_FI_PROF_GR_ENGINE_ACTIVE',
            'DCGM_FI_DEV_GPU_UTIL',
            'DCGM_FI_DEV_FB_USED',
            'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION',
            'DCGM_FI_DEV_XID_ERRORS'
        ], metric) is not null as value_read,
        -- `observes`: a row of this metric makes its series observed at its time (R4, our reading: a reading
        -- the accounting uses; an XID reading alone does not make one, nor does a field not read, e.g. power).
        metric in (
            'DCGM_FI_PROF_GR_ENGINE_ACTIVE',
            'DCGM_FI_DEV_GPU_UTIL',
            'DCGM_FI_DEV_FB_USED',
            'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION'
        ) as observes
    from raw_dcgm_samples
)
-- Each judgement column is its own expression, none built on another, so that no judgement is evaluated twice.
-- No macros: the view is also made on its own, from the raw rows and the variables alone
-- (tests/test_hostile_telemetry.py).
select
    *,
    -- Rows that are not the day's device samples at all (R1, R2, R3): the first four reasons below. Written as
    -- the negation of what a kept row is, so that a reader's `not dropped` can be settled from row group statistics.
    not (
        cluster is not distinct from getvariable('cluster')
        and ts_ms is not null and ts_ms >= getvariable('window_start_ms') and ts_ms < getvariable('day_end_ms')
        and uuid is not null
        and (gpu_i_id is null) = (gpu_i_profile is null)
    ) as dropped,
    -- Whether the row has a reason below: the same conditions as one filter for int_dcgm_quarantine, each value
    -- test before its metric's, so that a row with none (nearly every row) costs few string comparisons; the
    -- metric compared as `is not distinct from`, so that a row with no metric name is false here, never null.
    cluster is distinct from getvariable('cluster')
        or ts_ms is null or ts_ms < getvariable('window_start_ms') or ts_ms >= getvariable('day_end_ms')
        or uuid is null
        or (gpu_i_id is null) <> (gpu_i_profile is null)
        or ((value is null or not isfinite(value) or value < 0) and value_read)
        or (value > 1e9 and metric is not distinct from 'DCGM_FI_DEV_FB_USED')
        or (value > 1e18 and metric is not distinct from 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION')
        or (value > 100 and metric is not distinct from 'DCGM_FI_DEV_GPU_UTIL')
        or (value > 1 and metric is not distinct from 'DCGM_FI_PROF_GR_ENGINE_ACTIVE') as quarantined,
    case
        when cluster is distinct from getvariable('cluster') then 'other_cluster'
        -- R2: a sample outside the day and its lookback is not the day's; counted, never silently lost.
        when ts_ms is null or ts_ms < getvariable('window_start_ms') or ts_ms >= getvariable('day_end_ms')
            then 'timestamp_outside_day'
        -- R1: with no UUID there is no GPU to count the sample for.
        when uuid is null then 'missing_uuid'
        -- R3: a MIG instance without its profile (or a profile without an instance) cannot be weighed.
        when (gpu_i_id is null) <> (gpu_i_profile is null) then 'mig_labels_incomplete'
        when not value_read then null
        -- The sample still counts (R1); its value says nothing about the device (R10).
        when value is null or not isfinite(value) then 'non_finite_value'
        -- None of these metrics can be negative: a broken exporter, not a reading near 0.
        when value < 0 then 'negative_value'
        -- Beyond any GPU (1 PiB of frame buffer, 10^15 J since boot): a corrupt value that would
        -- also overflow the exact DECIMAL sums (R1).
        when (metric = 'DCGM_FI_DEV_FB_USED' and value > 1e9)
            or (metric = 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION' and value > 1e18)
            then 'implausible_value'
        -- R10: utilization is a ratio; over 100 % (or 1) is clamped to full use.
        when (metric = 'DCGM_FI_DEV_GPU_UTIL' and value > 100)
            or (metric = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE' and value > 1)
            then 'over_range'
    end as reason,
    -- The value a row that is not dropped is taken at: as it came, none (an ignored value), or its clamp. Each
    -- value test comes before its metric's, as in `quarantined`; a metric not read has none of the metrics
    -- named below, so its value is taken as it came.
    case
        when (value is null or not isfinite(value) or value < 0) and value_read then null
        when (value > 1e9 and metric = 'DCGM_FI_DEV_FB_USED')
            or (value > 1e18 and metric = 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION')
            then null
        when value > 100 and metric = 'DCGM_FI_DEV_GPU_UTIL' then 100.0
        when value > 1 and metric = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE' then 1.0
        else value
    end as clean_value
from read_rows
