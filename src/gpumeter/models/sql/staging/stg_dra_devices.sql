-- ResourceSlice devices: the GPU (or MIG instance) behind a (driver, pool, device) (R5), one row per device
-- version (what the accounting reads of it: type, GPU uuid, MIG profile) and span of validity
-- [valid_from_ms, valid_until_ms), null = unbounded: stg_dra_object_spans says when each version was valid
-- (a slice re-published with new device names after a MIG re-partition ends the old names at the first
-- snapshot that shows the new ones).
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
