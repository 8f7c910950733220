-- One row per kube series span of the day and its lookback (R1a): a run of its target's consecutive scrapes
-- (stg_kube_target_scrapes.scrape_index, no gap longer than kube_lookback_seconds inside) that show the series
-- with one value, as the raw kube table stores it (gpumeter.ingest.kube_spans), cut to the window and at the
-- target's gaps; with the scrape numbers of its first and last sample and until when its last sample holds.
with segments as (
    -- The target's runs of consecutive scrape numbers.
    select scrape_target, min(ts_ms) as from_ms, max(ts_ms) as to_ms
    from (
        select scrape_target, ts_ms, scrape_index - row_number() over (partition by scrape_target order by ts_ms) as segment
        from stg_kube_target_scrapes
    )
    group by scrape_target, segment
),
spans as (
    select *, scrape_target(target, metric) as scrape_target
    from raw_kube_samples
    where metric is not null
      and cluster = getvariable('cluster')
      and last_ms >= getvariable('window_start_ms')
      and ts_ms < getvariable('day_end_ms')
),
pieces as (
    select
        s.cluster,
        s.metric,
        s.labels,
        s.target,
        s.scrape_target,
        s.value,
        s.copies,
        greatest(s.ts_ms, g.from_ms) as from_ms,
        least(s.last_ms, g.to_ms) as to_ms
    from spans as s
    join segments as g on g.scrape_target = s.scrape_target and s.ts_ms <= g.to_ms and s.last_ms >= g.from_ms
),
starts as materialized (
    -- Materialized, so that each piece meets its first scrape, then its last: left to itself, the planner
    -- can join the two scrape lookups to each other first, every scrape of a target with every other one.
    select p.*, a.scrape_index as from_index
    from pieces as p
    join stg_kube_target_scrapes as a on a.scrape_target = p.scrape_target and a.ts_ms = p.from_ms
)
select
    s.*,
    b.scrape_index as to_index,
    holds_until(b.ts_ms, b.next_scrape_ms) as until_ms
from starts as s
join stg_kube_target_scrapes as b on b.scrape_target = s.scrape_target and b.ts_ms = s.to_ms
