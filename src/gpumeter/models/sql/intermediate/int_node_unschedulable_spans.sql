-- One row per span of time in which a node is unschedulable (R11): cordoned, NotReady, or short of the CPU
-- or memory a GPU pod needs. A node sample speaks for the time from its timestamp until the next scrape of
-- kube-state-metrics (R1a: that scrape shows the node again, or the node is gone), and for at most
-- kube_lookback_seconds when the exporter stopped being scraped; consecutive unschedulable samples merge
-- into one span.
-- Why spans and not a lookup per device sample: devices take the state of their node at each sample; an
-- ASOF join of every device sample against every node sample was 40 % of int_device_samples
-- (bench/README.md), while a node is unschedulable in few, long spans.
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
