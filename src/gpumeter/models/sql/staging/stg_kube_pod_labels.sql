-- One row per pod label set × span of time it was shown (R7, R1a).
with shown as (
    select labels, scrape_target, from_ms, from_index, to_index, until_ms
    from stg_kube_spans
    where metric = 'kube_pod_labels'
),
runs as (
    -- Spans that overlap (copies, another value) or follow each other scrape after scrape are one run.
    select *, sum(case when from_index <= reached + 1 then 0 else 1 end) over by_start as run
    from (
        select *, max(to_index) over (by_start rows between unbounded preceding and 1 preceding) as reached
        from shown
        window by_start as (partition by labels, scrape_target order by from_index, to_index)
    )
    window by_start as (partition by labels, scrape_target order by from_index, to_index)
),
target_spans as (
    select labels, min(from_ms) as from_ms, max(until_ms) as until_ms
    from runs
    group by labels, scrape_target, run
),
spans as (
    -- A label set shown by two targets is shown while either shows it: their runs that overlap are one span.
    select labels as labels_json, min(from_ms) as from_ms, max(until_ms) as until_ms
    from (
        select *, sum(case when from_ms < reached then 0 else 1 end) over by_start as span
        from (
            select *, max(until_ms) over (by_start rows between unbounded preceding and 1 preceding) as reached
            from target_spans
            window by_start as (partition by labels order by from_ms, until_ms)
        )
        window by_start as (partition by labels order by from_ms, until_ms)
    )
    group by labels, span
)
select
    labels_json ->> 'namespace' as namespace,
    labels_json ->> 'pod' as pod,
    labels_json ->> 'uid' as pod_uid,
    labels_json,
    from_ms,
    until_ms
from spans
