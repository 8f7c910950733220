-- One row per pod (by uid) × sample of kube_pod_status_phase{phase="Running"} (R5, R1a): whether it is Running
-- and until when the sample holds.
with phase_samples as (
    select ts_ms, target, value, json_extract_string(labels, ['namespace', 'pod', 'uid', 'phase']) as label
    from raw_kube_samples
    where in_window(cluster, ts_ms)
      and metric = 'kube_pod_status_phase'
),
pod_samples as (
    select
        label[1] as namespace,
        label[2] as pod,
        label[3] as pod_uid,
        ts_ms,
        target,
        bool_or(value = 1) as running
    from phase_samples
    where label[4] = 'Running'
    group by all
)
select
    p.namespace,
    p.pod,
    p.pod_uid,
    p.ts_ms,
    holds_until(p.ts_ms, s.next_scrape_ms) as until_ms,
    s.scrape_index,
    p.running
from pod_samples as p
join stg_kube_target_scrapes as s
    on s.scrape_target = scrape_target(p.target, 'kube_pod_status_phase') and s.ts_ms = p.ts_ms
