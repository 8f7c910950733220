-- ResourceClaim allocation results × reservedFor pods (R5), one row per object version (a result and pod
-- as a snapshot shows them, claim_uid and reserved_pod_uid included) and span of validity
-- [valid_from_ms, valid_until_ms), null = unbounded. A version is valid from the first snapshot showing it
-- (the claim's creationTimestamp when earlier, but never at or before the snapshot just before, which did
-- not show it) until the first later snapshot that does not show it, open-ended when the last snapshot
-- still shows it; shown again later, it has another span. A version seen in a snapshot of unknown time is
-- valid for the whole window (docs/accounting.md R5).
with claim_rows as (
    select
        {
            'cluster': cluster,
            'claim_namespace': claim_namespace,
            'claim_name': claim_name,
            'claim_uid': claim_uid,
            'driver': driver,
            'pool': pool,
            'device': device,
            'reserved_pod': reserved_pod,
            'reserved_pod_uid': reserved_pod_uid
        } as version,
        cast(snapshot_ms as bigint) as snapshot_ms,
        cast(created_ms as bigint) as created_ms,
        claim_name is null as is_marker
    from raw_dra_allocations
    where cluster = getvariable('cluster') and (claim_name is null or reserved_pod is not null)
),
snapshots as (
    -- Every look of known time, in order: empty ones too (their marker rows, metering/k8s_objects.py).
    select
        snapshot_ms,
        row_number() over (order by snapshot_ms) as snapshot_no,
        lag(snapshot_ms) over (order by snapshot_ms) as previous_ms,
        lead(snapshot_ms) over (order by snapshot_ms) as next_ms
    from (select distinct snapshot_ms from claim_rows where snapshot_ms is not null)
),
versions as (
    select
        version,
        bool_or(snapshot_ms is null) as whole_window,
        min(created_ms) as created_ms
    from claim_rows
    where not is_marker
    group by version
),
sightings as (
    -- Consecutive snapshots showing a version are one island: snapshot_no minus its rank among them.
    select
        c.version,
        s.snapshot_no,
        s.snapshot_no - row_number() over (partition by c.version order by s.snapshot_no) as island
    from (select distinct version, snapshot_ms from claim_rows where not is_marker) as c
    join snapshots as s on s.snapshot_ms = c.snapshot_ms
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
    version.claim_namespace,
    version.claim_name,
    version.claim_uid,
    version.driver,
    version.pool,
    version.device,
    version.reserved_pod,
    version.reserved_pod_uid,
    valid_from_ms,
    valid_until_ms
from spans
