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
        -- A new span starts where this sample's span begins after every earlier one of the node has ended.
        -- One target's spans follow each other; two targets' (kube-state-metrics scraped by two jobs) overlap
        -- and merge: the spans stay disjoint per node, so that a GPU sample meets at most one (int_gpu_samples).
        sum(case when ts_ms <= earlier_until_ms then 0 else 1 end)
            over (partition by node order by ts_ms, until_ms) as span
    from (
        select
            *,
            max(until_ms) over (
                partition by node order by ts_ms, until_ms rows between unbounded preceding and 1 preceding
            ) as earlier_until_ms
        from flagged
        where unschedulable
    )
)
select node, min(ts_ms) as from_ms, max(until_ms) as until_ms
from runs
group by node, span
