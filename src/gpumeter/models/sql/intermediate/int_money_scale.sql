-- One row: the day's unit of money (R12), 1 / units_per_currency, from the least common multiple of the
-- day's share denominators.
with share_denominators as (
    select share_denominator from int_keyed_device_holders
    union all
    -- A pod that holds a device sample alone holds the share int_holders gives it (a KAI reservation pod's
    -- group holds it instead: int_keyed_device_holders). Only a declared fraction makes it other than 1/1.
    select h.alone_share_denominator
    from int_holders as h
    where h.alone_share_denominator <> 1
        and not h.kai_reservation
        and h.holder_key in (select holder_key from int_keyed_device_samples)
)
select
    share_lcm,
    getvariable('money_units_base')::hugeint * share_lcm as units_per_currency
from (
    select list_reduce([1::bigint] || coalesce(list(distinct share_denominator), []), lambda a, b: lcm(a, b))
        as share_lcm
    from share_denominators
)
