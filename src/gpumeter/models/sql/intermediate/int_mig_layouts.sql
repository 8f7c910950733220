-- One row per MIG layout of a GPU (R3): what its instances add up to at each of its samples (compute slices,
-- GPU-seconds, weights), taken once from its instances (int_mig_layout_instances) for the three marts that
-- multiply them by the GPU's samples in the layout.
select
    gpu_key,
    mig_layout_key,
    sum(compute_slices) as slices,
    -- R3, R11: Δ × each instance's weight as DECIMAL before the sum (exact).
    sum(sample_seconds(weight)) as instance_gpu_seconds,
    -- The weights' plain sum rounded to 9 places, which the over-booking check reads.
    round(sum(weight), 9) as weight_sum,
    -- R4, R11: the weights in whole 56ths of the GPU (exact), and the instance that takes the rounding residue.
    sum(weight_units) as weight_units,
    min(device_key) as first_device_key
-- A layout is one class per instance; its instances on two nodes (one UUID on two nodes) count once.
from (
    select distinct gpu_key, mig_layout_key, device_key, compute_slices, weight, weight_units
    from int_mig_layout_instances
)
group by gpu_key, mig_layout_key
