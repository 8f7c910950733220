-- One row per DCGM series of the day and its lookback: the labels the accounting reads (R1, R3, R5), once per
-- series; `series_key` names it in the raw rows (read by the sample pass). Dense integer keys of the series'
-- GPU, device, node, model, MIG profile and holder let the per-sample models group and join integers, not
-- strings; each is ranked in name order, so the least key is the least name (the least node key picks the
-- first node by name, R4).
select
    series_key,
    cluster,
    node,
    uuid,
    uuid || coalesce('/' || gpu_i_id, '') as device_id,
    gpu_i_id,
    model_name,
    mig_profile,
    namespace,
    pod,
    container,
    flags & 1 <> 0 as seen_in_day,
    flags & 2 <> 0 as vgpu_copy,
    -- Whether every row under the key carries the labels above; not where they carry two sets (two series under
    -- one key): assert_series_keys_are_distinct stops the day then.
    first_labels = last_labels as labels_agree,
    raw_rows,
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
    -- Grouped by the one integer key, not by the nine labels: each row's labels are hashed once instead of
    -- compared as strings in the group-by, and a key whose rows differ in any label shows two hashes. A label
    -- is the same on every row of a key that agrees, so the first row's is it (`first`: no test for null).
    select
        series_key,
        first(cluster) as cluster,
        first(hostname) as node,
        first(uuid) as uuid,
        first(gpu_i_id) as gpu_i_id,
        first(model_name) as model_name,
        first(gpu_i_profile) as mig_profile,
        first(namespace) as namespace,
        first(pod) as pod,
        first(container) as container,
        -- Two yes/no questions in one aggregate state: 1, a row of the day itself (not of its lookback); 2, a
        -- vgpu copy (--kubernetes-virtual-gpus): one of several series carrying one shared device's value.
        bit_or(within_day(ts_ms)::utinyint | ((vgpu is not null)::utinyint << 1)) as flags,
        min(labels) as first_labels,
        max(labels) as last_labels,
        count(*) as raw_rows
    from (
        select
            series_key, cluster, hostname, uuid, gpu_i_id, model_name, gpu_i_profile, namespace, pod, container,
            ts_ms, vgpu,
            hash(cluster, hostname, uuid, gpu_i_id, model_name, gpu_i_profile, namespace, pod, container) as labels
        from stg_dcgm_judged
        where not dropped
    )
    group by series_key
)
