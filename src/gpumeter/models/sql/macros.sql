-- Expressions shared by the models, created once per session before any model runs (accounting.meter_day).

-- R12: an amount counted in integer units of 1 / units_per_currency (int_money_scale), shown as a decimal of
-- 12 places, rounded half up. The exact amount is the units; this is its readable form.
create or replace macro units_to_money(units, units_per_currency) as
    cast(
        (2 * units + units_per_currency // 1000000000000) // (2 * (units_per_currency // 1000000000000))
        as decimal(38, 0)
    ) * 0.000000000001::decimal(13, 12);

-- R6, R12: a device sample's share (share_numerator / share_denominator) as a whole number of 1 / share_lcm.
create or replace macro share_units(share_numerator, share_denominator, share_lcm) as
    share_numerator * (share_lcm // share_denominator);

-- R1a: the scrape target of a kube sample. A source that does not name it (`target` null) leaves it to the
-- exporter the metric comes from, named by the metric's namespace (kube, kueue, node for OpenCost).
create or replace macro scrape_target(target, metric) as coalesce(target, split_part(metric, '_', 1));

-- R1a: until when (exclusive) a kube sample at ts_ms describes its series: the target's next scrape (which
-- shows the series again or not at all), and never more than kube_lookback_seconds (a target no longer
-- scraped).
create or replace macro holds_until(ts_ms, next_scrape_ms) as
    least(coalesce(next_scrape_ms, ts_ms + getvariable('lookback_ms') + 1), ts_ms + getvariable('lookback_ms') + 1);

-- R2: a raw row of this (cluster, day) or of its lookback before midnight (the window the pull fetched).
create or replace macro in_window(cluster, ts_ms) as
    cluster = getvariable('cluster') and ts_ms >= getvariable('window_start_ms') and ts_ms < getvariable('day_end_ms');
