-- OpenCost's node_gpu_hourly_cost: the price of one GPU-hour on a node, per sample (R8, price_source:
-- opencost). Several series for one node (e.g. after a relabel) agree or the highest stands.
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
