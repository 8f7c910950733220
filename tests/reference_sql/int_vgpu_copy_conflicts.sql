-- One row per device sample of the day whose vgpu copies disagree (R1, R6): reported by data_quality, never
-- resolved silently. Named at the first node by name, where its GPU is billed (R4): one UUID can be reported by
-- two nodes.
select min(d.node) as node, d.device_id, s.ts_ms, d.device_key
from stg_dcgm_samples as s
join stg_dcgm_series as d on d.series_key = s.series_key
where d.vgpu_copy and s.in_day
group by d.device_key, d.device_id, s.ts_ms
having min(s.gr_engine_active) <> max(s.gr_engine_active) or min(s.gpu_util_pct) <> max(s.gpu_util_pct)
