-- One row per device series of the day and its lookback: the labels the accounting reads (R1, R3, R5),
-- once per series instead of once per sample. stg_dcgm_samples holds the series' samples by `series_key`;
-- the intermediate models join this small table back (bench/README.md: carrying nine label strings on every
-- sample row was most of the pivot's cost). A series is every label the accounting reads, so a sample whose
-- modelName or MIG profile changes mid-day is two series and each of its rows keeps its own labels (R1).
-- `seen_in_day`: the series has a sample in the day itself (R2, half-open), not only in the lookback.
-- `vgpu_copy`: the series is one pod's copy of a shared device (R6, int_vgpu_copy_conflicts).
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
        bool_or(ts_ms >= getvariable('day_start_ms') and ts_ms < getvariable('day_end_ms')) as seen_in_day,
        -- A vgpu copy (--kubernetes-virtual-gpus): one of several series carrying one shared device's value.
        bool_or(vgpu is not null) as vgpu_copy
    from stg_dcgm_judged
    where not dropped
    group by cluster, hostname, uuid, gpu_i_id, model_name, gpu_i_profile, namespace, pod, container
)
