-- One row per ResourceSlice device version × span of validity (R5): the GPU or MIG instance behind a
-- (driver, pool, device).
select
    version ->> 'cluster' as cluster,
    version ->> 'driver' as driver,
    version ->> 'pool' as pool,
    version ->> 'device' as device,
    version ->> 'device_type' as device_type,
    version ->> 'gpu_uuid' as gpu_uuid,
    version ->> 'mig_profile' as mig_profile,
    valid_from_ms,
    valid_until_ms
from stg_dra_object_spans
where kind = 'device'
