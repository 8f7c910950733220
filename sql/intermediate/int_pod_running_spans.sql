-- One row per span of time in which a pod (by uid) is Running (R5, R1a): consecutive Running samples whose
-- spans touch merge into one. A span ends at the first scrape of kube-state-metrics that shows the pod not
-- Running or does not show it at all (deleted), or kube_lookback_seconds after its last sample when the
-- exporter stopped being scraped. DRA claims and KAI GPU groups hold a device only inside these spans.
with running as (
    select
        namespace,
        pod,
        pod_uid,
        ts_ms,
        until_ms,
        lag(until_ms) over (partition by namespace, pod, pod_uid order by ts_ms) as lag_until_ms
    from stg_kube_pod_phases
    where running
),
runs as (
    select
        *,
        -- A new span starts where this sample's span does not begin exactly where the previous one ended.
        sum(case when ts_ms = lag_until_ms then 0 else 1 end)
            over (partition by namespace, pod, pod_uid order by ts_ms) as span
    from running
)
select namespace, pod, pod_uid, min(ts_ms) as from_ms, max(until_ms) as until_ms
from runs
group by namespace, pod, pod_uid, span
