-- OpenCost's node_gpu_hourly_cost: the price of one GPU-hour on a node, per sample (R8, price_source:
-- opencost). Several series for one node (e.g. after a relabel) agree or the highest stands.
select
    cluster,
    ts_ms,
    labels ->> 'node' as node,
    max(value) as gpu_price_per_hour
from raw_kube_samples
where cluster = getvariable('cluster')
  and metric = 'node_gpu_hourly_cost'
  and isfinite(value)
  and value >= 0
  and ts_ms >= getvariable('window_start_ms')
  and ts_ms < getvariable('day_end_ms')
group by all
