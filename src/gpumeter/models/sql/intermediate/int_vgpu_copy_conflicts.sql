-- One row per device sample of the day whose vgpu copies disagree (R1, R6): reported by data_quality, never
-- resolved silently. Named at the first node by name the copies name (R4): one UUID can be reported by two
-- nodes. The sample pass finds them (int_vgpu_copy_disagreements); this names them.
select n.node, d.device_id, c.ts_ms, c.device_key
from int_vgpu_copy_disagreements as c
join (select distinct device_key, device_id from stg_dcgm_series) as d using (device_key)
left join stg_dcgm_nodes as n on n.node_key = c.node_key
