-- One row per node × run of kube-state-metrics scrapes in the day and its lookback over which the node's state
-- is one: schedulability (R11), GPU capacity (R4), until when its last sample holds (R1a), and the time its
-- samples stand for within the day (R4 coverage). A node's state changes only where one of its series' spans
-- (stg_kube_spans) starts or ends, or where a request of one of its pods starts or stops holding.
with node_spans as (
    select
        cluster,
        scrape_target,
        label[1] as node,
        metric,
        label[2] as resource,
        label[3] as condition,
        label[4] as status,
        label[5] as gpu_count_label,
        value,
        from_index,
        to_index,
        until_ms
    from (
        select
            *,
            json_extract_string(labels, ['node', 'resource', 'condition', 'status', 'label_nvidia_com_gpu_count'])
                as label
        from stg_kube_spans
        where metric in (
            'kube_node_spec_unschedulable', 'kube_node_status_condition', 'kube_node_status_capacity',
            'kube_node_status_allocatable', 'kube_node_labels'
        )
    )
),
nodes as (
    select distinct cluster, scrape_target, node from node_spans
),
scrapes as (
    -- Per scrape: the time its samples stand for within the day (a sample stands until the exporter's next
    -- scrape, Δ after its last one, at most the lookback; mart_data_quality's expected capacity), summed in
    -- scrape order so that a run's sum is a difference.
    select *, sum(counted_ms) over (partition by scrape_target order by scrape_index) as counted_through_ms
    from (
        select *, counted_within_day(ts_ms, stands_until_ms) as counted_ms
        from (
            select
                *,
                ts_ms + least(coalesce(next_scrape_ms - ts_ms, getvariable('scrape_s') * 1000), getvariable('lookback_ms'))
                    as stands_until_ms
            from stg_kube_target_scrapes
        )
    )
),
request_spans as (
    -- R1a: a pod's request holds from its sample until its target's next scrape; on the node's target's
    -- scrapes that is from the first scrape at or after its first sample to the first at or after it ends.
    -- The pods' target may be another than the node's (kube-state-metrics sharded by object).
    select
        n.cluster,
        n.scrape_target,
        n.node,
        r.request_series,
        r.resource,
        r.value * r.copies as value,
        r.from_ms,
        r.until_ms
    from (
        select
            hash(labels) as request_series,  -- the series' label set, as one integer to group by
            json_extract_string(labels, ['node', 'resource']) as label,
            label[1] as node,
            label[2] as resource,
            value,
            copies,
            from_ms,
            until_ms
        from stg_kube_spans
        where metric = 'kube_pod_container_resource_requests'
    ) as r
    join nodes as n on n.node = r.node
    where r.resource in ('cpu', 'memory')
),
request_bounds as (
    select r.*, f.scrape_index as from_index, e.scrape_index as end_index
    from request_spans as r
    asof left join stg_kube_target_scrapes as f on f.scrape_target = r.scrape_target and r.from_ms <= f.ts_ms
    asof left join stg_kube_target_scrapes as e on e.scrape_target = r.scrape_target and r.until_ms <= e.ts_ms
),
changes as (
    -- Where the node's state can change: its series' spans start or end, a request starts or stops holding.
    select cluster, scrape_target, node, from_index as at_index from node_spans
    union
    select cluster, scrape_target, node, to_index + 1 from node_spans
    union
    select cluster, scrape_target, node, from_index from request_bounds where from_index is not null
    union
    select cluster, scrape_target, node, end_index from request_bounds where end_index is not null
),
runs as (
    select *, lead(at_index) over (partition by cluster, scrape_target, node order by at_index) - 1 as last_index
    from changes
),
states as (
    select
        c.cluster,
        c.scrape_target,
        c.node,
        c.at_index,
        c.last_index,
        bool_or(n.metric = 'kube_node_spec_unschedulable' and n.value = 1) as cordoned,
        -- NotReady: the Ready condition's "true" series is 0 (status false or unknown).
        bool_or(n.metric = 'kube_node_status_condition' and n.condition = 'Ready' and n.status = 'true' and n.value = 0)
            as not_ready,
        max(n.value) filter (where n.metric = 'kube_node_status_capacity' and n.resource = 'nvidia_com_gpu')
            as capacity_whole_gpus,
        max(try_cast(n.gpu_count_label as double)) filter (where n.metric = 'kube_node_labels') as labelled_gpus,
        max(n.value) filter (where n.metric = 'kube_node_status_allocatable' and n.resource = 'cpu')
            as allocatable_cpu_cores,
        max(n.value) filter (where n.metric = 'kube_node_status_allocatable' and n.resource = 'memory')
            as allocatable_memory_bytes,
        -- Until when the node's series hold (stg_kube_spans): later than the run's end but where the target's
        -- run ends with them and another target has taken them over (a rollout with a surge, R1a).
        max(n.until_ms) as series_until_ms
    from runs as c
    join node_spans as n
        on n.cluster = c.cluster
        and n.scrape_target = c.scrape_target
        and n.node is not distinct from c.node
        and c.at_index between n.from_index and n.to_index
    group by all
),
requests as (
    select
        cluster,
        scrape_target,
        node,
        at_index,
        sum(value) filter (where resource = 'cpu') as requested_cpu_cores,
        sum(value) filter (where resource = 'memory') as requested_memory_bytes
    from (
        -- One request series once, however many targets show it (kube-state-metrics scraped by two jobs):
        -- the largest value standing, as for copies (R1).
        select c.cluster, c.scrape_target, c.node, c.at_index, r.request_series, r.resource, max(r.value) as value
        from runs as c
        join request_bounds as r
            on r.cluster = c.cluster
            and r.scrape_target = c.scrape_target
            and r.node = c.node
            and c.at_index >= r.from_index
            and (r.end_index is null or c.at_index < r.end_index)
        group by all
    )
    group by all
),
shared_nodes as (
    -- Nodes that more than one target reports: kube-state-metrics scraped by two jobs, or a new target that
    -- replaced another (a restarted exporter).
    select cluster, node from states group by all having count(distinct scrape_target) > 1
),
shared_counted as (
    -- For such a node each moment counts once: a sample stands until the node's next sample from any
    -- target (the latest sample tells the node's state), and never longer than it would alone. Two targets'
    -- samples at one time (a surge rollout, two jobs scraped at once) are ordered by target, so that the
    -- moment counts for the last of them, the same one on every run (R15).
    select cluster, scrape_target, node, at_index, sum(counted_ms) as counted_ms
    from (
        select
            n.cluster,
            n.scrape_target,
            n.node,
            n.at_index,
            counted_within_day(
                s.ts_ms,
                least(
                    s.stands_until_ms,
                    coalesce(
                        lead(s.ts_ms) over (partition by n.cluster, n.node order by s.ts_ms, n.scrape_target),
                        s.stands_until_ms
                    )
                )
            ) as counted_ms
        from states as n
        semi join shared_nodes as d on d.cluster = n.cluster and d.node is not distinct from n.node
        join scrapes as s
            on s.scrape_target = n.scrape_target and s.scrape_index between n.at_index and n.last_index
    )
    group by all
)
select
    n.cluster,
    n.scrape_target,
    a.ts_ms,
    -- The node's state from this target ends when its series do: at the target's next scrape, or where another
    -- target took them over.
    least(holds_until(b.ts_ms, b.next_scrape_ms), n.series_until_ms) as until_ms,
    b.ts_ms as last_ms,
    a.ts_ms < getvariable('day_end_ms') and b.ts_ms >= getvariable('day_start_ms') as in_day,
    n.node,
    n.cordoned,
    n.not_ready,
    -- Physical GPUs: GPU feature discovery's count where present (MIG mixed strategy hides MIG GPUs from
    -- nvidia_com_gpu), else the node's nvidia_com_gpu capacity.
    coalesce(n.labelled_gpus, n.capacity_whole_gpus) as expected_gpus,
    n.allocatable_cpu_cores - coalesce(r.requested_cpu_cores, 0) as free_cpu_cores,
    n.allocatable_memory_bytes - coalesce(r.requested_memory_bytes, 0) as free_memory_bytes,
    coalesce(c.counted_ms, b.counted_through_ms - a.counted_through_ms + a.counted_ms) as counted_ms
from states as n
join scrapes as a on a.scrape_target = n.scrape_target and a.scrape_index = n.at_index
join scrapes as b on b.scrape_target = n.scrape_target and b.scrape_index = n.last_index
left join requests as r
    on r.cluster = n.cluster
    and r.scrape_target = n.scrape_target
    and r.node is not distinct from n.node
    and r.at_index = n.at_index
left join shared_counted as c
    on c.cluster = n.cluster
    and c.scrape_target = n.scrape_target
    and c.node is not distinct from n.node
    and c.at_index = n.at_index
