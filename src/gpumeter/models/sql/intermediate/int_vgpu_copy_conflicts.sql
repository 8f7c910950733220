-- One row per device sample of the day whose vgpu copies disagree (R1, R6): dcgm-exporter's copies of a
-- shared device for each of its pods carry the whole device's value, so two of them saying 2 % and 80 % is a
-- broken reading. int_device_samples keeps the largest (order-free); data_quality reports the sample, so it
-- is never resolved silently. Only the vgpu series are read: a handful of time-sliced GPUs.
select any_value(d.node) as node, d.device_id, s.ts_ms
from stg_dcgm_samples as s
join stg_dcgm_series as d on d.series_key = s.series_key
where d.vgpu_copy and s.in_day
group by d.device_id, s.ts_ms
having min(s.gr_engine_active) <> max(s.gr_engine_active) or min(s.gpu_util_pct) <> max(s.gpu_util_pct)
