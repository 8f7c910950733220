-- ResourceClaim allocation results × reservedFor pods (R5), deduplicated over snapshots.
select distinct
    cluster,
    claim_namespace,
    claim_name,
    driver,
    pool,
    device,
    reserved_pod,
    reserved_pod_uid
from raw_dra_allocations
where cluster = getvariable('cluster')
  and reserved_pod is not null
