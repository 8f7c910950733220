-- One row per tenant × GPU model under idle_policy: proportional (none under platform): its share of the GPU
-- model's idle (int_pool_idle), in proportion to its charge under the tariff; the last holder in name order
-- takes the remainder (`takes_remainder`), so that the shares sum to the idle exactly (R13).
with holder_weights as (
    select
        tenant,
        any_value(cost_center) as cost_center,
        gpu_model,
        sum(amount_units) as amount_units,
        sum(sum(amount_units)) over (partition by gpu_model) as model_units,
        row_number() over (partition by gpu_model order by tenant desc) = 1 as takes_remainder
    from int_tenant_tariff_lines
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
    from int_pool_idle as i
    join holder_weights as w on w.gpu_model = i.gpu_model
    where getvariable('idle_policy') = 'proportional' and w.model_units > 0
)
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
join int_pool_idle as i on i.gpu_model = p.gpu_model
