-- One row per pod label set × span of time it was shown (R7, R1a).
with samples as (
    select hash(labels) as label_set, ts_ms, target, labels
    from raw_kube_samples
    where in_window(cluster, ts_ms)
      and metric = 'kube_pod_labels'
),
ranked as (
    -- Copies of one sample (duplicate rows) share a rank: they do not break a span.
    select
        p.label_set,
        p.labels,
        p.ts_ms,
        holds_until(p.ts_ms, s.next_scrape_ms) as until_ms,
        s.scrape_index - dense_rank() over (partition by p.label_set order by p.ts_ms) as span
    from samples as p
    join stg_kube_target_scrapes as s
        on s.scrape_target = scrape_target(p.target, 'kube_pod_labels') and s.ts_ms = p.ts_ms
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
