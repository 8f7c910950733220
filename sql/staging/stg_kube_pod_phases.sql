-- One row per pod sample of kube_pod_status_phase{phase="Running"} (R5, R1a): whether the pod (by its `uid`:
-- a pod recreated under the same name is another pod) is Running, and until when the sample holds. Only the
-- Running series is read: the other phases' series say nothing a Running == 1 does not.
-- The labels are parsed once per row into a list (one JSON parse, not one per label).
with phase_samples as (
    select
        ts_ms, until_ms, scrape_index, value, json_extract_string(labels, ['namespace', 'pod', 'uid', 'phase']) as label
    from stg_kube_samples
    where metric = 'kube_pod_status_phase'
)
select
    label[1] as namespace,
    label[2] as pod,
    label[3] as pod_uid,
    ts_ms,
    max(until_ms) as until_ms,
    max(scrape_index) as scrape_index,
    bool_or(value = 1) as running
from phase_samples
where label[4] = 'Running'
group by all
