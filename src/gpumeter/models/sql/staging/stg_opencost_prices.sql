-- One row per node × sample of OpenCost's node_gpu_hourly_cost (R8, price_source: opencost): the price of one
-- GPU-hour on the node.
with prices as (
    -- The node label read once per span, not once per sample.
    select cluster, scrape_target, labels ->> 'node' as node, value, from_ms, to_ms
    from stg_kube_spans
    where metric = 'node_gpu_hourly_cost'
      and isfinite(value)
      and value >= 0
)
select
    p.cluster,
    s.ts_ms,
    p.node,
    max(p.value) as gpu_price_per_hour
from prices as p
-- A span's samples: its target's scrapes from its first to its last sample.
join stg_kube_target_scrapes as s
    on s.scrape_target = p.scrape_target and s.ts_ms >= p.from_ms and s.ts_ms <= p.to_ms
group by all
