-- One row per node × sample of OpenCost's node_gpu_hourly_cost (R8, price_source: opencost): the price of one
-- GPU-hour on the node.
select
    p.cluster,
    s.ts_ms,
    p.labels ->> 'node' as node,
    max(p.value) as gpu_price_per_hour
from stg_kube_spans as p
-- A span's samples: its target's scrapes from its first to its last sample.
join stg_kube_target_scrapes as s
    on s.scrape_target = p.scrape_target and s.ts_ms >= p.from_ms and s.ts_ms <= p.to_ms
where p.metric = 'node_gpu_hourly_cost'
  and isfinite(p.value)
  and p.value >= 0
group by all
