-- The share of a GPU each pod declared (R6, share: requested): HAMi's nvidia.com/gpucores request, in
-- percent of the GPU, summed over the pod's containers, from its latest sample of the day.
with container_requests as (
    select
        labels ->> 'namespace' as namespace,
        labels ->> 'pod' as pod,
        labels ->> 'container' as container,
        arg_max(value, ts_ms) as gpucores_pct
    from raw_kube_samples
    where cluster = getvariable('cluster')
      and metric = 'kube_pod_container_resource_requests'
      and labels ->> 'resource' = 'nvidia_com_gpucores'
      and isfinite(value)
      and value > 0
      and ts_ms >= getvariable('window_start_ms')
      and ts_ms < getvariable('day_end_ms')
    group by all
)
select namespace, pod, sum(gpucores_pct) / 100.0 as requested_fraction
from container_requests
group by all
