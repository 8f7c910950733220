-- One row per pod label set (kube_pod_labels, label_<key>) and span of time it was shown (R7, R1a): a pod
-- relabelled at noon has one span for its morning labels and one from noon. A pod is named by its uid too: a
-- pod recreated under the same name is another pod. A span is a run of the target's consecutive scrapes that
-- show the label set (stg_kube_target_scrapes.scrape_index); it ends at the first scrape that does not.
-- While spans are found, a label set is keyed by a hash of its text (one integer to sort by, not the JSON).
with ranked as (
    select
        hash(labels) as label_set,
        labels,
        ts_ms,
        until_ms,
        scrape_index - dense_rank() over (partition by hash(labels) order by ts_ms) as span
    from stg_kube_samples
    where metric = 'kube_pod_labels'
),
spans as (
    select any_value(labels) as labels_json, min(ts_ms) as from_ms, max(until_ms) as until_ms
    from ranked
    group by label_set, span
)
select
    labels_json ->> 'namespace' as namespace,
    labels_json ->> 'pod' as pod,
    labels_json ->> 'uid' as pod_uid,
    labels_json,
    from_ms,
    until_ms
from spans
