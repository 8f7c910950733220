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
