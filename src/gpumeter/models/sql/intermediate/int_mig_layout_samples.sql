-- One row per MIG GPU × node × model × layout × health: how many of the GPU's MIG samples of the day had that
-- layout (null: no instance at the sample), for the marts that multiply a layout's figures (int_mig_layouts)
-- by its samples (mart_mig_slice_usage, mart_stranded_capacity, mart_data_quality).
select node_key, gpu_key, model_key, mig_layout_key, unhealthy, count(*) as samples
from int_gpu_samples
where is_mig
group by all
