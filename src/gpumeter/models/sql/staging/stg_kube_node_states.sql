-- One row per node × sample of kube-state-metrics in the day and its lookback: schedulability (R11), GPU
-- capacity (R4), and until when the sample holds (R1a).
with node_series as (
    select
        cluster,
        ts_ms,
        target,
        label[1] as node,
        metric,
        label[2] as resource,
        label[3] as condition,
        label[4] as status,
        label[5] as gpu_count_label,
        value
    from (
        select
            *,
            json_extract_string(labels, ['node', 'resource', 'condition', 'status', 'label_nvidia_com_gpu_count'])
                as label
        from raw_kube_samples
    )
    where in_window(cluster, ts_ms)
      and metric in (
          'kube_node_spec_unschedulable', 'kube_node_status_condition', 'kube_node_status_capacity',
          'kube_node_status_allocatable', 'kube_node_labels'
      )
),
pod_requests as (
    select
        ts_ms,
        label[1] as node,
        sum(value) filter (where label[2] = 'cpu') as requested_cpu_cores,
        sum(value) filter (where label[2] = 'memory') as requested_memory_bytes
    from (select *, json_extract_string(labels, ['node', 'resource']) as label from raw_kube_samples)
    where in_window(cluster, ts_ms)
      and metric = 'kube_pod_container_resource_requests'
    group by all
),
node_states as (
    select
        cluster,
        ts_ms,
        node,
        target,
        bool_or(metric = 'kube_node_spec_unschedulable' and value = 1) as cordoned,
        -- NotReady: the Ready condition's "true" series is 0 (status false or unknown).
        bool_or(metric = 'kube_node_status_condition' and condition = 'Ready' and status = 'true' and value = 0)
            as not_ready,
        max(value) filter (where metric = 'kube_node_status_capacity' and resource = 'nvidia_com_gpu')
            as capacity_whole_gpus,
        max(try_cast(gpu_count_label as double)) filter (where metric = 'kube_node_labels') as labelled_gpus,
        max(value) filter (where metric = 'kube_node_status_allocatable' and resource = 'cpu')
            as allocatable_cpu_cores,
        max(value) filter (where metric = 'kube_node_status_allocatable' and resource = 'memory')
            as allocatable_memory_bytes
    from node_series
    group by all
)
select
    n.cluster,
    n.ts_ms,
    holds_until(n.ts_ms, s.next_scrape_ms) as until_ms,
    s.next_scrape_ms,
    within_day(n.ts_ms) as in_day,
    n.node,
    n.cordoned,
    n.not_ready,
    -- Physical GPUs: GPU feature discovery's count where present (MIG mixed strategy hides MIG GPUs from
    -- nvidia_com_gpu), else the node's nvidia_com_gpu capacity.
    coalesce(n.labelled_gpus, n.capacity_whole_gpus) as expected_gpus,
    n.allocatable_cpu_cores - coalesce(r.requested_cpu_cores, 0) as free_cpu_cores,
    n.allocatable_memory_bytes - coalesce(r.requested_memory_bytes, 0) as free_memory_bytes
from node_states as n
join stg_kube_target_scrapes as s
    on s.scrape_target = scrape_target(n.target, 'kube_node_spec_unschedulable') and s.ts_ms = n.ts_ms
left join pod_requests as r on r.node = n.node and r.ts_ms = n.ts_ms
