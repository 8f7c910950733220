-- One row per GPU model: what holders did not pay of the pool cost (R9, R13), its idle GPU time and the energy
-- no holder paid, in integer units of the day's money (R12).
with pool as (
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
    select gpu_model, sum(gpu_seconds) as gpu_seconds, sum(energy_joules) as energy_joules
    from mart_device_seconds
    group by gpu_model
),
charged as (
    select
        gpu_model,
        coalesce(sum(amount_units) filter (where charge_type <> 'energy'), 0) as time_units,
        coalesce(sum(amount_units) filter (where charge_type = 'energy'), 0) as energy_units
    from int_tenant_tariff_lines
    group by gpu_model
)
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
