-- One row per node the day's DCGM series name: its integer key (stg_dcgm_series) and its name, for the models
-- that join names to what they have summed by key.
select distinct node_key, node
from stg_dcgm_series
where node is not null
