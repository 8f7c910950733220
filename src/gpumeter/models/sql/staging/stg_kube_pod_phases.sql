-- One row per pod (by uid) × scrape target × run of the target's consecutive scrapes at which a
-- kube_pod_status_phase{phase="Running"} series shows it at 1 (R5, R1a), and until when its last sample holds.
with running as (
    select
        {'namespace': label[1], 'pod': label[2], 'pod_uid': label[3]} as key,
        scrape_target,
        from_index,
        to_index,
        from_ms,
        until_ms
    from (
        select *, json_extract_string(labels, ['namespace', 'pod', 'uid', 'phase']) as label
        from stg_kube_spans
        where metric = 'kube_pod_status_phase' and value = 1
    )
    where label[4] = 'Running'
)
select key.namespace, key.pod, key.pod_uid, scrape_target, from_ms, until_ms
from scrape_runs(running)
