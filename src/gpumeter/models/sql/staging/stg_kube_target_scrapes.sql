-- One row per scrape target × scrape time in the day and its lookback (R1a): when each kube-state-metrics,
-- OpenCost or Kueue target was scraped, and its next scrape.
with scrapes as (
    -- The raw kube table keeps every scrape of every target (a row with no metric: gpumeter.ingest.kube_spans).
    select distinct target as scrape_target, ts_ms
    from raw_kube_samples
    where metric is null and in_window(cluster, ts_ms)
),
ordered as (
    select
        *,
        lag(ts_ms) over by_target as prev_ms,
        lead(ts_ms) over by_target as own_next_ms,
        -- The job of a `<job>/<instance>` target (a job may hold a '/', e.g. a PodMonitor's
        -- `<namespace>/<name>`; an instance, host:port, does not).
        case when contains(scrape_target, '/') then regexp_replace(scrape_target, '/[^/]*$', '') end as job
    from scrapes
    window by_target as (partition by scrape_target order by ts_ms)
),
replaced as (
    -- A scrape its target does not follow within the lookback, followed instead by the first scrape of a new
    -- instance of its job (the exporter restarted under a new address): that scrape ends what it showed, as
    -- its own next scrape would have. A new instance is one first scraped after it: the job's other
    -- instances that run alongside (kube-state-metrics sharded by object) show other objects and end
    -- nothing. A last scrape within the lookback of the day's end is left as it is: the target may go on
    -- after the day, and an instance first scraped then may be a shard's.
    select o.scrape_target, o.ts_ms, min(r.first_ms) as replaced_ms
    from ordered as o
    join (select job, scrape_target, min(ts_ms) as first_ms from ordered group by all) as r
        on r.job = o.job
        and r.first_ms > o.ts_ms
        and r.first_ms <= o.ts_ms + getvariable('lookback_ms')
    where o.own_next_ms - o.ts_ms > getvariable('lookback_ms')
       or (o.own_next_ms is null and o.ts_ms < getvariable('day_end_ms') - getvariable('lookback_ms'))
    group by all
)
select
    o.scrape_target,
    o.ts_ms,
    coalesce(r.replaced_ms, o.own_next_ms) as next_scrape_ms,
    sum(case when o.ts_ms - o.prev_ms <= getvariable('lookback_ms') then 1 else 2 end)
        over (partition by o.scrape_target order by o.ts_ms) as scrape_index
from ordered as o
left join replaced as r on r.scrape_target = o.scrape_target and r.ts_ms = o.ts_ms
