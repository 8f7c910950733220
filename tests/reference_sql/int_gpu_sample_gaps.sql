-- int_gpu_sample_gaps as SQL: the gaps between a GPU's consecutive observed samples (the lookback's last one
-- before the day's first included), counted per node of the later sample, in whole seconds up to an hour.
with gpu_times as (
    select d.gpu_key, s.ts_ms, min(case when s.observed then d.node_key end) as node_key
    from stg_dcgm_samples as s
    join stg_dcgm_series as d on d.series_key = s.series_key
    group by d.gpu_key, s.ts_ms
    having bool_or(s.observed)
),
gaps as (
    select node_key, ts_ms, ts_ms - lag(ts_ms) over (partition by gpu_key order by ts_ms) as gap_ms
    from gpu_times
)
select node_key, least((gap_ms + 500) // 1000, 3600)::integer as gap_s, count(*) as gaps
from gaps
where gap_ms is not null and within_day(ts_ms)
group by all
