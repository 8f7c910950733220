-- One row: the day's unit of money (R12), 1 / units_per_currency, from the least common multiple of the
-- day's share denominators.
select
    share_lcm,
    getvariable('money_units_base')::hugeint * share_lcm as units_per_currency
from (
    select list_reduce([1::bigint] || coalesce(list(distinct share_denominator), []), lambda a, b: lcm(a, b))
        as share_lcm
    from int_keyed_device_holders
)
