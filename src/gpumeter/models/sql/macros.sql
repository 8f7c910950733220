-- Expressions the models share, created once per session before any model runs (gpumeter.models.runner).
-- A macro is expanded where it is called: it costs what the expression it stands for costs.

-- The metered day, as the `day` column of a model.
create or replace macro metered_day() as getvariable('day')::date;

-- R2: a timestamp of the day itself (half-open), not of its lookback.
create or replace macro within_day(ts_ms) as
    ts_ms >= getvariable('day_start_ms') and ts_ms < getvariable('day_end_ms');

-- R2: a raw row of this (cluster, day) or of its lookback before midnight (the window the pull fetched).
create or replace macro in_window(cluster, ts_ms) as
    cluster = getvariable('cluster') and ts_ms >= getvariable('window_start_ms') and ts_ms < getvariable('day_end_ms');

-- R1: the seconds a sample stands for (Δ) times its factors, as DECIMAL before any sum, so that sums are exact
-- and do not depend on row order. The factors multiply Δ from the left, in the order given.
create or replace macro sample_seconds(a) as cast(getvariable('scrape_s') * a as decimal(38, 12)),
    (a, b) as cast(getvariable('scrape_s') * a * b as decimal(38, 12)),
    (a, b, c) as cast(getvariable('scrape_s') * a * b * c as decimal(38, 12));

-- R12: an amount counted in integer units of 1 / units_per_currency (int_money_scale), shown as a decimal of
-- 12 places, rounded half up. The exact amount is the units; this is its readable form.
create or replace macro units_to_money(units, units_per_currency) as
    cast(
        (2 * units + units_per_currency // 1000000000000) // (2 * (units_per_currency // 1000000000000))
        as decimal(38, 0)
    ) * 0.000000000001::decimal(13, 12);

-- R9, R12: the money units of a sample's GPU time: Δ in ms × 1,000 × a price in 1e-8 of the currency per hour
-- × a weight in 56ths × a share in 1 / share_lcm (or a sum of price × share). In HUGEINT from the first factor,
-- so that no product overflows; integer products are exact in any order.
create or replace macro time_money_units(price_units, weight_units) as
    getvariable('scrape_ms')::hugeint * 1000 * price_units * weight_units,
    (price_units, weight_units, share_units) as
    getvariable('scrape_ms')::hugeint * 1000 * price_units * weight_units * share_units;

-- R10, R14: the money units of energy: mJ × energy_price_per_kwh in 1e-8 × a weight in 56ths × a share in
-- 1 / share_lcm (or a sum of mJ × share); a kWh's 3.6 × 10^9 mJ are in the unit (gpumeter.models.money).
create or replace macro energy_money_units(energy_mj, weight_units) as
    energy_mj::hugeint * getvariable('energy_price_units') * weight_units,
    (energy_mj, weight_units, share_units) as
    energy_mj::hugeint * getvariable('energy_price_units') * weight_units * share_units;

-- R10: units × a fraction of the tariff in millionths (hybrid's reserved_fraction), rounded half up to a unit.
create or replace macro tariff_fraction_units(units, millionths) as (units * millionths + 500000) // 1000000;

-- R10, R14: energy is billed on lines of its own (an energy price is configured).
create or replace macro energy_priced() as getvariable('energy_price_per_kwh') is not null;

-- R6, R12: a device sample's share (share_numerator / share_denominator) as a whole number of 1 / share_lcm.
create or replace macro share_units(share_numerator, share_denominator, share_lcm) as
    share_numerator * (share_lcm // share_denominator);

-- R11: the capacity category of a device sample: unhealthy first (held or free), then held (a held device with
-- no utilization reading shows no evidence of work: idle), then free.
create or replace macro capacity_category(unhealthy, is_held, busy, unschedulable) as
    case
        when unhealthy then 'unhealthy'
        when is_held and coalesce(busy, 0) >= getvariable('idle_threshold') then 'allocated_active'
        when is_held then 'allocated_idle'
        when unschedulable then 'unschedulable'
        else 'free'
    end;

-- R1a: the scrape target of a kube sample. A source that does not name it (`target` null) leaves it to the
-- exporter the metric comes from, named by the metric's namespace (kube, kueue, node for OpenCost).
create or replace macro scrape_target(target, metric) as coalesce(target, split_part(metric, '_', 1));

-- R1a: until when (exclusive) a kube sample at ts_ms describes its series: the target's next scrape (which
-- shows the series again or not at all), and never more than kube_lookback_seconds (a target no longer
-- scraped).
create or replace macro holds_until(ts_ms, next_scrape_ms) as
    least(coalesce(next_scrape_ms, ts_ms + getvariable('lookback_ms') + 1), ts_ms + getvariable('lookback_ms') + 1);

-- R4 coverage: the part of [from_ms, until_ms) within the metered day, in ms (0 when they do not meet).
create or replace macro counted_within_day(from_ms, until_ms) as
    greatest(least(until_ms, getvariable('day_end_ms')) - greatest(from_ms, getvariable('day_start_ms')), 0);

-- A timestamp in ms as UTC text, e.g. 2026-11-01T00:01:00Z (microseconds shown where there are some).
create or replace macro utc_text(ts_ms) as
    case
        when ts_ms % 1000 = 0 then strftime(epoch_ms(ts_ms), '%Y-%m-%dT%H:%M:%SZ')
        else strftime(epoch_ms(ts_ms), '%Y-%m-%dT%H:%M:%S.%fZ')
    end;

-- R1a: spans [from_ms, until_ms) of one `key` that overlap, merged into one, from a table or CTE named `spans`
-- with columns key, from_ms and until_ms. What two kube-state-metrics targets both show (a pod Running, a label
-- set, a node unschedulable) holds while either shows it, and the merged spans of a key are disjoint, so that a
-- sample meets at most one.
create or replace macro merged_spans(spans) as table
    select key, min(from_ms) as from_ms, max(until_ms) as until_ms
    from (
        select *, sum(case when from_ms < reached then 0 else 1 end) over by_start as span
        from (
            select *, max(until_ms) over (by_start rows between unbounded preceding and 1 preceding) as reached
            from query_table(spans)
            window by_start as (partition by key order by from_ms, until_ms)
        )
        window by_start as (partition by key order by from_ms, until_ms)
    )
    group by key, span;

-- R1a: a target's spans of one `key` that overlap (copies, another value) or follow each other scrape after
-- scrape (stg_kube_target_scrapes.scrape_index), merged into one run: from a table or CTE named `spans` with
-- columns key, scrape_target, from_index, to_index, from_ms and until_ms.
create or replace macro scrape_runs(spans) as table
    select key, scrape_target, min(from_ms) as from_ms, max(until_ms) as until_ms
    from (
        select *, sum(case when from_index <= reached + 1 then 0 else 1 end) over by_start as run
        from (
            select *, max(to_index) over (by_start rows between unbounded preceding and 1 preceding) as reached
            from query_table(spans)
            window by_start as (partition by key, scrape_target order by from_index, to_index)
        )
        window by_start as (partition by key, scrape_target order by from_index, to_index)
    )
    group by key, scrape_target, run;
