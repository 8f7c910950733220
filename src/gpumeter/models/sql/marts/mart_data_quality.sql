-- One row per node of the day (null: rows without a Hostname label): coverage, observed against expected
-- GPU-seconds (R4), GPU samples that repeat a scrape, the over-booking figures the asset checks read, and the
-- raw samples int_dcgm_quarantine set aside with the GPU-seconds at stake.
with observed as (
    select n.node, o.observed_gpu_seconds, o.observed_gpus, o.repeated_scrape_samples, o.holder_unverified_samples
    from (
        select node_key, count(*) * getvariable('scrape_s') as observed_gpu_seconds,
               count(distinct gpu_key) as observed_gpus,
               count(*) filter (where repeats_scrape) as repeated_scrape_samples,
               count(*) filter (where holder_unverified) as holder_unverified_samples
        from int_gpu_samples
        group by node_key
    ) as o
    left join stg_dcgm_nodes as n on n.node_key = o.node_key
),
expected as (
    -- Each kube-state-metrics sample stands until the exporter's next scrape (R1a: a node gone from it stops
    -- counting there; Δ after the exporter's last scrape; at most the lookback), counted within the day only:
    -- the lookback's last sample describes the first seconds of the day, so the figure does not assume
    -- kube-state-metrics is scraped every Δ, nor on dcgm-exporter's grid. A node two targets report counts each
    -- moment once (stg_kube_node_states.counted_ms).
    select
        cluster,
        node,
        -- counted_ms: the time the run's samples stand for within the day (stg_kube_node_states).
        sum(expected_gpus * counted_ms) / 1000.0 as expected_gpu_seconds,
        max(expected_gpus) filter (where in_day) as expected_gpus
    from stg_kube_node_states
    where expected_gpus is not null
    group by all
    having bool_or(in_day)  -- a node of the day, not one only the lookback saw
),
devices as (
    select device_key, ts_ms, node_key, holder_key from int_keyed_device_samples
),
share_sums as (
    -- Per device sample, its holders' shares summed, rounded: order-free (R1). A pod that holds the sample
    -- alone holds its share of it (int_holders); the samples int_keyed_device_holders lists several holders,
    -- KAI or DRA holders for are summed there.
    select d.node_key, round(k.alone_share_numerator / k.alone_share_denominator, 9) as share_sum
    from devices as d
    join int_holders as k on k.holder_key = d.holder_key and not k.kai_reservation
    union all
    select d.node_key, s.share_sum
    from (
        select h.device_key, h.ts_ms, round(sum(h.share), 9) as share_sum
        from int_keyed_device_holders as h
        group by h.device_key, h.ts_ms
    ) as s
    join devices as d on d.device_key = s.device_key and d.ts_ms = s.ts_ms
),
overbooked_holders as (
    select n.node, o.max_holder_share_sum, o.overbooked_device_samples
    from (
        select node_key, max(share_sum) as max_holder_share_sum,
               count(*) filter (where share_sum > 1 + 1e-9) as overbooked_device_samples
        from share_sums
        group by node_key
    ) as o
    left join stg_dcgm_nodes as n on n.node_key = o.node_key
),
conflicting_copies as (
    -- vgpu copies of one device sample that disagree (the device sample keeps the largest): reported, never
    -- resolved silently. Counted at the GPU's node, like the device sample.
    select n.node, count(*) as conflicting_copy_samples
    from int_vgpu_copy_conflicts as c
    join devices as g on g.device_key = c.device_key and g.ts_ms = c.ts_ms
    left join stg_dcgm_nodes as n on n.node_key = g.node_key
    group by all
),
mig_weights as (
    -- A layout's instances' weights summed, rounded to 9 places (over 1: an over-booked GPU), and the GPU's
    -- samples in that layout.
    select g.node_key, w.weight_sum, g.samples
    from int_mig_layout_samples as g
    join int_mig_layouts as w using (gpu_key, mig_layout_key)
),
overbooked_mig as (
    select n.node, o.max_mig_weight_sum, o.overbooked_mig_samples
    from (
        select node_key, max(weight_sum) as max_mig_weight_sum,
               coalesce(sum(samples) filter (where weight_sum > 1 + 1e-9), 0)::bigint as overbooked_mig_samples
        from mig_weights
        group by node_key
    ) as o
    left join stg_dcgm_nodes as n on n.node_key = o.node_key
),
unmapped as (
    select node, count(distinct namespace) as unmapped_namespaces,
           sum(device_seconds) as unmapped_device_seconds
    from mart_device_seconds
    where tenant = '__unallocated__'
    group by all
),
quarantine as (
    -- GPU-seconds at stake weigh the device by its class where the day has it, else 1 (an upper bound: a
    -- device is at most one GPU).
    select
        q.hostname as node,
        q.reason,
        q.action,
        coalesce(q.uuid, q.hostname || '/' || q.gpu, '?') || coalesce('/' || q.gpu_i_id, '') as device_key,
        q.ts_ms,
        coalesce(c.weight, 1.0) as weight
    from int_dcgm_quarantine as q
    left join int_device_classes as c
        on c.model_name = q.model_name and c.mig_profile is not distinct from q.gpu_i_profile
),
quarantine_by_reason as (
    select
        node,
        reason,
        count(*) as raw_samples,
        -- A deduplicated copy loses nothing: no GPU-seconds at stake.
        case when reason = 'duplicate_sample' then 0 else count(distinct (device_key, ts_ms)) end
            as device_samples
    from quarantine
    group by node, reason
),
quarantine_seconds as (
    -- Each device sample once, however many of its metrics were hit (R1).
    select
        node,
        sum(sample_seconds(weight)) as gpu_seconds,
        sum(sample_seconds(weight)) filter (where dropped) as dropped_gpu_seconds
    from (
        select node, device_key, ts_ms, max(weight) as weight, bool_or(action = 'dropped') as dropped
        from quarantine
        where reason <> 'duplicate_sample'
        group by node, device_key, ts_ms
    )
    group by node
),
quarantine_nodes as (
    select
        node,
        (sum(raw_samples) filter (where reason <> 'duplicate_sample'))::bigint as quarantined_samples,
        (sum(raw_samples) filter (where reason = 'duplicate_sample'))::bigint as duplicate_samples,
        '{' || string_agg(
            '"' || reason || '": {"samples": ' || raw_samples || ', "device_samples": ' || device_samples || '}',
            ', ' order by reason
        ) || '}' as quarantine_by_reason
    from quarantine_by_reason
    group by node
),
intervals as (
    -- R1: the interval the node's GPUs are sampled at, from the gaps between a GPU's consecutive samples of the
    -- day: the most common (the least where two are as common), and how many gaps lie from ¾ Δ to 1½ Δ (an HA
    -- pair's merged stream has gaps a replica's offset off Δ; a missed scrape makes one of 2 Δ).
    select
        n.node,
        arg_max(g.gap_s, g.gaps::hugeint * 4096 - g.gap_s) as dcgm_interval_seconds,
        coalesce(sum(g.gaps) filter (
            where g.gap_s >= 0.75 * getvariable('scrape_s') and g.gap_s < 1.5 * getvariable('scrape_s')
        ), 0)::bigint as dcgm_gaps_near_scrape_interval,
        sum(g.gaps)::bigint as dcgm_sample_gaps
    from int_gpu_sample_gaps as g
    left join stg_dcgm_nodes as n on n.node_key = g.node_key
    group by n.node
),
nodes as (
    select node from observed
    union
    select node from expected
    union
    select node from quarantine_nodes
)
select
    getvariable('cluster') as cluster,
    metered_day() as day,
    n.node,
    coalesce(o.observed_gpus, 0) as observed_gpus,
    e.expected_gpus,
    coalesce(o.observed_gpu_seconds, 0) as observed_gpu_seconds,
    coalesce(e.expected_gpu_seconds, o.observed_gpu_seconds, 0) as expected_gpu_seconds,
    greatest(coalesce(e.expected_gpu_seconds, 0) - coalesce(o.observed_gpu_seconds, 0), 0) as unobserved_gpu_seconds,
    coalesce(h.max_holder_share_sum, 0) as max_holder_share_sum,
    coalesce(h.overbooked_device_samples, 0) as overbooked_device_samples,
    coalesce(m.max_mig_weight_sum, 0) as max_mig_weight_sum,
    coalesce(m.overbooked_mig_samples, 0) as overbooked_mig_samples,
    coalesce(u.unmapped_namespaces, 0) as unmapped_namespaces,
    coalesce(u.unmapped_device_seconds, 0) as unmapped_device_seconds,
    coalesce(qn.quarantined_samples, 0) as quarantined_samples,
    coalesce(qs.gpu_seconds, 0) as quarantined_gpu_seconds,
    coalesce(qs.dropped_gpu_seconds, 0) as dropped_gpu_seconds,
    coalesce(qn.duplicate_samples, 0) as duplicate_samples,
    coalesce(cc.conflicting_copy_samples, 0) as conflicting_copy_samples,
    coalesce(o.repeated_scrape_samples, 0) as repeated_scrape_samples,
    coalesce(o.repeated_scrape_samples, 0) * getvariable('scrape_s') as repeated_scrape_gpu_seconds,
    coalesce(qn.quarantine_by_reason, '{}') as quarantine_by_reason,
    coalesce(o.holder_unverified_samples, 0) * getvariable('scrape_s') as holder_unverified_gpu_seconds,
    i.dcgm_interval_seconds,
    coalesce(i.dcgm_sample_gaps, 0) as dcgm_sample_gaps,
    coalesce(i.dcgm_gaps_near_scrape_interval, 0) as dcgm_gaps_near_scrape_interval
from nodes as n
left join observed as o on o.node is not distinct from n.node
left join expected as e on e.node is not distinct from n.node
left join overbooked_holders as h on h.node is not distinct from n.node
left join overbooked_mig as m on m.node is not distinct from n.node
left join unmapped as u on u.node is not distinct from n.node
left join quarantine_nodes as qn on qn.node is not distinct from n.node
left join quarantine_seconds as qs on qs.node is not distinct from n.node
left join conflicting_copies as cc on cc.node is not distinct from n.node
left join intervals as i on i.node is not distinct from n.node
