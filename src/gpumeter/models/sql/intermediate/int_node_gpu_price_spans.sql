-- One row per node × span of time in which OpenCost prices the node's GPU-hour at one price (R8,
-- price_source: opencost). A sample's price holds until the node's next sample, and never more than the
-- lookback past it; a span is a run of samples at one price, each within the lookback of the one before.
with samples as (
    select
        node,
        ts_ms,
        gpu_price_per_hour,
        lag(ts_ms) over by_time as previous_ms,
        lag(gpu_price_per_hour) over by_time as previous_price,
        lead(ts_ms) over by_time as next_ms
    from stg_opencost_prices
    where node is not null
    window by_time as (partition by node order by ts_ms)
),
starts as (
    -- A new span starts at a node's first sample, at a new price, or after the previous sample's price lapsed.
    select node, ts_ms, gpu_price_per_hour, previous_ms
    from samples
    where previous_ms is null
        or ts_ms > previous_ms + getvariable('lookback_ms') + 1
        or gpu_price_per_hour <> previous_price
),
last_samples as (
    select node, ts_ms as last_ms from samples where next_ms is null
)
-- A span ends where its last sample's price ends: at the next span's start, or a lookback after that sample
-- (the sample before the next start, or the node's last).
select
    s.node,
    s.ts_ms as from_ms,
    least(
        coalesce(lead(s.ts_ms) over by_start, l.last_ms + getvariable('lookback_ms') + 1),
        coalesce(lead(s.previous_ms) over by_start, l.last_ms) + getvariable('lookback_ms') + 1
    ) as until_ms,
    s.gpu_price_per_hour
from starts as s
join last_samples as l using (node)
window by_start as (partition by s.node order by s.ts_ms)
