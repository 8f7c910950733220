-- One row per pod (namespace, pod, container) that can hold a device in the day (R5): the holders DCGM pod
-- labels name, under their series' holder key, then the pods of KAI GPU groups and the pods DRA claims reserve
-- (no container), keyed after them. int_keyed_device_holders refers to holders by this key.
with series_holders as (
    select distinct holder_key, namespace, pod, container
    from stg_dcgm_series
    where holder_key is not null
),
other_pods as (
    select distinct labels_json ->> 'namespace' as namespace, labels_json ->> 'pod' as pod
    from stg_kube_pod_labels
    where labels_json ->> 'label_runai_gpu_group' is not null
    union
    select distinct claim_namespace as namespace, reserved_pod as pod
    from stg_dra_allocations
    where reserved_pod is not null
),
new_pods as (
    select o.namespace, o.pod
    from other_pods as o
    anti join series_holders as s on s.namespace = o.namespace and s.pod = o.pod and s.container is null
    where o.namespace is not null and o.pod is not null
)
select
    h.holder_key,
    h.namespace,
    h.pod,
    h.container,
    -- A KAI reservation pod (namespace kai-resource-reservation, in a GPU group): the Running pods of its group
    -- hold what it holds (int_keyed_device_holders).
    r.namespace is not null as kai_reservation,
    -- R6: the share of a device the pod holds when it holds it alone, as int_keyed_device_holders gives it:
    -- the whole device, or under share: requested its declared fraction (whole where it declares 1 or more).
    case when getvariable('share') = 'requested' and f.millionths is not null then f.millionths else 1 end
        as alone_share_numerator,
    case
        when getvariable('share') = 'requested' and f.millionths is not null
            then greatest(f.millionths::hugeint, 1000000)
        else 1::hugeint
    end as alone_share_denominator
from (
    select holder_key, namespace, pod, container
    from series_holders
    union all
    select
        ((select coalesce(max(holder_key), 0) from series_holders) + row_number() over (order by namespace, pod))
            ::integer as holder_key,
        namespace,
        pod,
        null::varchar as container
    from new_pods
) as h
left join (
    select distinct labels_json ->> 'namespace' as namespace, labels_json ->> 'pod' as pod
    from stg_kube_pod_labels
    where labels_json ->> 'label_runai_gpu_group' is not null
      and labels_json ->> 'namespace' = 'kai-resource-reservation'
) as r on r.namespace = h.namespace and r.pod = h.pod
left join (
    -- Declared fractions in millionths, so that a share is an exact ratio of integers (R12).
    select namespace, pod, round(requested_fraction * 1000000)::bigint as millionths
    from stg_kube_pod_gpu_fractions
) as f on f.namespace = h.namespace and f.pod = h.pod
