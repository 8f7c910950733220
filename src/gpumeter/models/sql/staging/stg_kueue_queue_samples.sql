-- One row per Kueue quota gauge series × sample of the day (R2): ClusterQueue nominal quota, usage and
-- borrowing limit, LocalQueue usage; copies of one sample collapse (R1).
select
    cluster,
    ts_ms,
    case metric
        when 'kueue_cluster_queue_nominal_quota' then 'nominal_quota'
        when 'kueue_cluster_queue_resource_usage' then 'resource_usage'
        when 'kueue_cluster_queue_borrowing_limit' then 'borrowing_limit'
        when 'kueue_local_queue_resource_usage' then 'local_queue_usage'
    end as quantity,
    nullif(labels ->> 'cohort', '') as cohort,
    nullif(labels ->> 'cluster_queue', '') as cluster_queue,
    nullif(labels ->> 'local_queue', '') as local_queue,
    nullif(labels ->> 'namespace', '') as namespace,
    labels ->> 'flavor' as flavor,
    labels ->> 'resource' as resource,
    max(value) as value
from raw_kube_samples
where cluster = getvariable('cluster')
  and metric in (
      'kueue_cluster_queue_nominal_quota',
      'kueue_cluster_queue_resource_usage',
      'kueue_cluster_queue_borrowing_limit',
      'kueue_local_queue_resource_usage'
  )
  and within_day(ts_ms)
group by all
