-- One row per pod label set × span of time it was shown (R7, R1a).
with shown as (
    select labels as key, scrape_target, from_index, to_index, from_ms, until_ms
    from stg_kube_spans
    where metric = 'kube_pod_labels'
),
target_spans as (
    -- A label set shown by two targets is shown while either shows it.
    select key, from_ms, until_ms from scrape_runs(shown)
),
spans as (
    select key as labels_json, from_ms, until_ms from merged_spans(target_spans)
)
select
    labels_json ->> 'namespace' as namespace,
    labels_json ->> 'pod' as pod,
    labels_json ->> 'uid' as pod_uid,
    labels_json,
    from_ms,
    until_ms
from spans
