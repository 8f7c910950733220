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
firsts as (
    select job, scrape_target, min(ts_ms) as first_ms from ordered group by all
),
restarted as (
    -- A scrape its target does not follow within the lookback, followed instead by the first scrape of a new
    -- instance of its job (the exporter restarted under a new address): that scrape ends what it showed, as
    -- its own next scrape would have. A new instance is one first scraped after it: the job's other
    -- instances that run alongside (kube-state-metrics sharded by object) show other objects and end
    -- nothing.
    select o.scrape_target, o.ts_ms, r.scrape_target as new_target, r.first_ms
    from ordered as o
    join firsts as r
        on r.job = o.job
        and r.first_ms > o.ts_ms
        and r.first_ms <= o.ts_ms + getvariable('lookback_ms')
    where o.own_next_ms - o.ts_ms > getvariable('lookback_ms') or o.own_next_ms is null
),
same_objects as (
    -- The target's last scrape within the lookback of the day's end: it may go on after the day, unseen, and
    -- an instance first scraped after it may be a new shard. It was restarted (or has a replica) where the
    -- new instance shows a series it showed too: a shard shows other objects.
    select distinct c.scrape_target, c.ts_ms, c.first_ms
    from restarted as c
    join raw_kube_samples as a
        on scrape_target(a.target, a.metric) = c.scrape_target
    join raw_kube_samples as b
        on scrape_target(b.target, b.metric) = c.new_target
        and b.metric = a.metric
        and b.labels = a.labels
    where c.ts_ms >= getvariable('day_end_ms') - getvariable('lookback_ms')
      and a.metric is not null
      and a.cluster = getvariable('cluster')
      and b.cluster = getvariable('cluster')
),
replaced as (
    select scrape_target, ts_ms, min(first_ms) as replaced_ms
    from (
        select scrape_target, ts_ms, first_ms
        from restarted
        where ts_ms < getvariable('day_end_ms') - getvariable('lookback_ms')
        union all
        select scrape_target, ts_ms, first_ms from same_objects
    )
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
