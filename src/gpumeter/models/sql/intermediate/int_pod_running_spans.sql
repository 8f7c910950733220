-- One row per pod (by uid) × span of time in which it is Running (R5, R1a).
with shown as (
    -- A pod shown by two targets is Running while either shows it.
    select {'namespace': namespace, 'pod': pod, 'pod_uid': pod_uid} as key, from_ms, until_ms
    from stg_kube_pod_phases
)
select key.namespace, key.pod, key.pod_uid, from_ms, until_ms
from merged_spans(shown)
