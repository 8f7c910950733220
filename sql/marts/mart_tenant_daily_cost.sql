-- Grain: day × tenant × charge type × GPU model × MIG profile. What tenants and __unallocated__ pay under
-- the tariff (R9 `reserved`, R10 `usage`, both under hybrid), their `energy` (R10, R14), and what is left of
-- the pool cost as __idle__ (R9), or spread as idle_share lines under idle_policy: proportional.
-- Σ amount = pool cost, exactly (R13). docs/tariffs.md explains each line.
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
        sum(reserved_cost) as reserved_cost,
        sum(used_cost) as used_cost,
        sum(energy_cost) as energy_cost
    from mart_device_seconds
    group by cluster, day, tenant, gpu_model, mig_profile
),
tariff as (
    -- reserved: fraction 1; used: 0; hybrid: its reserved_fraction. Exact decimals, so that the two parts
    -- of a hybrid charge are exact too.
    select
        getvariable('reserved_fraction')::decimal(10, 9) as reserved_fraction,
        1 - getvariable('reserved_fraction')::decimal(10, 9) as usage_fraction,
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
        cast(h.reserved_cost * t.reserved_fraction as decimal(38, 12)) as amount
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
        cast(h.used_cost * t.usage_fraction as decimal(38, 12)) as amount
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
        h.energy_cost as amount
    from holdings as h, tariff as t
    where t.energy_priced
),
pool as (
    select
        cluster,
        day,
        gpu_model,
        sum(observed_gpu_seconds) as observed_gpu_seconds,
        sum(capacity_cost) as capacity_cost,
        sum(energy_joules) as energy_joules,
        sum(energy_cost) as energy_cost
    from mart_pool_daily_cost
    group by all
),
held as (
    select
        gpu_model,
        sum(gpu_seconds) as gpu_seconds,
        sum(energy_joules) as energy_joules,
        sum(reserved_cost) as reserved_cost
    from holdings
    group by gpu_model
),
charged as (
    select
        gpu_model,
        coalesce(sum(amount) filter (where charge_type <> 'energy'), 0) as time_amount,
        coalesce(sum(amount) filter (where charge_type = 'energy'), 0) as energy_amount
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
        p.capacity_cost - coalesce(c.time_amount, 0) as time_amount,
        p.energy_joules - coalesce(h.energy_joules, 0) as energy_joules,
        p.energy_cost - coalesce(c.energy_amount, 0) as energy_amount,
        p.capacity_cost - coalesce(c.time_amount, 0) + p.energy_cost - coalesce(c.energy_amount, 0) as amount
    from pool as p
    left join held as h on h.gpu_model = p.gpu_model
    left join charged as c on c.gpu_model = p.gpu_model
),
-- idle_policy: proportional spreads each model's idle (time and energy) over its holders by their charge
-- under the tariff (reserved + usage lines). The last holder in name order takes the remainder, so that
-- the parts sum to the whole exactly (R13).
holder_weights as (
    select
        tenant,
        any_value(cost_center) as cost_center,
        gpu_model,
        sum(amount) as amount,
        sum(sum(amount)) over (partition by gpu_model) as model_amount,
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
        cast(i.amount * (w.amount / w.model_amount) as decimal(38, 12)) as amount,
        cast(i.gpu_seconds * (w.amount / w.model_amount) as decimal(38, 12)) as gpu_seconds
    from idle as i
    join holder_weights as w on w.gpu_model = i.gpu_model
    where getvariable('idle_policy') = 'proportional' and w.model_amount > 0
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
            then i.amount - coalesce(sum(p.amount) filter (where not p.takes_remainder)
                over (partition by p.gpu_model), 0)
            else p.amount end as amount
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
        time_amount as amount
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
        energy_amount as amount
    from idle_unspread
    where (select energy_priced from tariff)
)
select * from holder_lines
union all
select * from idle_shares
union all
select * from idle_left
