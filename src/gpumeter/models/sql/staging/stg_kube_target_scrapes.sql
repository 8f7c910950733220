-- One row per scrape of a kube-state-metrics / OpenCost / Kueue target in the day and its lookback (R1a):
-- the times at which the target was scraped, known from all of its series, and the time of its next scrape.
-- A series has ended at the first later scrape of its target that does not show it (Prometheus staleness).
-- A row without a `target` (a source that does not name it) belongs to the exporter its metric comes from
-- (macro scrape_target). The models that read a series' state join their samples to this table once
-- aggregated (macro holds_until).
-- `scrape_index` numbers the target's scrapes, skipping one where the target was not scraped for longer than
-- kube_lookback_seconds: a series shown at scrapes n and n + 1 was shown all along, so the spans of a series
-- are found by counting (its samples' scrape_index minus their rank), without comparing each to the last.
select
    scrape_target,
    ts_ms,
    lead(ts_ms) over by_time as next_scrape_ms,
    sum(case when ts_ms - prev_ms <= getvariable('lookback_ms') then 1 else 2 end) over by_time as scrape_index
from (
    select *, lag(ts_ms) over (partition by scrape_target order by ts_ms) as prev_ms
    from (
        -- (target, metric, time) first: the metric's namespace is then taken once per metric, not per row.
        select distinct scrape_target(target, metric) as scrape_target, ts_ms
        from (
            select distinct target, metric, ts_ms
            from raw_kube_samples
            where in_window(cluster, ts_ms)
        )
    )
)
window by_time as (partition by scrape_target order by ts_ms)
