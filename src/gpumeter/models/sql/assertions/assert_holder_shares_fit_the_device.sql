-- R6: the holders' shares of a device sample sum to at most the whole device, exactly: Σ share_numerator /
-- share_denominator ≤ 1, counted in 1 / L with L the least common multiple of the denominators. holder_count
-- (the sample's number of holders) tells the samples to sum: one holder's share is at most 1 on its own. Run on
-- the keyed holders the marts read (int_device_holders shows the same rows with names); the device is named.
with shared as (
    select device_key, ts_ms, share_numerator, share_denominator
    from int_keyed_device_holders
    where holder_count > 1
),
scale as (
    select list_reduce([1::hugeint] || coalesce(list(distinct share_denominator), []), lambda a, b: lcm(a, b)) as l
    from shared
),
overbooked as (
    select s.device_key, s.ts_ms, sum(s.share_numerator * (c.l // s.share_denominator)) as held, c.l as whole
    from shared as s
    cross join scale as c
    group by s.device_key, s.ts_ms, c.l
    having sum(s.share_numerator * (c.l // s.share_denominator)) > c.l
    union all
    select device_key, ts_ms, share_numerator, share_denominator
    from int_keyed_device_holders
    where holder_count = 1 and share_numerator > share_denominator
)
select
    d.device_id,
    o.ts_ms,
    'the holders of device ' || d.device_id || ' at ' || utc_text(o.ts_ms) || ' hold ' || o.held || '/' || o.whole
        || ' of it, more than the whole device: the shares of one device sample must sum to at most 1; report '
        || 'it with the day''s raw files and config' as message
from overbooked as o
join stg_dcgm_devices as d on d.device_key = o.device_key
order by d.device_id, o.ts_ms
