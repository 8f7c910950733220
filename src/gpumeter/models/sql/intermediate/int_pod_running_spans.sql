-- One row per pod (by uid) × span of time in which it is Running (R5, R1a).
with ranked as (
    select
        hash(namespace, pod, pod_uid) as pod_key,
        namespace,
        pod,
        pod_uid,
        ts_ms,
        until_ms,
        scrape_index - dense_rank() over (partition by hash(namespace, pod, pod_uid) order by ts_ms) as span
    from stg_kube_pod_phases
    where running
)
select
    any_value(namespace) as namespace,
    any_value(pod) as pod,
    any_value(pod_uid) as pod_uid,
    min(ts_ms) as from_ms,
    max(until_ms) as until_ms
from ranked
group by pod_key, span
