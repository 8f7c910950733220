-- One row per device × holder (pod, container) × tenant of the day: what the holder held, used and was charged
-- (R1, R6, R9, R10), in exact DECIMAL seconds and in integer units of money (R12) shown as decimals. Samples are
-- summed under the integer keys of device, node, class, holder and tenant; the names are joined to the sums.
with tenants as (
    -- R7: the tenant of each holder per period of its pod's labels (periods of one pod tile all time, null =
    -- open-ended), a tenant keyed by what the mart shows of it.
    select
        h.holder_key,
        t.from_ms,
        t.until_ms,
        dense_rank() over (order by t.tenant, t.cost_center, t.tenant_rule) as tenant_key,
        t.tenant,
        t.cost_center,
        t.tenant_rule
    from int_holders as h
    join int_holder_tenants as t on t.namespace = h.namespace and t.pod = h.pod
),
devices as (
    select
        device_key, ts_ms, node_key, model_key, profile_key, weight, price_units, busy, fb_used_mib,
        energy_joules, energy_mj, holder_key
    from int_keyed_device_samples
),
held as (
    -- Each device sample with each of its holders: the one labelled pod, or the holders int_keyed_device_holders
    -- lists for it.
    select
        d.* exclude (holder_key),
        coalesce(s.holder_key, a.holder_key) as holder_key,
        coalesce(s.holder_source, 'labels') as holder_source,
        coalesce(s.share_numerator, a.alone_share_numerator) as share_numerator,
        coalesce(s.share_denominator, a.alone_share_denominator) as share_denominator
    from devices as d
    -- The holders of the samples not held by one labelled pod alone: shared (R6), KAI and DRA holders (R5).
    left join int_keyed_device_holders as s on s.device_key = d.device_key and s.ts_ms = d.ts_ms
    -- A pod that holds the sample alone (not a KAI reservation, whose group holds it).
    left join int_holders as a on a.holder_key = d.holder_key and not a.kai_reservation
    where s.device_key is not null or a.holder_key is not null
),
charged_by_share as (
    -- The samples of a row of the mart, summed a share at a time: a sample's seconds and its price, energy and
    -- their money are the same for every sample of one share (Δ, weight and the share are), so they are
    -- counted here and multiplied once below; what varies per sample (busy, frame buffer, energy in joules)
    -- is still rounded per sample (R1).
    select
        h.device_key,
        h.node_key,
        h.model_key,
        h.profile_key,
        h.weight,
        h.holder_key,
        h.holder_source,
        t.tenant_key,
        h.share_numerator,
        h.share_denominator,
        count(*) as sample_count,
        -- R9, R12: Σ price per sample, in 1e-8 of the currency.
        sum(h.price_units) as price_units,
        -- R10 tariff: used: price × the busy fraction read to 6 decimals, per sample.
        sum(h.price_units::hugeint * round(coalesce(h.busy, 0) * 1000000)::bigint) as busy_price_units,
        -- R10/R14 energy: mJ per sample.
        sum(h.energy_mj) as energy_mj,
        sum(sample_seconds(h.share, h.weight, coalesce(h.busy, 0))) as busy_gpu_seconds,
        -- R10 tariff: used: busy device-seconds and the busy part of the reserved charge (docs/tariffs.md).
        sum(sample_seconds(h.share, coalesce(h.busy, 0))) as busy_device_seconds,
        sum(cast(h.energy_joules * h.share as decimal(38, 12))) as energy_joules,
        sum(sample_seconds(h.share, coalesce(h.fb_used_mib, 0))) as fb_used_mib_seconds,
        max(h.fb_used_mib) as peak_fb_used_mib,
        max(h.busy) as peak_busy
    from (select *, share_numerator / share_denominator as share from held) as h
    -- R7: the tenant of the pod's labels at the sample.
    join tenants as t
        on t.holder_key = h.holder_key
        and (t.from_ms is null or h.ts_ms >= t.from_ms)
        and (t.until_ms is null or h.ts_ms < t.until_ms)
    group by
        h.device_key, h.node_key, h.model_key, h.profile_key, h.weight, h.holder_key, h.holder_source, t.tenant_key,
        h.share_numerator, h.share_denominator
),
charged as (
    select
        r.device_key,
        r.node_key,
        r.model_key,
        r.profile_key,
        r.weight,
        r.holder_key,
        r.holder_source,
        r.tenant_key,
        sum(r.sample_count)::bigint as sample_count,
        -- R1: a sample's seconds times the samples of its share: the sum of as many equal DECIMALs, exactly.
        sum(r.sample_count * sample_seconds(r.share_numerator / r.share_denominator)) as device_seconds,
        sum(r.sample_count * sample_seconds(r.share_numerator / r.share_denominator, r.weight)) as gpu_seconds,
        -- What varies per sample, rounded per sample above: summed as it is.
        sum(r.busy_gpu_seconds) as busy_gpu_seconds,
        sum(r.busy_device_seconds) as busy_device_seconds,
        sum(r.energy_joules) as energy_joules,
        sum(r.fb_used_mib_seconds) as fb_used_mib_seconds,
        max(r.peak_fb_used_mib) as peak_fb_used_mib,
        -- R9, R12: Σ price × share, in 1e-8 of the currency × 1/share_lcm; Δ and the device's weight are the
        -- same for every sample of the row and multiply it below.
        sum(r.price_units * share_units(r.share_numerator, r.share_denominator, m.share_lcm)) as price_share_units,
        sum(r.busy_price_units * share_units(r.share_numerator, r.share_denominator, m.share_lcm))
            as busy_price_share_units,
        sum(r.energy_mj::hugeint * share_units(r.share_numerator, r.share_denominator, m.share_lcm))
            as energy_share_units,
        any_value(m.units_per_currency) as units_per_currency,
        max(r.peak_busy) as peak_busy
    from charged_by_share as r
    cross join int_money_scale as m
    group by r.device_key, r.node_key, r.model_key, r.profile_key, r.weight, r.holder_key, r.holder_source, r.tenant_key
),
units as (
    -- In units of money: ms × 1,000 × 1e-8 × 56ths (the device's price weight: a MIG profile's own price is a
    -- whole device's) × 1/share_lcm. For the used charge ms × 1,000 / 10^6 (busy in millionths) is Δ in
    -- seconds, a whole number: exact too. Energy: mJ × the price per kWh × the weight in 56ths.
    select
        r.*,
        c.model_name,
        c.gpu_model,
        c.mig_profile,
        time_money_units(
            r.price_share_units,
            case when c.device_price_units is not null then getvariable('weight_scale') else c.weight_units end
        ) as reserved_units,
        getvariable('scrape_s')::bigint
            * case when c.device_price_units is not null then getvariable('weight_scale') else c.weight_units end
            * r.busy_price_share_units as used_units,
        energy_money_units(r.energy_share_units, c.weight_units) as energy_units
    from charged as r
    join int_keyed_device_classes as c on c.model_key = r.model_key and c.profile_key is not distinct from r.profile_key
)
select
    v.cluster,
    metered_day() as day,
    n.node,
    v.uuid,
    v.gpu_i_id,
    v.device_id,
    u.model_name,
    u.gpu_model,
    u.mig_profile,
    u.weight,
    h.namespace,
    h.pod,
    h.container,
    u.holder_source,
    t.tenant,
    t.cost_center,
    t.tenant_rule,
    u.sample_count,
    u.device_seconds,
    u.gpu_seconds,
    u.busy_gpu_seconds,
    u.busy_device_seconds,
    u.energy_joules,
    u.fb_used_mib_seconds,
    u.peak_fb_used_mib,
    u.peak_busy,
    units_to_money(u.reserved_units, u.units_per_currency) as reserved_cost,
    units_to_money(u.used_units, u.units_per_currency) as used_cost,
    units_to_money(u.energy_units, u.units_per_currency) as energy_cost,
    u.reserved_units,
    u.used_units,
    u.energy_units,
    u.units_per_currency
from units as u
join stg_dcgm_devices as v on v.device_key = u.device_key
left join stg_dcgm_nodes as n on n.node_key = u.node_key
join int_holders as h on h.holder_key = u.holder_key
join (select distinct tenant_key, tenant, cost_center, tenant_rule from tenants) as t on t.tenant_key = u.tenant_key
