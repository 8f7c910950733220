-- ResourceSlice devices: the GPU (or MIG instance) behind a (driver, pool, device) (R5), one row per device
-- version (what the accounting reads of it: type, GPU uuid, MIG profile) and span of validity
-- [valid_from_ms, valid_until_ms), null = unbounded, by the rule of stg_dra_allocations: from the first
-- snapshot showing it (its slice's creationTimestamp when earlier and the slice is as created, never at or
-- before the snapshot just before) until the first later snapshot that does not show it (a slice
-- re-published with new device names after a MIG re-partition ends the old names there); a device seen in
-- a snapshot of unknown time is valid for the whole window (docs/accounting.md R5).
with device_rows as (
    select
        {
            'cluster': cluster,
            'driver': driver,
            'pool': pool,
            'device': device,
            'device_type': device_type,
            'gpu_uuid': coalesce(parent_uuid, uuid),
            'mig_profile': case when device_type = 'mig' then profile end
        } as version,
        cast(snapshot_ms as bigint) as snapshot_ms,
        cast(created_ms as bigint) as created_ms,
        device is null as is_marker
    from raw_dra_devices
    where cluster = getvariable('cluster')
),
snapshots as (
    -- Every look of known time, in order: empty ones too (their marker rows, metering/k8s_objects.py).
    select
        snapshot_ms,
        row_number() over (order by snapshot_ms) as snapshot_no,
        lag(snapshot_ms) over (order by snapshot_ms) as previous_ms,
        lead(snapshot_ms) over (order by snapshot_ms) as next_ms
    from (select distinct snapshot_ms from device_rows where snapshot_ms is not null)
),
versions as (
    select
        version,
        bool_or(snapshot_ms is null) as whole_window,
        min(created_ms) as created_ms
    from device_rows
    where not is_marker
    group by version
),
sightings as (
    -- Consecutive snapshots showing a version are one island: snapshot_no minus its rank among them.
    select
        d.version,
        s.snapshot_no,
        s.snapshot_no - row_number() over (partition by d.version order by s.snapshot_no) as island
    from (select distinct version, snapshot_ms from device_rows where not is_marker) as d
    join snapshots as s on s.snapshot_ms = d.snapshot_ms
),
islands as (
    select version, island, min(snapshot_no) as first_no, max(snapshot_no) as last_no
    from sightings
    group by version, island
),
spans as (
    select
        v.version,
        case
            when i.first_no = min(i.first_no) over (partition by v.version) and v.created_ms < f.snapshot_ms
                then greatest(v.created_ms, coalesce(f.previous_ms + 1, v.created_ms))
            else f.snapshot_ms
        end as valid_from_ms,
        l.next_ms as valid_until_ms
    from versions as v
    join islands as i on i.version = v.version
    join snapshots as f on f.snapshot_no = i.first_no
    join snapshots as l on l.snapshot_no = i.last_no
    where not v.whole_window
    union all
    select version, null::bigint, null::bigint from versions where whole_window
)
select
    version.cluster,
    version.driver,
    version.pool,
    version.device,
    version.device_type,
    version.gpu_uuid,
    version.mig_profile,
    valid_from_ms,
    valid_until_ms
from spans
