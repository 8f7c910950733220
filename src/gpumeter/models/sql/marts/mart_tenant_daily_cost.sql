-- One row per tenant × charge type × GPU model × MIG profile of the day: the tariff's lines, the idle shares
-- and what is left of the pool cost as __idle__, in integer units (`amount_units`, R12) and as a decimal
-- `amount`; both sum to the pool cost exactly (R13).
with idle_unspread as (
    -- What no policy spread: all of it under platform, a model nobody was charged for under proportional.
    select i.*
    from int_pool_idle as i
    where getvariable('idle_policy') = 'platform'
       or not exists (select 1 from int_idle_shares as s where s.gpu_model = i.gpu_model)
),
idle_lines as (
    select
        cluster,
        day,
        '__idle__' as tenant,
        null::varchar as cost_center,
        'idle' as charge_type,
        gpu_model,
        null::varchar as mig_profile,
        cast(0 as decimal(38, 12)) as device_seconds,
        gpu_seconds,
        cast(0 as decimal(38, 12)) as busy_gpu_seconds,
        case when energy_priced() then 0 else energy_joules end::decimal(38, 12) as energy_joules,
        time_units as amount_units
    from idle_unspread
    union all
    -- The pool's energy no holder paid is __idle__'s `energy` line.
    select
        cluster,
        day,
        '__idle__' as tenant,
        null::varchar as cost_center,
        'energy' as charge_type,
        gpu_model,
        null::varchar as mig_profile,
        cast(0 as decimal(38, 12)) as device_seconds,
        cast(0 as decimal(38, 12)) as gpu_seconds,
        cast(0 as decimal(38, 12)) as busy_gpu_seconds,
        energy_joules,
        energy_units as amount_units
    from idle_unspread
    where energy_priced()
),
lines as (
    -- `balances`: the one line per GPU model whose decimal `amount` is what the pool's decimals leave.
    select *, false as balances from int_tenant_tariff_lines
    union all
    select * exclude (takes_remainder), takes_remainder as balances from int_idle_shares
    union all
    select *, charge_type = 'idle' as balances from idle_lines
),
shown as (
    select l.*, units_to_money(l.amount_units, m.units_per_currency) as rounded, m.units_per_currency
    from lines as l
    cross join int_money_scale as m
),
pool_shown as (
    select gpu_model, sum(pool_cost) as pool_cost from mart_pool_daily_cost group by gpu_model
)
-- `amount` is each line's units as a decimal of 12 places, except the balancing line, which is what the pool's
-- decimals leave: so the decimals add up to the pool cost's exactly too, and differ from the units' exact
-- value by less than a unit of the 12th place per line.
select
    s.* exclude (rounded, balances, amount_units, units_per_currency),
    case
        when s.balances
            then p.pool_cost - coalesce(sum(s.rounded) filter (where not s.balances) over (partition by s.gpu_model), 0)
        else s.rounded
    end as amount,
    s.amount_units,
    s.units_per_currency
from shown as s
join pool_shown as p on p.gpu_model = s.gpu_model
