-- One row per Kueue quota gauge series × sample of the day (R2): ClusterQueue nominal quota, usage and
-- borrowing limit, LocalQueue usage; copies of one sample collapse (R1), and each sample stands until the
-- series' next sample or its target's next scrape (R1a).
with samples as (
    select
        p.cluster,
        s.ts_ms,
        case p.metric
            when 'kueue_cluster_queue_nominal_quota' then 'nominal_quota'
            when 'kueue_cluster_queue_resource_usage' then 'resource_usage'
            when 'kueue_cluster_queue_borrowing_limit' then 'borrowing_limit'
            when 'kueue_local_queue_resource_usage' then 'local_queue_usage'
        end as quantity,
        nullif(p.labels ->> 'cohort', '') as cohort,
        nullif(p.labels ->> 'cluster_queue', '') as cluster_queue,
        nullif(p.labels ->> 'local_queue', '') as local_queue,
        nullif(p.labels ->> 'namespace', '') as namespace,
        p.labels ->> 'flavor' as flavor,
        p.labels ->> 'resource' as resource,
        max(p.value) as value,
        max(stands_until(s.ts_ms, s.next_scrape_ms)) as stands_until_ms
    from stg_kube_spans as p
    -- A span's samples: its target's scrapes from its first to its last sample.
    join stg_kube_target_scrapes as s
        on s.scrape_target = p.scrape_target and s.ts_ms >= p.from_ms and s.ts_ms <= p.to_ms
    where p.metric in (
          'kueue_cluster_queue_nominal_quota',
          'kueue_cluster_queue_resource_usage',
          'kueue_cluster_queue_borrowing_limit',
          'kueue_local_queue_resource_usage'
      )
      and within_day(s.ts_ms)
    group by all
)
select
    cluster,
    ts_ms,
    quantity,
    cohort,
    cluster_queue,
    local_queue,
    namespace,
    flavor,
    resource,
    value,
    -- Kueue scraped by two targets: a sample stands no later than the series' next one from either, so that
    -- each moment counts once; scraped more or less often than Δ, each sample stands for its own interval.
    cast(least(
        stands_until_ms,
        coalesce(
            lead(ts_ms) over (
                partition by cluster, quantity, cohort, cluster_queue, local_queue, namespace, flavor, resource
                order by ts_ms
            ),
            stands_until_ms
        )
    ) - ts_ms as bigint) as stands_for_ms
from samples
