-- Grain: day × device × holder. What each holder held, used and was charged (R1, R6, R9, R10).
-- Every per-sample quantity is cast to DECIMAL before it is summed, so sums are exact and do not depend
-- on row order or chunking (R1).
select
    d.cluster,
    getvariable('day')::date as day,
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
    sum(cast(getvariable('scrape_s') * h.share as decimal(38, 12))) as device_seconds,
    sum(cast(getvariable('scrape_s') * h.share * d.weight as decimal(38, 12))) as gpu_seconds,
    sum(cast(getvariable('scrape_s') * h.share * d.weight * coalesce(d.busy, 0) as decimal(38, 12)))
        as busy_gpu_seconds,
    sum(cast(getvariable('scrape_s') / 3600.0 * d.device_price_per_hour * h.share as decimal(38, 12)))
        as reserved_cost,
    -- R10 tariff: used: busy device-seconds and the busy part of the reserved charge (docs/tariffs.md).
    sum(cast(getvariable('scrape_s') * h.share * coalesce(d.busy, 0) as decimal(38, 12))) as busy_device_seconds,
    sum(cast(getvariable('scrape_s') / 3600.0 * d.device_price_per_hour * h.share * coalesce(d.busy, 0)
        as decimal(38, 12))) as used_cost,
    sum(cast(d.energy_joules * h.share as decimal(38, 12))) as energy_joules,
    -- R10/R14 energy: kWh × energy_price_per_kwh, per sample; 0 when no energy price is configured.
    sum(cast(d.energy_joules * h.share / 3600000.0 * coalesce(getvariable('energy_price_per_kwh'), 0)
        as decimal(38, 12))) as energy_cost,
    sum(cast(getvariable('scrape_s') * h.share * coalesce(d.fb_used_mib, 0) as decimal(38, 12)))
        as fb_used_mib_seconds,
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
group by all
