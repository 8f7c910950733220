-- The labels the accounting reads, once per series instead of once per raw row, so that the per-sample models
-- group and join dense integer keys, not strings; keys are ranked in name order, so the least node key is the
-- first node by name (R4). The node is the Hostname kube-state-metrics knows, else the node of the pod so
-- named (a dcgm-exporter without NODE_NAME), else the Hostname as it came (R4).
with labelled as (
    -- Grouped by the one integer key, not by the nine labels: each row's labels are hashed once instead of
    -- compared as strings in the group-by, and a key whose rows differ in any label shows two hashes. A label
    -- is the same on every row of a key that agrees, so the first row's is it (`first`: no test for null).
    select
        series_key,
        first(cluster) as cluster,
        first(hostname) as hostname,
        first(uuid) as uuid,
        first(gpu_i_id) as gpu_i_id,
        first(model_name) as model_name,
        first(gpu_i_profile) as mig_profile,
        first(namespace) as namespace,
        first(pod) as pod,
        first(container) as container,
        -- Three yes/no questions in one aggregate state: 1, a row of the day itself (not of its lookback); 2, a
        -- vgpu copy (--kubernetes-virtual-gpus): one of several series carrying one shared device's value; 4, a
        -- row whose pod labels could not be told from its scrape target's (any row: not a label of the series).
        bit_or(
            within_day(ts_ms)::utinyint
            | ((vgpu is not null)::utinyint << 1)
            | (coalesce(holder_unverified, false)::utinyint << 2)
        ) as flags,
        min(labels) as first_labels,
        max(labels) as last_labels,
        count(*) as raw_rows
    from (
        select
            series_key, cluster, hostname, uuid, gpu_i_id, model_name, gpu_i_profile, namespace, pod, container,
            ts_ms, vgpu, holder_unverified,
            hash(cluster, hostname, uuid, gpu_i_id, model_name, gpu_i_profile, namespace, pod, container) as labels
        from stg_dcgm_judged
        where not dropped
    )
    group by series_key
),
kube_nodes as (
    select distinct json_extract_string(labels, 'node') as node
    from stg_kube_spans
    where metric in (
        'kube_node_status_capacity', 'kube_node_status_allocatable', 'kube_node_labels',
        'kube_node_spec_unschedulable', 'kube_node_status_condition'
    )
),
pod_nodes as (
    -- The least node by name where one pod name was placed on several (an exporter's own pod is on one).
    select pod, min(node) as node
    from (
        select json_extract_string(labels, 'pod') as pod, json_extract_string(labels, 'node') as node
        from stg_kube_spans
        where metric = 'kube_pod_info'
    )
    where pod is not null and node is not null and node <> ''
    group by pod
),
noded as (
    select
        l.*,
        case
            when l.hostname is null or l.hostname in (select node from kube_nodes) then l.hostname
            else coalesce(p.node, l.hostname)
        end as node,
        case
            when l.hostname in (select node from kube_nodes) then 'node'
            when p.node is not null then 'pod'
            when l.hostname is not null and exists (select 1 from kube_nodes) then 'unknown'
            else 'label'
        end as node_source
    from labelled as l
    left join pod_nodes as p on p.pod = l.hostname
)
select
    series_key,
    cluster,
    node,
    hostname,
    node_source,
    uuid,
    uuid || coalesce('/' || gpu_i_id, '') as device_id,
    gpu_i_id,
    model_name,
    mig_profile,
    namespace,
    pod,
    container,
    flags & 1 <> 0 as seen_in_day,
    flags & 2 <> 0 as vgpu_copy,
    -- Whether every row under the key carries the labels above; not where they carry two sets (two series under
    -- one key): assert_series_keys_are_distinct stops the day then.
    first_labels = last_labels as labels_agree,
    raw_rows,
    flags & 4 <> 0 as holder_unverified,
    dense_rank() over (order by uuid)::integer as gpu_key,
    dense_rank() over (order by uuid, gpu_i_id)::integer as device_key,
    case when node is not null then dense_rank() over (order by node) end::integer as node_key,
    case when model_name is not null then dense_rank() over (order by model_name) end::integer as model_key,
    case when mig_profile is not null then dense_rank() over (order by mig_profile) end::integer as profile_key,
    -- Pod labels name a holder (R5) only with both namespace and pod.
    case
        when namespace is not null and pod is not null then dense_rank() over (order by namespace, pod, container)
    end::integer as holder_key,
    -- Only a GPU that ever shows a MIG instance can change mode (R3, int_gpu_samples).
    bool_or(gpu_i_id is not null) over (partition by uuid) as gpu_shows_instances
from noded
