-- One row per MIG sample of a GPU (R3): what its instances add up to at that sample (their layout, compute
-- slices, weight and GPU-seconds), by integer keys. Three marts read these sums; they are taken once here from
-- the day's tens of millions of instance samples, not once per mart.
select
    d.gpu_key,
    d.ts_ms,
    -- An instance is on its GPU's node (int_mig_instance_samples): one node per GPU sample.
    d.node_key,
    -- The layout, keyed by an order-free hash of its instances; mart_mig_slice_usage names it.
    bit_xor(hash(d.device_key, d.profile_key)) as layout_key,
    sum(c.compute_slices) as slices,
    -- R3, R11: the instances' weights, each sample's as DECIMAL before the sum (exact), and as a plain sum
    -- rounded to 9 places, which the over-booking check reads.
    sum(sample_seconds(d.weight)) as instance_gpu_seconds,
    round(sum(d.weight), 9) as weight_sum
from int_mig_instance_samples as d
-- Every instance sample has a class: the sample pass keeps only those.
join int_keyed_device_classes as c on c.model_key = d.model_key and c.profile_key = d.profile_key
group by d.gpu_key, d.ts_ms, d.node_key
