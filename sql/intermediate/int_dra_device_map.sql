-- Which ResourceSlice device each pod-less DCGM device is (R5): a whole GPU by its uuid, a MIG instance
-- by parentUUID + profile. Two instances of one profile on one GPU are told apart by pairing the slices'
-- device names and the instances' GPU_I_IDs in order (documented in docs/accounting.md).
with devices as (
    select distinct
        uuid,
        gpu_i_id,
        device_id,
        mig_profile,
        row_number() over (
            partition by uuid, mig_profile order by try_cast(gpu_i_id as integer), gpu_i_id
        ) as rank_in_profile
    from (select distinct uuid, gpu_i_id, device_id, mig_profile from int_device_samples)
),
slice_devices as (
    select
        *,
        row_number() over (partition by gpu_uuid, mig_profile order by pool, device) as rank_in_profile
    from stg_dra_devices
)
select d.device_id, s.driver, s.pool, s.device
from devices as d
join slice_devices as s
    on s.gpu_uuid = d.uuid
    and s.mig_profile is not distinct from d.mig_profile
    and ((s.device_type = 'mig') = (d.gpu_i_id is not null))
    and s.rank_in_profile = d.rank_in_profile
