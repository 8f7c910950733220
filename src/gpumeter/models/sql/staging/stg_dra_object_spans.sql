-- One row per DRA object version (claim result × reserved pod, or slice device, as JSON) × span of validity
-- [valid_from_ms, valid_until_ms) (R5), from the snapshots that show it.
with object_rows as (
    select
        'claim' as kind,
        to_json({
            'cluster': cluster,
            'claim_namespace': claim_namespace,
            'claim_name': claim_name,
            'claim_uid': claim_uid,
            'driver': driver,
            'pool': pool,
            'device': device,
            'reserved_pod': reserved_pod,
            'reserved_pod_uid': reserved_pod_uid
        })::varchar as version,
        cast(snapshot_ms as bigint) as snapshot_ms,
        cast(created_ms as bigint) as created_ms,
        claim_name is null as is_marker
    from raw_dra_allocations
    where cluster = getvariable('cluster') and (claim_name is null or reserved_pod is not null)
    union all
    select
        'device' as kind,
        to_json({
            'cluster': cluster,
            'driver': driver,
            'pool': pool,
            'device': device,
            'device_type': device_type,
            'gpu_uuid': coalesce(parent_uuid, uuid),
            'mig_profile': case when device_type = 'mig' then profile end
        })::varchar as version,
        cast(snapshot_ms as bigint) as snapshot_ms,
        cast(created_ms as bigint) as created_ms,
        device is null as is_marker
    from raw_dra_devices
    where cluster = getvariable('cluster')
),
snapshots as (
    -- Every look of known time of each kind, in order: empty ones too (their marker rows,
    -- gpumeter/ingest/k8s_objects.py).
    select
        kind,
        snapshot_ms,
        row_number() over by_time as snapshot_no,
        lag(snapshot_ms) over by_time as previous_ms,
        lead(snapshot_ms) over by_time as next_ms
    from (select distinct kind, snapshot_ms from object_rows where snapshot_ms is not null)
    window by_time as (partition by kind order by snapshot_ms)
),
versions as (
    select
        kind,
        version,
        bool_or(snapshot_ms is null) as whole_window,
        min(created_ms) as created_ms
    from object_rows
    where not is_marker
    group by kind, version
),
sightings as (
    -- Consecutive snapshots showing a version are one island: snapshot_no minus its rank among them.
    select
        c.kind,
        c.version,
        s.snapshot_no,
        s.snapshot_no - row_number() over (partition by c.kind, c.version order by s.snapshot_no) as island
    from (select distinct kind, version, snapshot_ms from object_rows where not is_marker) as c
    join snapshots as s on s.kind = c.kind and s.snapshot_ms = c.snapshot_ms
),
islands as (
    select kind, version, island, min(snapshot_no) as first_no, max(snapshot_no) as last_no
    from sightings
    group by kind, version, island
),
spans as (
    select
        v.kind,
        v.version,
        case
            when i.first_no = min(i.first_no) over (partition by v.kind, v.version) and v.created_ms < f.snapshot_ms
                then greatest(v.created_ms, coalesce(f.previous_ms + 1, v.created_ms))
            else f.snapshot_ms
        end as valid_from_ms,
        l.next_ms as valid_until_ms
    from versions as v
    join islands as i on i.kind = v.kind and i.version = v.version
    join snapshots as f on f.kind = v.kind and f.snapshot_no = i.first_no
    join snapshots as l on l.kind = v.kind and l.snapshot_no = i.last_no
    where not v.whole_window
    union all
    select kind, version, null::bigint, null::bigint from versions where whole_window
)
select kind, version, valid_from_ms, valid_until_ms
from spans
