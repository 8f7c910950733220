-- One row per DCGM series of the day and its lookback: the labels the accounting reads (R1, R3, R5), once per
-- series; `series_key` joins stg_dcgm_samples.
select
    -- The same hash of the same labels as stg_dcgm_judged's, computed once per series instead of once per row.
    hash(cluster, node, uuid, gpu_i_id, namespace, pod, container, model_name, mig_profile) as series_key,
    *
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
        bool_or(vgpu is not null) as vgpu_copy
    from stg_dcgm_judged
    where not dropped
    group by cluster, hostname, uuid, gpu_i_id, model_name, gpu_i_profile, namespace, pod, container
)
