-- The pod labels (label_<key>) of each pod seen in the day, from its latest kube_pod_labels sample (R7).
select
    cluster,
    labels ->> 'namespace' as namespace,
    labels ->> 'pod' as pod,
    arg_max(labels, ts_ms) as labels_json
from raw_kube_samples
where cluster = getvariable('cluster')
  and metric = 'kube_pod_labels'
  and ts_ms >= getvariable('window_start_ms')
  and ts_ms < getvariable('day_end_ms')
group by all
