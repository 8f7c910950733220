-- One row per pod (by uid) × scrape target × run of the target's consecutive scrapes at which a
-- kube_pod_status_phase{phase="Running"} series shows it at 1 (R5, R1a), and until when its last sample holds.
with running as (
    select
        label[1] as namespace,
        label[2] as pod,
        label[3] as pod_uid,
        scrape_target,
        from_ms,
        from_index,
        to_index,
        until_ms
    from (
        select *, json_extract_string(labels, ['namespace', 'pod', 'uid', 'phase']) as label
        from stg_kube_spans
        where metric = 'kube_pod_status_phase' and value = 1
    )
    where label[4] = 'Running'
),
runs as (
    -- Spans that overlap or follow each other scrape after scrape are one run.
    select
        *,
        sum(case when from_index <= reached + 1 then 0 else 1 end) over by_start as run
    from (
        select
            *,
            max(to_index) over (by_start rows between unbounded preceding and 1 preceding) as reached
        from running
        window by_start as (partition by namespace, pod, pod_uid, scrape_target order by from_index, to_index)
    )
    window by_start as (partition by namespace, pod, pod_uid, scrape_target order by from_index, to_index)
)
select
    namespace,
    pod,
    pod_uid,
    scrape_target,
    min(from_ms) as from_ms,
    max(until_ms) as until_ms
from runs
group by namespace, pod, pod_uid, scrape_target, run
