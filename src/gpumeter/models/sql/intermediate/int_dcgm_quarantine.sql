-- One row per raw DCGM row × reason the accounting did not take it as it came: dropped, value ignored,
-- clamped, deduplicated or merged. The samples with copies and the GPUs on two nodes come from the sample
-- pass (gpumeter.models.sample_pass); the rows are the judged raw rows of those samples.
with read_values as not materialized (
    -- The rows whose value a sample reads, at the value it takes.
    select * exclude (series_key, holder_unverified, value_read, observes, dropped, quarantined, reason), series_key
    from stg_dcgm_judged
    where not dropped and clean_value is not null and value_read
),
split_series as materialized (
    -- Series that share a sample's grain (node, GPU, MIG instance, pod labels) but differ in modelName or MIG
    -- profile: their rows can be copies of one reading without any one series showing two.
    select series_key
    from stg_dcgm_series
    qualify count(*) over (partition by cluster, node, uuid, gpu_i_id, namespace, pod, container) > 1
),
copied_samples as materialized (
    select ts_ms, series_key from int_dcgm_copied_samples
),
candidates as (
    select * from read_values semi join copied_samples using (ts_ms, series_key)
    union all
    select * from read_values semi join split_series using (series_key)
    anti join copied_samples using (ts_ms, series_key)
),
extra_copies as (
    -- R1: two rows of one metric for one sample (cluster, timestamp, node, GPU, MIG instance, pod labels)
    -- are one reading. Equal copies are deduplicated; copies that disagree keep the largest value
    -- (order-free) and are reported.
    select
        * exclude (series_key),
        max(clean_value) over sample as kept_value,
        row_number() over (sample order by clean_value desc) as copy_number
    from candidates
    window sample as (partition by cluster, ts_ms, metric, hostname, uuid, gpu_i_id, namespace, pod, container)
),
shared_uuids as materialized (
    -- One GPU UUID reported by two nodes at one time is one GPU (R1, R4): it is counted once, at the first
    -- node by name (int_gpu_samples), and the other node's rows are reported here.
    select g.cluster, g.uuid, s.ts_ms, n.node as billed_node
    from int_gpu_samples_on_several_nodes as s
    join (select distinct gpu_key, cluster, uuid from stg_dcgm_series) as g using (gpu_key)
    join stg_dcgm_nodes as n on n.node_key = s.billed_node_key
)
select
    * exclude (series_key, holder_unverified, value_read, observes, dropped, quarantined, reason, clean_value),
    reason,
    case
        when dropped then 'dropped'
        when reason = 'over_range' then 'clamped'
        else 'value_ignored'
    end as action,
    case when not dropped then clean_value end as clean_value
from stg_dcgm_judged
-- The sample pass says whether the day has a dropped row, and one whose value was ignored or clamped
-- (gpumeter.models.sample_pass). A day with neither is the usual day: the condition folds to false as the
-- query is planned, and the day's rows are not scanned for none. Unset (the per-sample SQL of the tests),
-- every row is looked at.
where quarantined
    and (
        (dropped and coalesce(getvariable('sample_pass__dropped_rows_seen'), true))
        or (not dropped and coalesce(getvariable('sample_pass__changed_values_seen'), true))
    )
union all
select
    * exclude (clean_value, kept_value, copy_number),
    case when clean_value = kept_value then 'duplicate_sample' else 'conflicting_values' end as reason,
    case when clean_value = kept_value then 'deduplicated' else 'largest_kept' end as action,
    clean_value
from extra_copies
where copy_number > 1
union all
select
    k.* exclude (series_key, holder_unverified, value_read, observes, dropped, quarantined, reason, clean_value),
    'uuid_on_several_nodes' as reason,
    'merged' as action,
    k.clean_value
from stg_dcgm_judged as k
join shared_uuids as s on s.cluster = k.cluster and s.uuid = k.uuid and s.ts_ms = k.ts_ms
where not k.dropped and k.hostname is distinct from s.billed_node
