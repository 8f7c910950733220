-- ResourceClaim allocation results × reservedFor pods (R5), one row per object version (a result and pod as
-- a snapshot shows them, claim_uid and reserved_pod_uid included) and span of validity [valid_from_ms,
-- valid_until_ms), null = unbounded: stg_dra_object_spans says when each version was valid.
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
