-- R1: a series is keyed by one integer (stg_dcgm_judged: stored with its rows, or a 64-bit hash of its labels).
-- A series whose rows carry two keys would split its samples; two series under one key would merge theirs:
-- either way the day stops instead.
select
    min(series_key) as series_key,
    'the DCGM series of GPU ' || coalesce(uuid, '?') || coalesce(' instance ' || gpu_i_id, '')
        || coalesce(' on node ' || node, '') || coalesce(' of pod ' || namespace || '/' || pod, '')
        || ' carries two series keys in the day''s raw DCGM files (written by two sources that key a '
        || 'series differently): re-pull the day, or remove the series_key column from its files' as message
from stg_dcgm_series
group by cluster, node, uuid, gpu_i_id, model_name, mig_profile, namespace, pod, container
having count(*) > 1
union all
select
    series_key,
    'two DCGM series share the key ' || series_key || ' (a collision of their labels'' 64-bit keys): the '
        || 'day cannot be metered exactly; report it with the day''s raw files' as message
from stg_dcgm_series
where not labels_agree
order by series_key
