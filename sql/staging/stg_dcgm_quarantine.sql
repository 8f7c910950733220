-- One row per (raw DCGM sample, reason) the accounting did not take as it came: dropped, value ignored,
-- clamped, deduplicated or merged. This file is where those decisions are made; stg_dcgm_samples applies
-- them and data_quality counts them per node (docs/reliability.md lists the reasons and why).
-- Values are judged only for the metrics the accounting reads; another metric's row (e.g. GPU_TEMP) only
-- proves that the series was scraped, whatever its value.
-- Nothing here holds the whole raw day: `judged` and `kept` are re-read from the raw files where they are
-- used (NOT MATERIALIZED), and only the rows with a reason, or under suspicion, are kept (bench/README.md).
with judged as not materialized (
    select
        *,
        case
            when cluster is distinct from getvariable('cluster') then 'other_cluster'
            -- R2: a sample outside the day and its lookback is not the day's; counted, never silently lost.
            when ts_ms is null or ts_ms < getvariable('window_start_ms') or ts_ms >= getvariable('day_end_ms')
                then 'timestamp_outside_day'
            -- R1: with no UUID there is no GPU to count the sample for.
            when uuid is null then 'missing_uuid'
            -- R3: a MIG instance without its profile (or a profile without an instance) cannot be weighed.
            when (gpu_i_id is null) <> (gpu_i_profile is null) then 'mig_labels_incomplete'
            when metric not in (
                'DCGM_FI_PROF_GR_ENGINE_ACTIVE',
                'DCGM_FI_DEV_GPU_UTIL',
                'DCGM_FI_DEV_FB_USED',
                'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION',
                'DCGM_FI_DEV_XID_ERRORS',
                'DCGM_FI_DEV_POWER_USAGE'
            ) then null
            -- The sample still counts (R1); its value says nothing about the device (R10).
            when value is null or not isfinite(value) then 'non_finite_value'
            -- None of these metrics can be negative: a broken exporter, not a reading near 0.
            when value < 0 then 'negative_value'
            -- Beyond any GPU (1 PiB of frame buffer, 10^15 J since boot, 1 MW): a corrupt value that would
            -- also overflow the exact DECIMAL sums (R1).
            when (metric = 'DCGM_FI_DEV_FB_USED' and value > 1e9)
                or (metric = 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION' and value > 1e18)
                or (metric = 'DCGM_FI_DEV_POWER_USAGE' and value > 1e6)
                then 'implausible_value'
            -- R10: utilization is a ratio; over 100 % (or 1) is clamped to full use.
            when (metric = 'DCGM_FI_DEV_GPU_UTIL' and value > 100)
                or (metric = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE' and value > 1)
                then 'over_range'
        end as reason
    from raw_dcgm_samples
),
row_decisions as materialized (
    select
        * exclude (reason),
        reason,
        case
            when reason in ('other_cluster', 'timestamp_outside_day', 'missing_uuid', 'mig_labels_incomplete')
                then 'dropped'
            when reason = 'over_range' then 'clamped'
            else 'value_ignored'
        end as action,
        case
            when reason = 'over_range' then case when metric = 'DCGM_FI_DEV_GPU_UTIL' then 100.0 else 1.0 end
        end as clean_value
    from judged
    where reason is not null
),
kept as not materialized (
    -- What reaches stg_dcgm_samples, with the value it is taken at.
    select * exclude (reason), value as clean_value from judged where reason is null
    union all
    select * exclude (reason, action) from row_decisions where action <> 'dropped'
),
read_values as not materialized (
    select *, hash(cluster, ts_ms, metric, hostname, uuid, gpu_i_id, namespace, pod, container) as sample_hash
    from kept
    where clean_value is not null and metric in (
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE',
        'DCGM_FI_DEV_GPU_UTIL',
        'DCGM_FI_DEV_FB_USED',
        'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION',
        'DCGM_FI_DEV_XID_ERRORS',
        'DCGM_FI_DEV_POWER_USAGE'
    )
),
repeated as materialized (
    -- Candidates by hash (cheap); the exact comparison is the window below, so a collision costs nothing.
    select sample_hash from read_values group by sample_hash having count(*) > 1
),
extra_copies as (
    -- R1: two rows of one metric for one sample (stg_dcgm_samples' grain) are one reading. Equal copies are
    -- deduplicated; copies that disagree keep the largest value (order-free) and are reported.
    select
        * exclude (sample_hash),
        max(clean_value) over sample as kept_value,
        row_number() over (sample order by clean_value desc) as copy_number
    from read_values
    semi join repeated using (sample_hash)
    window sample as (partition by cluster, ts_ms, metric, hostname, uuid, gpu_i_id, namespace, pod, container)
),
shared_uuids as materialized (
    -- One GPU UUID reported by two nodes at one time is one GPU (R1, R4): it is counted once, at the first
    -- node by name (int_gpu_samples), and the other node's rows are reported here.
    select cluster, uuid, ts_ms, min(hostname) as billed_node
    from kept
    group by all
    -- two or more distinct nodes (a null node counts as one): min <> max is a cheaper count(distinct) > 1
    having min(coalesce(hostname, chr(0))) <> max(coalesce(hostname, chr(0)))
)
select * from row_decisions
union all
select
    * exclude (clean_value, kept_value, copy_number),
    case when clean_value = kept_value then 'duplicate_sample' else 'conflicting_values' end as reason,
    case when clean_value = kept_value then 'deduplicated' else 'largest_kept' end as action,
    clean_value
from extra_copies
where copy_number > 1
union all
select k.* exclude (clean_value), 'uuid_on_several_nodes' as reason, 'merged' as action, k.clean_value
from kept as k
join shared_uuids as s on s.cluster = k.cluster and s.uuid = k.uuid and s.ts_ms = k.ts_ms
where k.hostname is distinct from s.billed_node
