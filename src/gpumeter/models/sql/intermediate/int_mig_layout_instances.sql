-- One row per MIG instance of each layout of a GPU on a node (R3): the instance's class and its samples in the
-- layout summed, by integer keys. A layout is a set of instances, so its slices, GPU-seconds and weights at
-- each of its samples are read from its rows here, once per layout (mart_mig_slice_usage,
-- mart_stranded_capacity, mart_data_quality).
with claimed as (
    -- Device samples held through a DRA claim (the others' holders are their pod labels).
    select distinct device_key, ts_ms from int_keyed_device_holders where holder_source = 'dra'
)
select
    d.node_key, d.gpu_key, d.mig_layout_key, d.device_key, d.profile_key,
    -- Every instance sample has a class: the sample pass keeps only those; a layout is one class per instance.
    min(c.gpu_model) as gpu_model,
    min(c.compute_slices) as compute_slices,
    min(d.weight) as weight,
    min(c.weight_units) as weight_units,
    count(*) * getvariable('scrape_s') as observed_seconds,
    sum(sample_seconds(c.compute_slices)) filter (where d.labelled or h.device_key is not null) as held_slice_seconds,
    sum(sample_seconds(c.compute_slices, coalesce(d.busy, 0))) as busy_slice_seconds,
    sum(sample_seconds(c.compute_slices)) filter (where not (d.labelled or h.device_key is not null))
        as free_slice_seconds
from int_mig_instance_samples as d
join int_keyed_device_classes as c on c.model_key = d.model_key and c.profile_key = d.profile_key
left join claimed as h on h.device_key = d.device_key and h.ts_ms = d.ts_ms
group by d.node_key, d.gpu_key, d.mig_layout_key, d.device_key, d.profile_key
