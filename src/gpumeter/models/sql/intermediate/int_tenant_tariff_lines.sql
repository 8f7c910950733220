-- One row per tenant × charge type (reserved, usage, energy) × GPU model × MIG profile: what holders pay under
-- the tariff (R9, R10, R14), in integer units of the day's money (R12).
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
        1000000 - getvariable('reserved_millionths')::hugeint as usage_millionths
)
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
    case when energy_priced() then 0 else h.energy_joules end::decimal(38, 12) as energy_joules,
    tariff_fraction_units(h.reserved_units, t.reserved_millionths) as amount_units
from holdings as h, tariff as t
where getvariable('tariff') in ('reserved', 'hybrid')
union all
-- R10: the usage line bills busy GPU-seconds (Σ busy × Δ × weight × share), at the device price (under hybrid
-- at the rest of it). Under tariff: used it is the only time line, so it carries energy.
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
    case when getvariable('tariff') = 'used' and not energy_priced() then h.energy_joules else 0 end
        ::decimal(38, 12) as energy_joules,
    tariff_fraction_units(h.used_units, t.usage_millionths) as amount_units
from holdings as h, tariff as t
where getvariable('tariff') in ('used', 'hybrid')
union all
-- R10, R14: energy lines, kWh × energy_price_per_kwh, when an energy price is configured.
select
    cluster,
    day,
    tenant,
    cost_center,
    'energy' as charge_type,
    gpu_model,
    mig_profile,
    0::decimal(38, 12) as device_seconds,
    0::decimal(38, 12) as gpu_seconds,
    0::decimal(38, 12) as busy_gpu_seconds,
    energy_joules,
    energy_units as amount_units
from holdings
where energy_priced()
