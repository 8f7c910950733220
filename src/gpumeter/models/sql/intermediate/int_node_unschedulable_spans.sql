-- One row per node × span of time in which the node is unschedulable (R11): cordoned, NotReady, or short of
-- the CPU or memory a GPU pod needs.
with flagged as (
    select
        node,
        ts_ms,
        until_ms,
        coalesce(
            cordoned
            or not_ready
            or free_cpu_cores < getvariable('min_free_cpu_cores')
            or free_memory_bytes < getvariable('min_free_memory_bytes'),
            false
        ) as unschedulable
    from stg_kube_node_states
    where node is not null
),
runs as (
    select
        *,
        -- A new span starts where this sample's span does not begin exactly where the previous one ended.
        sum(case when ts_ms = lag_until_ms then 0 else 1 end) over (partition by node order by ts_ms) as span
    from (
        select *, lag(until_ms) over (partition by node order by ts_ms) as lag_until_ms
        from flagged
        where unschedulable
    )
)
select node, min(ts_ms) as from_ms, max(until_ms) as until_ms
from runs
group by node, span
