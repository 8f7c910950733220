-- One row per pod name × period in which one label set names its tenant (R7, R1a); the periods of a pod tile
-- all time (null bounds: open-ended).
with starts as (
    select namespace, pod, from_ms, labels_json
    from stg_kube_pod_labels
    qualify row_number() over (
        partition by namespace, pod, from_ms order by pod_uid desc nulls last, labels_json desc
    ) = 1
)
select
    namespace,
    pod,
    labels_json,
    case when lag(from_ms) over pod_periods is not null then from_ms end as from_ms,
    lead(from_ms) over pod_periods as until_ms
from starts
window pod_periods as (partition by namespace, pod order by from_ms)
