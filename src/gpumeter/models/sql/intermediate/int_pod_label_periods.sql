-- One row per pod name and period in which one label set names its tenant (R7, R1a). The periods of a pod
-- tile all time: a label set holds from its first sample until the next label set of that pod name starts
-- (a relabel, or the pod recreated under the same name with other labels); the first holds since before the
-- day and the last after it (null bounds), so a device sample that the exporter attributes to the pod a
-- little before or after kube-state-metrics saw it keeps the pod's own labels. Two label sets first shown at
-- the same sample: the larger uid, then the larger label text, stands (order-free, R15).
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
