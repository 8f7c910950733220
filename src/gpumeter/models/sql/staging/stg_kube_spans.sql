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
        least(s.last_ms, g.to_ms) as to_ms,
        g.to_ms as run_to_ms
    from spans as s
    join segments as g on g.scrape_target = s.scrape_target and s.ts_ms <= g.to_ms and s.last_ms >= g.from_ms
),
starts as materialized (
    -- Materialized, so that each piece meets its first scrape, then its last, never every scrape with every other.
    select p.*, a.scrape_index as from_index
    from pieces as p
    join stg_kube_target_scrapes as a on a.scrape_target = p.scrape_target and a.ts_ms = p.from_ms
),
held as (
    select
        s.*,
        b.scrape_index as to_index,
        holds_until(b.ts_ms, b.next_scrape_ms) as until_ms,
        s.to_ms = s.run_to_ms as ends_run
    from starts as s
    join stg_kube_target_scrapes as b on b.scrape_target = s.scrape_target and b.ts_ms = s.to_ms
),
takers as (
    -- Targets scraped within the lookback after another target's run ends: what may take its series over.
    select distinct e.scrape_target, t.scrape_target as taker
    from segments as e
    join stg_kube_target_scrapes as t
        on t.scrape_target <> e.scrape_target
        and t.ts_ms > e.to_ms
        and t.ts_ms <= e.to_ms + getvariable('lookback_ms')
),
taken_over as (
    -- A series whose target's run ends with it (the exporter stopped, restarted, or its job was removed)
    -- and that another target showed too, up to then or within the lookback after (a rollout that started the
    -- new instance first, a second job): its last sample stands until the other target's first scrape after
    -- it, which shows the series again, with another value, or no longer (R1a). Held for the lookback, it
    -- would outlast what the other target says.
    select
        e.scrape_target, e.metric, e.labels, e.value, e.copies, e.from_ms,
        min(greatest(o.from_ms, n.ts_ms)) as taken_over_ms
    from held as e
    join takers as k on k.scrape_target = e.scrape_target
    join held as o
        on o.scrape_target = k.taker
        and o.cluster = e.cluster
        and o.metric = e.metric
        and o.labels = e.labels
        and o.until_ms > e.to_ms
        and o.from_ms < e.until_ms
    asof join stg_kube_target_scrapes as n on n.scrape_target = o.scrape_target and n.ts_ms > e.to_ms
    where e.ends_run
    group by all
)
select
    h.* exclude (until_ms, ends_run, run_to_ms),
    least(h.until_ms, t.taken_over_ms) as until_ms
from held as h
left join taken_over as t
    on t.scrape_target = h.scrape_target
    and t.metric = h.metric
    and t.labels = h.labels
    and t.value is not distinct from h.value
    and t.copies is not distinct from h.copies
    and t.from_ms = h.from_ms
