-- One row per pod label set (kube_pod_labels, label_<key>) and span of time it was shown (R7, R1a): a pod
-- relabelled at noon has one span for its morning labels and one from noon. A pod is named by its uid too: a
-- pod recreated under the same name is another pod. Consecutive samples of one label set merge into a span;
-- a span ends at the first scrape of kube-state-metrics that no longer shows that label set.
with samples as (
    select
        labels ->> 'namespace' as namespace,
        labels ->> 'pod' as pod,
        labels ->> 'uid' as pod_uid,
        labels as labels_json,
        ts_ms,
        max(until_ms) as until_ms
    from stg_kube_samples
    where metric = 'kube_pod_labels'
    group by all
),
runs as (
    select
        *,
        sum(case when ts_ms = lag_until_ms then 0 else 1 end)
            over (partition by namespace, pod, pod_uid, labels_json order by ts_ms) as span
    from (
        select
            *,
            lag(until_ms) over (partition by namespace, pod, pod_uid, labels_json order by ts_ms) as lag_until_ms
        from samples
    )
)
select namespace, pod, pod_uid, labels_json, min(ts_ms) as from_ms, max(until_ms) as until_ms
from runs
group by namespace, pod, pod_uid, labels_json, span
