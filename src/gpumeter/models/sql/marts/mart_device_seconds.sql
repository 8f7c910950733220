-- One row per device × holder (pod, container) × tenant of the day: what the holder held, used and was charged
-- (R1, R6, R9, R10), in exact DECIMAL seconds and in integer units of money (R12) shown as decimals.
with charged as (
select
    d.cluster,
    metered_day() as day,
    d.node,
    d.uuid,
    d.gpu_i_id,
    d.device_id,
    d.model_name,
    d.gpu_model,
    d.mig_profile,
    d.weight,
    h.namespace,
    h.pod,
    h.container,
    h.holder_source,
    t.tenant,
    t.cost_center,
    t.tenant_rule,
    count(*) as sample_count,
    sum(sample_seconds(h.share)) as device_seconds,
    sum(sample_seconds(h.share, d.weight)) as gpu_seconds,
    sum(sample_seconds(h.share, d.weight, coalesce(d.busy, 0))) as busy_gpu_seconds,
    -- R9, R12: Σ price × share per sample, in 1e-8 of the currency × 1/share_lcm; Δ and the device's weight
    -- are the same for every sample of the row and multiply it below.
    sum(d.price_units::hugeint * share_units(h.share_numerator, h.share_denominator, m.share_lcm))
        as price_share_units,
    -- R10 tariff: used: the same × the busy fraction read to 6 decimals.
    sum(
        d.price_units::hugeint * share_units(h.share_numerator, h.share_denominator, m.share_lcm)
        * round(coalesce(d.busy, 0) * 1000000)::bigint
    ) as busy_price_share_units,
    -- R10/R14 energy: mJ × share per sample.
    sum(d.energy_mj::hugeint * share_units(h.share_numerator, h.share_denominator, m.share_lcm))
        as energy_share_units,
    any_value(m.units_per_currency) as units_per_currency,
    -- R10 tariff: used: busy device-seconds and the busy part of the reserved charge (docs/tariffs.md).
    sum(sample_seconds(h.share, coalesce(d.busy, 0))) as busy_device_seconds,
    sum(cast(d.energy_joules * h.share as decimal(38, 12))) as energy_joules,
    sum(sample_seconds(h.share, coalesce(d.fb_used_mib, 0))) as fb_used_mib_seconds,
    max(d.fb_used_mib) as peak_fb_used_mib,
    max(d.busy) as peak_busy
from int_device_holders as h
join int_device_samples as d on d.device_id = h.device_id and d.ts_ms = h.ts_ms
-- R7: the tenant of the pod's labels at the sample (periods of one pod tile all time, null = open-ended).
join int_holder_tenants as t
    on t.namespace = h.namespace
    and t.pod = h.pod
    and (t.from_ms is null or h.ts_ms >= t.from_ms)
    and (t.until_ms is null or h.ts_ms < t.until_ms)
cross join int_money_scale as m
group by all
),
units as (
    -- In units of money: ms × 1,000 × 1e-8 × 56ths (the device's price weight: a MIG profile's own price is a
    -- whole device's) × 1/share_lcm. For the used charge ms × 1,000 / 10^6 (busy in millionths) is Δ in
    -- seconds, a whole number: exact too. Energy: mJ × the price per kWh × the weight in 56ths.
    select
        r.* exclude (price_share_units, busy_price_share_units, energy_share_units),
        time_money_units(r.price_share_units, w.price_weight_units) as reserved_units,
        getvariable('scrape_s')::bigint * w.price_weight_units * r.busy_price_share_units as used_units,
        energy_money_units(r.energy_share_units, w.weight_units) as energy_units
    from charged as r
    join (
        select
            model_name,
            mig_profile,
            weight_units,
            case when device_price_units is not null then getvariable('weight_scale') else weight_units end
                as price_weight_units
        from int_device_classes
    ) as w on w.model_name = r.model_name and w.mig_profile is not distinct from r.mig_profile
)
select
    * exclude (reserved_units, used_units, energy_units, units_per_currency),
    units_to_money(reserved_units, units_per_currency) as reserved_cost,
    units_to_money(used_units, units_per_currency) as used_cost,
    units_to_money(energy_units, units_per_currency) as energy_cost,
    reserved_units,
    used_units,
    energy_units,
    units_per_currency
from units
