-- One row per ResourceClaim allocation result × reserved pod version × span of validity (R5).
select
    version ->> 'cluster' as cluster,
    version ->> 'claim_namespace' as claim_namespace,
    version ->> 'claim_name' as claim_name,
    version ->> 'claim_uid' as claim_uid,
    version ->> 'driver' as driver,
    version ->> 'pool' as pool,
    version ->> 'device' as device,
    version ->> 'reserved_pod' as reserved_pod,
    version ->> 'reserved_pod_uid' as reserved_pod_uid,
    valid_from_ms,
    valid_until_ms
from stg_dra_object_spans
where kind = 'claim'
