-- int_gpu_samples as the per-sample SQL had it (reference_gpu_samples), with each MIG sample's layout: the
-- set of its instances (int_mig_instance_samples), keyed in any order. The key is not the pass's (another
-- hash of the same sets), so the differential test compares layouts by what they add up to in the marts.
select g.*, l.mig_layout_key
from reference_gpu_samples as g
left join (select distinct gpu_key, ts_ms, mig_layout_key from int_mig_instance_samples) as l
    on l.gpu_key = g.gpu_key and l.ts_ms = g.ts_ms
