-- R11: where capacity went: per node, the categories of mart_stranded_capacity sum to the GPU-seconds its GPUs
-- were observed (int_gpu_samples), exactly.
with observed as (
    select n.node, o.gpu_seconds
    from (
        select node_key, sample_seconds(count(*)) as gpu_seconds
        from int_gpu_samples
        group by node_key
    ) as o
    left join stg_dcgm_nodes as n on n.node_key = o.node_key
),
categorized as (
    select node, sum(gpu_seconds) as gpu_seconds
    from mart_stranded_capacity
    group by node
)
select
    coalesce(o.node, c.node) as node,
    'the capacity categories of node ' || coalesce('''' || coalesce(o.node, c.node) || '''', '(no Hostname label)')
        || ' sum to ' || coalesce(c.gpu_seconds, 0) || ' GPU-seconds, but its GPUs were observed for '
        || coalesce(o.gpu_seconds, 0) || ': every observed GPU-second must be in exactly one category; report it '
        || 'with the day''s raw files' as message
from observed as o
full join categorized as c on c.node is not distinct from o.node
where coalesce(o.gpu_seconds, 0) <> coalesce(c.gpu_seconds, 0)
order by node
