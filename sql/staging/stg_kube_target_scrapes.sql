-- One row per scrape of a kube-state-metrics / OpenCost / Kueue target in the day and its lookback (R1a):
-- the times at which the target was scraped, known from all of its series, and the time of its next scrape.
-- A series has ended at the first later scrape of its target that does not show it (Prometheus staleness).
-- A row without a `target` (a source that does not name it) belongs to the exporter its metric comes from,
-- named by the metric's namespace (kube, kueue, node).
select
    scrape_target,
    ts_ms,
    lead(ts_ms) over (partition by scrape_target order by ts_ms) as next_scrape_ms
from (
    select distinct coalesce(target, split_part(metric, '_', 1)) as scrape_target, ts_ms
    from raw_kube_samples
    where cluster = getvariable('cluster')
      and ts_ms >= getvariable('window_start_ms')
      and ts_ms < getvariable('day_end_ms')
)
