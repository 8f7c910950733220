-- One row per pod that declares a share of a GPU (R6, share: requested): HAMi's gpucores or KAI's
-- gpu-fraction, from its latest sample.
with container_requests as (
    select
        labels ->> 'namespace' as namespace,
        labels ->> 'pod' as pod,
        labels ->> 'container' as container,
        -- The value of the latest sample: the span with the latest last sample.
        arg_max(value, to_ms) as gpucores_pct
    from stg_kube_spans
    where metric = 'kube_pod_container_resource_requests'
      and labels ->> 'resource' = 'nvidia_com_gpucores'
      and isfinite(value)
      and value > 0
    group by all
),
hami as (
    select namespace, pod, sum(gpucores_pct) / 100.0 as requested_fraction
    from container_requests
    group by all
),
kai as (
    select
        labels ->> 'namespace' as namespace,
        labels ->> 'pod' as pod,
        try_cast(arg_max(labels ->> 'annotation_gpu_fraction', to_ms) as double) as requested_fraction
    from stg_kube_spans
    where metric = 'kube_pod_annotations'
      and labels ->> 'annotation_gpu_fraction' is not null
    group by all
)
-- A pod declares through one of the two; should both be present, the larger stands (never summed).
select namespace, pod, max(requested_fraction) as requested_fraction
from (
    select * from hami
    union all
    select * from kai where isfinite(requested_fraction) and requested_fraction > 0
)
group by all
