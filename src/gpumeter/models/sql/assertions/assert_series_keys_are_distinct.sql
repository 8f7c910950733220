-- R1: series are keyed by a 64-bit hash of their labels (stg_dcgm_judged); two label sets under one key would
-- merge two series' samples, so the day stops instead.
select
    series_key,
    'two DCGM series share the key ' || series_key || ' (a hash collision of their labels): the day cannot be '
        || 'metered exactly; report it with the day''s raw files' as message
from stg_dcgm_series
group by series_key
having count(*) > 1
order by series_key
