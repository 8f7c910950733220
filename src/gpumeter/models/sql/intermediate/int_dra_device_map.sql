-- One row per pod-less DCGM device × ResourceSlice device × span of validity (R5): which slice device each
-- device is, and when (null bounds: unbounded).
with whole_gpus as (
    select d.device_key, d.device_id, s.driver, s.pool, s.device, s.valid_from_ms, s.valid_until_ms
    from (
        -- The GPUs that are a whole device at some sample.
        select distinct device_key from int_gpu_samples
        where not is_mig
          and gpu_key in (select d.gpu_key from stg_dcgm_devices as d join stg_dra_devices as s on s.gpu_uuid = d.uuid)
    ) as k
    join stg_dcgm_devices as d on d.device_key = k.device_key
    join stg_dra_devices as s on s.gpu_uuid = d.uuid and s.device_type <> 'mig'
),
mig_slices as (
    select * from stg_dra_devices where device_type = 'mig' and gpu_uuid is not null and mig_profile is not null
),
mig_slice_keys as (
    -- The (GPU, profile) of each MIG slice device as the series' keys, to find their instances' samples.
    select distinct d.gpu_key, d.profile_key, s.gpu_uuid, s.mig_profile
    from mig_slices as s
    join stg_dcgm_series as d on d.uuid = s.gpu_uuid and d.mig_profile = s.mig_profile
),
bounds as (
    select gpu_uuid, mig_profile, valid_from_ms as at_ms from mig_slices where valid_from_ms is not null
    union
    select gpu_uuid, mig_profile, valid_until_ms as at_ms from mig_slices where valid_until_ms is not null
),
pieces as (
    -- Consecutive pieces [from_ms, until_ms) covering all time (null = unbounded), per (GPU, profile):
    -- within one, the same slice devices are valid throughout. from_key orders them (-2^63 for the first).
    select
        gpu_uuid,
        mig_profile,
        lag(at_ms) over (partition by gpu_uuid, mig_profile order by at_ms) as from_ms,
        at_ms as until_ms
    from bounds
    union all
    select gpu_uuid, mig_profile, max(at_ms) as from_ms, null as until_ms from bounds group by all
    union all
    select distinct m.gpu_uuid, m.mig_profile, null as from_ms, null as until_ms
    from mig_slices as m
    anti join bounds as b on b.gpu_uuid = m.gpu_uuid and b.mig_profile = m.mig_profile
),
keyed_pieces as (
    select *, coalesce(from_ms, -9223372036854775808) as from_key from pieces
),
slice_ranks as (
    select
        gpu_uuid,
        mig_profile,
        from_key,
        from_ms,
        until_ms,
        driver,
        pool,
        device,
        row_number() over (partition by gpu_uuid, mig_profile, from_key order by pool, device) as rank_in_profile
    from (
        select distinct p.gpu_uuid, p.mig_profile, p.from_key, p.from_ms, p.until_ms, s.driver, s.pool, s.device
        from keyed_pieces as p
        join mig_slices as s
            on s.gpu_uuid = p.gpu_uuid
            and s.mig_profile = p.mig_profile
            and (s.valid_from_ms is null or s.valid_from_ms <= p.from_ms)
            and (s.valid_until_ms is null or s.valid_until_ms >= p.until_ms)
    )
),
instance_ranks as (
    -- The MIG instances of DRA GPUs with samples in each piece, in GPU_I_ID order.
    select
        *,
        row_number() over (
            partition by uuid, mig_profile, from_key order by try_cast(gpu_i_id as integer), gpu_i_id
        ) as rank_in_profile
    from (
        select distinct d.uuid, d.mig_profile, d.gpu_i_id, d.device_key, d.device_id, p.from_key
        from (
            select k.ts_ms, m.gpu_uuid as uuid, m.mig_profile, v.gpu_i_id, v.device_key, v.device_id
            from int_mig_instance_samples as k
            join mig_slice_keys as m on m.gpu_key = k.gpu_key and m.profile_key = k.profile_key
            join stg_dcgm_devices as v on v.device_key = k.device_key
        ) as d
        asof join keyed_pieces as p
            on p.gpu_uuid = d.uuid and p.mig_profile = d.mig_profile and d.ts_ms >= p.from_key
    )
)
select device_key, device_id, driver, pool, device, valid_from_ms, valid_until_ms
from whole_gpus
union all
select
    i.device_key, i.device_id, s.driver, s.pool, s.device, s.from_ms as valid_from_ms, s.until_ms as valid_until_ms
from instance_ranks as i
join slice_ranks as s
    on s.gpu_uuid = i.uuid
    and s.mig_profile = i.mig_profile
    and s.from_key = i.from_key
    and s.rank_in_profile = i.rank_in_profile
