-- One row per scrape target × scrape time in the day and its lookback (R1a): when each kube-state-metrics,
-- OpenCost or Kueue target was scraped, and its next scrape.
select
    scrape_target,
    ts_ms,
    lead(ts_ms) over by_time as next_scrape_ms,
    sum(case when ts_ms - prev_ms <= getvariable('lookback_ms') then 1 else 2 end) over by_time as scrape_index
from (
    select *, lag(ts_ms) over (partition by scrape_target order by ts_ms) as prev_ms
    from (
        -- The raw kube table keeps every scrape of every target (a row with no metric: gpumeter.ingest.kube_spans).
        select distinct target as scrape_target, ts_ms
        from raw_kube_samples
        where metric is null and in_window(cluster, ts_ms)
    )
)
window by_time as (partition by scrape_target order by ts_ms)
