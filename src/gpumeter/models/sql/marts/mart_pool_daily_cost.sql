-- One row per node × GPU model (× modelName) of the day: the pool cost, every observed GPU-second at its GPU's
-- price (R4, R9) plus every observed GPU's energy at the energy price (R10, R14), in integer units of money
-- (R12) and as decimals.
with sums as (
    -- Per node and GPU model key: the names are joined to these sums, not to each GPU sample.
    select
        g.node_key,
        g.model_key,
        count(*) as gpu_samples,
        sample_seconds(count(*)) as observed_gpu_seconds,
        -- A whole GPU per sample: weight 1 (all 56ths) and every share of it (share_lcm). Integer units: the
        -- prices summed, then multiplied once, are the sum of each sample's units exactly.
        time_money_units(sum(g.gpu_price_units), getvariable('weight_scale'), any_value(m.share_lcm))
            as capacity_units,
        sum(cast(g.energy_joules as decimal(38, 12))) as energy_joules,
        -- Every observed GPU's energy at energy_price_per_kwh (0 without one) is pool cost too, so what no
        -- holder pays of it lands on __idle__ and R13 stays exact (docs/tariffs.md).
        energy_money_units(sum(g.energy_mj), getvariable('weight_scale'), any_value(m.share_lcm)) as energy_units,
        any_value(m.units_per_currency) as units_per_currency
    from int_gpu_samples as g
    cross join int_money_scale as m
    group by all
),
costs as (
    select
        getvariable('cluster') as cluster,
        metered_day() as day,
        n.node,
        c.gpu_model,
        c.model_name,
        s.* exclude (node_key, model_key)
    from sums as s
    join int_keyed_device_classes as c on c.model_key = s.model_key and c.profile_key is null
    left join stg_dcgm_nodes as n on n.node_key = s.node_key
)
select
    * exclude (capacity_units, energy_units, units_per_currency),
    units_to_money(capacity_units, units_per_currency) as capacity_cost,
    units_to_money(energy_units, units_per_currency) as energy_cost,
    units_to_money(capacity_units, units_per_currency) + units_to_money(energy_units, units_per_currency)
        as pool_cost,
    capacity_units,
    energy_units,
    capacity_units + energy_units as pool_units,
    units_per_currency
from costs
