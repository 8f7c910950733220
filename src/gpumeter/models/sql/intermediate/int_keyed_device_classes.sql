-- One row per device class of the day (int_device_classes) under the integer keys of its modelName and MIG
-- profile (stg_dcgm_series), so that per-sample models look a class up by two integers.
select m.model_key, p.profile_key, c.*
from int_device_classes as c
join (select distinct model_key, model_name from stg_dcgm_series) as m on m.model_name = c.model_name
left join (select distinct profile_key, mig_profile from stg_dcgm_series) as p on p.mig_profile = c.mig_profile
