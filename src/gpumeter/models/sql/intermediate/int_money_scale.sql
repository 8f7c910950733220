-- One row: the day's unit of money (R12). Every money term of the day is an integer number of units of
-- 1 / units_per_currency: Δ in ms × 1,000 × a price in 1e-8 × a weight in 56ths × a share, where the share's
-- denominator divides share_lcm (the least common multiple of the day's share denominators). Sums of units
-- are exact, and an invoice line is rounded once from their exact quotient (gpumeter/billing/invoices.py).
select
    share_lcm,
    getvariable('money_units_base')::hugeint * share_lcm as units_per_currency
from (
    select list_reduce([1::bigint] || coalesce(list(distinct share_denominator), []), lambda a, b: lcm(a, b))
        as share_lcm
    from int_device_holders
)
