-- kube_pod_status_phase: one row per pod sample, Running or not (R5 uses Running == 1).
-- The labels are parsed once per row into a list (one JSON parse, not one per label: bench/README.md).
with phase_samples as (
    select cluster, ts_ms, value, json_extract_string(labels, ['namespace', 'pod', 'uid', 'phase']) as label
    from raw_kube_samples
    where cluster = getvariable('cluster')
      and metric = 'kube_pod_status_phase'
      and ts_ms >= getvariable('window_start_ms')
      and ts_ms < getvariable('day_end_ms')
)
select
    cluster,
    ts_ms,
    label[1] as namespace,
    label[2] as pod,
    label[3] as pod_uid,
    bool_or(label[4] = 'Running' and value = 1) as running
from phase_samples
group by all
