-- One row per Kueue quota gauge series × sample of the day (R2): ClusterQueue nominal quota, usage and
-- borrowing limit, LocalQueue usage; copies of one sample collapse (R1).
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
    max(p.value) as value
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
