-- One row per node × span of time in which OpenCost prices the node's GPU-hour at one price (R8,
-- price_source: opencost).
with held as (
    select
        node,
        ts_ms,
        gpu_price_per_hour,
        least(
            lead(ts_ms) over (partition by node order by ts_ms),
            ts_ms + getvariable('lookback_ms') + 1
        ) as until_ms
    from stg_opencost_prices
    where node is not null
),
runs as (
    select
        *,
        -- A new span starts at a new price, or where the previous sample's span ended before this one.
        sum(
            case when ts_ms = lag_until_ms and gpu_price_per_hour = lag_price then 0 else 1 end
        ) over (partition by node order by ts_ms) as span
    from (
        select
            *,
            lag(until_ms) over (partition by node order by ts_ms) as lag_until_ms,
            lag(gpu_price_per_hour) over (partition by node order by ts_ms) as lag_price
        from held
    )
)
select node, min(ts_ms) as from_ms, max(until_ms) as until_ms, any_value(gpu_price_per_hour) as gpu_price_per_hour
from runs
group by node, span
