-- One row per node × span of time in which the node is unschedulable (R11): cordoned, NotReady, or short of
-- the CPU or memory a GPU pod needs.
with unschedulable as (
    -- One target's spans follow each other; two targets' (kube-state-metrics scraped by two jobs) overlap and
    -- merge: the spans stay disjoint per node, so that a GPU sample meets at most one (int_gpu_samples).
    select node as key, ts_ms as from_ms, until_ms
    from stg_kube_node_states
    where node is not null
      and coalesce(
          cordoned
          or not_ready
          or free_cpu_cores < getvariable('min_free_cpu_cores')
          or free_memory_bytes < getvariable('min_free_memory_bytes'),
          false
      )
)
select key as node, from_ms, until_ms
from merged_spans(unschedulable)
