-- One row per pod (by uid) × span of time in which it is Running (R5, R1a).
with ordered as (
    -- A pod shown by two targets is Running while either shows it: their runs that overlap are one span.
    select
        *,
        max(until_ms) over (
            partition by namespace, pod, pod_uid order by from_ms, until_ms rows between unbounded preceding and 1 preceding
        ) as reached
    from stg_kube_pod_phases
)
select
    namespace,
    pod,
    pod_uid,
    min(from_ms) as from_ms,
    max(until_ms) as until_ms
from (
    select
        *,
        sum(case when from_ms < reached then 0 else 1 end)
            over (partition by namespace, pod, pod_uid order by from_ms, until_ms) as span
    from ordered
)
group by namespace, pod, pod_uid, span
