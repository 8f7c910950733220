-- Grain: day × tenant × charge type × GPU model × MIG profile. What tenants and __unallocated__ pay under
-- the tariff (R9 `reserved`, R10 `usage`, both under hybrid), their `energy` (R10, R14), and what is left of
-- the pool cost as __idle__ (R9), or spread as idle_share lines under idle_policy: proportional.
-- Σ amount_units = pool_units, exactly (R13): money is counted in integer units of the day (int_money_scale,
-- R12) and `amount` shows them as a decimal. docs/tariffs.md explains each line.
with holdings as (
    select
        cluster,
        day,
        tenant,
        any_value(cost_center) as cost_center,
        gpu_model,
        mig_profile,
        sum(device_seconds) as device_seconds,
        sum(gpu_seconds) as gpu_seconds,
        sum(busy_device_seconds) as busy_device_seconds,
        sum(busy_gpu_seconds) as busy_gpu_seconds,
        sum(energy_joules) as energy_joules,
        sum(reserved_units) as reserved_units,
        sum(used_units) as used_units,
        sum(energy_units) as energy_units
    from mart_device_seconds
    group by cluster, day, tenant, gpu_model, mig_profile
),
tariff as (
    -- reserved: fraction 1; used: 0; hybrid: its reserved_fraction, in millionths (to the unit of money).
    select
        getvariable('reserved_millionths')::hugeint as reserved_millionths,
        1000000 - getvariable('reserved_millionths')::hugeint as usage_millionths,
        getvariable('energy_price_per_kwh') is not null as energy_priced
),
holder_lines as (
    -- R9: the reserved line bills held GPU-seconds (under hybrid at reserved_fraction of the price).
    -- Informational busy GPU-seconds, and energy while it is not billed on its own line, ride on it.
    select
        h.cluster,
        h.day,
        h.tenant,
        h.cost_center,
        'reserved' as charge_type,
        h.gpu_model,
        h.mig_profile,
        h.device_seconds,
        h.gpu_seconds,
        h.busy_gpu_seconds,
        case when t.energy_priced then 0 else h.energy_joules end::decimal(38, 12) as energy_joules,
        (h.reserved_units * t.reserved_millionths + 500000) // 1000000 as amount_units
    from holdings as h, tariff as t
    where getvariable('tariff') in ('reserved', 'hybrid')
    union all
    -- R10: the usage line bills busy GPU-seconds (Σ busy × Δ × weight × share), at the device price (under
    -- hybrid at the rest of it). Under tariff: used it is the only time line, so it carries energy.
    select
        h.cluster,
        h.day,
        h.tenant,
        h.cost_center,
        'usage' as charge_type,
        h.gpu_model,
        h.mig_profile,
        h.busy_device_seconds as device_seconds,
        h.busy_gpu_seconds as gpu_seconds,
        case when getvariable('tariff') = 'used' then h.busy_gpu_seconds else 0 end::decimal(38, 12)
            as busy_gpu_seconds,
        case when getvariable('tariff') = 'used' and not t.energy_priced then h.energy_joules else 0 end
            ::decimal(38, 12) as energy_joules,
        (h.used_units * t.usage_millionths + 500000) // 1000000 as amount_units
    from holdings as h, tariff as t
    where getvariable('tariff') in ('used', 'hybrid')
    union all
    -- R10, R14: energy lines, kWh × energy_price_per_kwh, when an energy price is configured.
    select
        h.cluster,
        h.day,
        h.tenant,
        h.cost_center,
        'energy' as charge_type,
        h.gpu_model,
        h.mig_profile,
        0::decimal(38, 12) as device_seconds,
        0::decimal(38, 12) as gpu_seconds,
        0::decimal(38, 12) as busy_gpu_seconds,
        h.energy_joules,
        h.energy_units as amount_units
    from holdings as h, tariff as t
    where t.energy_priced
),
pool as (
    select
        cluster,
        day,
        gpu_model,
        sum(observed_gpu_seconds) as observed_gpu_seconds,
        sum(capacity_units) as capacity_units,
        sum(energy_joules) as energy_joules,
        sum(energy_units) as energy_units
    from mart_pool_daily_cost
    group by all
),
held as (
    select
        gpu_model,
        sum(gpu_seconds) as gpu_seconds,
        sum(energy_joules) as energy_joules
    from holdings
    group by gpu_model
),
charged as (
    select
        gpu_model,
        coalesce(sum(amount_units) filter (where charge_type <> 'energy'), 0) as time_units,
        coalesce(sum(amount_units) filter (where charge_type = 'energy'), 0) as energy_units
    from holder_lines
    group by gpu_model
),
idle as (
    -- R9/R13: what holders did not pay of the pool cost, per GPU model: its idle GPU time (under `used`
    -- also the idle part of held time), and the energy no holder paid (unheld GPUs, unpartitioned MIG).
    select
        p.cluster,
        p.day,
        p.gpu_model,
        p.observed_gpu_seconds - coalesce(h.gpu_seconds, 0) as gpu_seconds,
        p.capacity_units - coalesce(c.time_units, 0) as time_units,
        p.energy_joules - coalesce(h.energy_joules, 0) as energy_joules,
        p.energy_units - coalesce(c.energy_units, 0) as energy_units,
        p.capacity_units - coalesce(c.time_units, 0) + p.energy_units - coalesce(c.energy_units, 0) as amount_units
    from pool as p
    left join held as h on h.gpu_model = p.gpu_model
    left join charged as c on c.gpu_model = p.gpu_model
),
-- idle_policy: proportional spreads each model's idle (time and energy) over its holders by their charge
-- under the tariff (reserved + usage lines). The last holder in name order takes the remainder, so that the
-- parts sum to the whole exactly (R13).
holder_weights as (
    select
        tenant,
        any_value(cost_center) as cost_center,
        gpu_model,
        sum(amount_units) as amount_units,
        sum(sum(amount_units)) over (partition by gpu_model) as model_units,
        row_number() over (partition by gpu_model order by tenant desc) = 1 as takes_remainder
    from holder_lines
    where charge_type <> 'energy'
    group by tenant, gpu_model
),
idle_parts as (
    select
        i.cluster,
        i.day,
        w.tenant,
        w.cost_center,
        i.gpu_model,
        w.takes_remainder,
        -- idle × r / R without overflowing 128 bits: whole multiples of R exactly, the rest in double
        -- precision (within about 1e-13 of the currency); the last part takes what is left.
        (i.amount_units // w.model_units) * w.amount_units
            + round((i.amount_units % w.model_units)::double * w.amount_units::double / w.model_units::double)::hugeint
            as amount_units,
        cast(i.gpu_seconds * (w.amount_units / w.model_units) as decimal(38, 12)) as gpu_seconds
    from idle as i
    join holder_weights as w on w.gpu_model = i.gpu_model
    where getvariable('idle_policy') = 'proportional' and w.model_units > 0
),
idle_shares as (
    select
        p.cluster,
        p.day,
        p.tenant,
        p.cost_center,
        'idle_share' as charge_type,
        p.gpu_model,
        null::varchar as mig_profile,
        cast(0 as decimal(38, 12)) as device_seconds,
        case when p.takes_remainder
            then i.gpu_seconds - coalesce(sum(p.gpu_seconds) filter (where not p.takes_remainder)
                over (partition by p.gpu_model), 0)
            else p.gpu_seconds end as gpu_seconds,
        cast(0 as decimal(38, 12)) as busy_gpu_seconds,
        cast(0 as decimal(38, 12)) as energy_joules,
        case when p.takes_remainder
            then i.amount_units - coalesce(sum(p.amount_units) filter (where not p.takes_remainder)
                over (partition by p.gpu_model), 0)
            else p.amount_units end as amount_units,
        p.takes_remainder
    from idle_parts as p
    join idle as i on i.gpu_model = p.gpu_model
),
idle_unspread as (
    -- What no policy spread: all of it under platform, a model nobody was charged for under proportional.
    select i.*
    from idle as i
    where getvariable('idle_policy') = 'platform'
       or not exists (select 1 from idle_shares as s where s.gpu_model = i.gpu_model)
),
idle_left as (
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
        case when (select energy_priced from tariff) then 0 else energy_joules end::decimal(38, 12)
            as energy_joules,
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
    where (select energy_priced from tariff)
),
lines as (
    -- `balances`: the one line per GPU model whose decimal `amount` is what the pool's decimals leave (see below).
    select *, false as balances from holder_lines
    union all
    select * exclude (takes_remainder), takes_remainder as balances from idle_shares
    union all
    select *, charge_type = 'idle' as balances from idle_left
),
shown as (
    select l.*, units_to_money(l.amount_units, m.units_per_currency) as rounded, m.units_per_currency
    from lines as l
    cross join int_money_scale as m
),
pool_shown as (
    select gpu_model, sum(pool_cost) as pool_cost from mart_pool_daily_cost group by gpu_model
)
-- `amount` is each line's units as a decimal of 12 places, except the model's idle line (or the idle share
-- that takes the remainder), which is what the pool's decimals leave: so the decimals add up to the pool
-- cost's exactly too, and differ from the units' exact value by less than a unit of the 12th place per line.
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
