-- ResourceSlice devices: the GPU (or MIG instance) behind a (driver, pool, device) (R5).
select distinct
    cluster,
    driver,
    pool,
    device,
    device_type,
    coalesce(parent_uuid, uuid) as gpu_uuid,
    case when device_type = 'mig' then profile end as mig_profile
from raw_dra_devices
where cluster = getvariable('cluster')
