-- R6: the holders' shares of a device sample sum to at most the whole device, exactly: Σ share_numerator /
-- share_denominator ≤ 1, counted in 1 / L with L the least common multiple of the denominators. holder_count
-- (the sample's number of holders) tells the samples to sum: one holder's share is at most 1 on its own.
with shared as (
    select device_id, ts_ms, share_numerator, share_denominator
    from int_device_holders
    where holder_count > 1
),
scale as (
    select list_reduce([1::hugeint] || coalesce(list(distinct share_denominator), []), lambda a, b: lcm(a, b)) as l
    from shared
),
overbooked as (
    select s.device_id, s.ts_ms, sum(s.share_numerator * (c.l // s.share_denominator)) as held, c.l as whole
    from shared as s
    cross join scale as c
    group by s.device_id, s.ts_ms, c.l
    having sum(s.share_numerator * (c.l // s.share_denominator)) > c.l
    union all
    select device_id, ts_ms, share_numerator, share_denominator
    from int_device_holders
    where holder_count = 1 and share_numerator > share_denominator
)
select
    device_id,
    ts_ms,
    'the holders of device ' || device_id || ' at ' || utc_text(ts_ms) || ' hold ' || held || '/' || whole
        || ' of it, more than the whole device: the shares of one device sample must sum to at most 1; report '
        || 'it with the day''s raw files and config' as message
from overbooked
order by device_id, ts_ms
