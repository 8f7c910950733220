-- kube_pod_status_phase: one row per pod sample, Running or not (R5 uses Running == 1).
select
    cluster,
    ts_ms,
    labels ->> 'namespace' as namespace,
    labels ->> 'pod' as pod,
    labels ->> 'uid' as pod_uid,
    bool_or(labels ->> 'phase' = 'Running' and value = 1) as running
from raw_kube_samples
where cluster = getvariable('cluster')
  and metric = 'kube_pod_status_phase'
  and ts_ms >= getvariable('window_start_ms')
  and ts_ms < getvariable('day_end_ms')
group by all
