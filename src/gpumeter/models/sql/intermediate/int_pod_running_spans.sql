-- One row per span of time in which a pod (by uid) is Running (R5, R1a): consecutive Running samples whose
-- spans touch merge into one. A span ends at the first scrape of kube-state-metrics that shows the pod not
-- Running or does not show it at all (deleted), or kube_lookback_seconds after its last sample when the
-- exporter stopped being scraped. DRA claims and KAI GPU groups hold a device only inside these spans.
-- A span is a run of consecutive scrapes of kube-state-metrics showing the pod Running
-- (stg_kube_target_scrapes.scrape_index); while spans are found a pod is keyed by a hash of (namespace, name,
-- uid): one integer to sort by.
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
