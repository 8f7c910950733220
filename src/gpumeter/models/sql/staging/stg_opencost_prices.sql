-- One row per node × sample of OpenCost's node_gpu_hourly_cost (R8, price_source: opencost): the price of one
-- GPU-hour on the node.
select
    cluster,
    ts_ms,
    labels ->> 'node' as node,
    max(value) as gpu_price_per_hour
from raw_kube_samples
where in_window(cluster, ts_ms)
  and metric = 'node_gpu_hourly_cost'
  and isfinite(value)
  and value >= 0
group by all
