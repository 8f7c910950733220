-- Grain: day × node × GPU model. Pool cost: every observed GPU-second at its GPU's price (R4, R9), plus
-- every observed GPU's energy at the energy price when one is configured (R10, R14).
with costs as (
    select
        g.cluster,
        getvariable('day')::date as day,
        g.node,
        c.gpu_model,
        g.model_name,
        count(*) as gpu_samples,
        cast(count(*) * getvariable('scrape_s') as decimal(38, 12)) as observed_gpu_seconds,
        sum(cast(getvariable('scrape_s') / 3600.0 * g.gpu_price_per_hour as decimal(38, 12))) as capacity_cost,
        sum(cast(g.energy_joules as decimal(38, 12))) as energy_joules,
        -- Every observed GPU's energy at energy_price_per_kwh (0 without one) is pool cost too, so what no
        -- holder pays of it lands on __idle__ and R13 stays exact (docs/tariffs.md).
        sum(cast(g.energy_joules / 3600000.0 * coalesce(getvariable('energy_price_per_kwh'), 0)
            as decimal(38, 12))) as energy_cost
    from int_gpu_samples as g
    join int_device_classes as c on c.model_name = g.model_name and c.mig_profile is null
    group by all
)
select *, capacity_cost + energy_cost as pool_cost
from costs
