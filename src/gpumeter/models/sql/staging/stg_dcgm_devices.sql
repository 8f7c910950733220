-- One row per device the day's DCGM series name (a whole GPU, or a MIG instance of one): its integer keys
-- (stg_dcgm_series) and its names, for the models that join names to what they have summed by key.
select distinct device_key, gpu_key, cluster, device_id, uuid, gpu_i_id
from stg_dcgm_series
