-- One row per DCGM series of the day and its lookback: the labels the accounting reads (R1, R3, R5), once per
-- series; `series_key` names it in the raw rows (read by the sample pass). Dense integer keys of the series'
-- GPU, device, node, model, MIG profile and holder let the per-sample models group and join integers, not
-- strings; each is ranked in name order, so the least key is the least name (the least node key picks the
-- first node by name, R4).
select
    -- The key the series' rows carry (stg_dcgm_judged); none where they carry two (files keyed by two
    -- writers that disagree): assert_series_keys_are_distinct stops the day then.
    case when first_key = last_key then first_key end as series_key,
    * exclude (first_key, last_key),
    dense_rank() over (order by uuid)::integer as gpu_key,
    dense_rank() over (order by uuid, gpu_i_id)::integer as device_key,
    case when node is not null then dense_rank() over (order by node) end::integer as node_key,
    case when model_name is not null then dense_rank() over (order by model_name) end::integer as model_key,
    case when mig_profile is not null then dense_rank() over (order by mig_profile) end::integer as profile_key,
    -- Pod labels name a holder (R5) only with both namespace and pod.
    case
        when namespace is not null and pod is not null then dense_rank() over (order by namespace, pod, container)
    end::integer as holder_key,
    -- Only a GPU that ever shows a MIG instance can change mode (R3, int_gpu_samples).
    bool_or(gpu_i_id is not null) over (partition by uuid) as gpu_shows_instances
from (
    select
        cluster,
        hostname as node,
        uuid,
        uuid || coalesce('/' || gpu_i_id, '') as device_id,
        gpu_i_id,
        model_name,
        gpu_i_profile as mig_profile,
        namespace,
        pod,
        container,
        bool_or(within_day(ts_ms)) as seen_in_day,
        -- A vgpu copy (--kubernetes-virtual-gpus): one of several series carrying one shared device's value.
        bool_or(vgpu is not null) as vgpu_copy,
        min(series_key) as first_key,
        max(series_key) as last_key
    from stg_dcgm_judged
    where not dropped
    group by cluster, hostname, uuid, gpu_i_id, model_name, gpu_i_profile, namespace, pod, container
)
