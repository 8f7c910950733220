-- One row per observed GPU sample of the day (R4): the GPU's mode at that sample (R3), its health, price (R8),
-- energy (R10) and own frame-buffer reading.
with gpu_readings as (
    select
        d.cluster,
        s.ts_ms,
        s.in_day,
        min(d.node) as node,
        d.uuid,
        min(d.model_name) as model_name,
        coalesce(max(s.xid_error), 0) <> 0 as unhealthy,
        -- Energy is a GPU-level counter: vgpu copies repeat it, MIG instances may lack it.
        max(s.energy_mj) filter (where d.gpu_i_id is null) as energy_mj
    from stg_dcgm_samples as s
    join stg_dcgm_series as d on d.series_key = s.series_key
    group by d.cluster, s.ts_ms, s.in_day, d.uuid
),
mig_readings as (
    -- Only a GPU that ever shows a MIG instance can change mode (the others are whole at every sample), and
    -- only its instances can need its frame buffer: what decides the mode is read for those GPUs alone.
    select
        d.uuid,
        s.ts_ms,
        bool_or(d.gpu_i_id is not null) as shows_instances,
        bool_or(d.gpu_i_id is null and (s.gpu_util_pct is not null or d.pod is not null)) as shows_whole,
        max(s.fb_used_mib) filter (where d.gpu_i_id is null) as gpu_fb_used_mib
    from stg_dcgm_samples as s
    join stg_dcgm_series as d on d.series_key = s.series_key
    where d.uuid in (select uuid from stg_dcgm_series where gpu_i_id is not null)
    group by d.uuid, s.ts_ms
),
runs as (
    -- A gap of more than two scrapes (a GPU reset) ends an observed run; a run starts whole.
    select
        *,
        sum(case when ts_ms - prev_ts_ms <= 2 * getvariable('scrape_s') * 1000 then 0 else 1 end)
            over (partition by uuid order by ts_ms) as observed_run
    from (select *, lag(ts_ms) over (partition by uuid order by ts_ms) as prev_ts_ms from mig_readings)
),
modes as (
    -- MIG when a series of the GPU carries a GPU instance id, whole when its GPU-level series shows what only a
    -- whole GPU shows (GPU_UTIL, a pod); otherwise the mode its last such sample showed in the run.
    select
        uuid,
        ts_ms,
        gpu_fb_used_mib,
        coalesce(
            last_value(
                case when shows_instances then true when shows_whole then false end ignore nulls
            ) over (partition by uuid, observed_run order by ts_ms rows between unbounded preceding and current row),
            false
        ) as is_mig
    from runs
),
gpu_samples as (
    select g.*, coalesce(m.is_mig, false) as is_mig, m.gpu_fb_used_mib
    from gpu_readings as g
    left join modes as m on m.uuid = g.uuid and m.ts_ms = g.ts_ms
),
energy_deltas as (
    select
        *,
        energy_mj - lag(energy_mj ignore nulls) over (partition by uuid order by ts_ms) as energy_step_mj
    from gpu_samples
),
priced as (
    -- R8: the rate card's price of the GPU model, or under price_source: opencost the node's latest
    -- node_gpu_hourly_cost sample (at most kube_lookback_seconds old): a price per sample, so a price
    -- change during the day is time-weighted. A null price stops the run (assert_gpu_samples_are_priced).
    select
        e.*,
        coalesce(c.gpu_price_per_hour, p.gpu_price_per_hour) as gpu_price_per_hour,
        -- The same price in 1e-8 of the currency (R12: exact money, gpumeter.models.money.price_units).
        coalesce(c.gpu_price_units, round(p.gpu_price_per_hour * 100000000)::bigint) as gpu_price_units
    from energy_deltas as e
    join int_device_classes as c on c.model_name = e.model_name and c.mig_profile is null
    -- Spans are disjoint per node: a sample meets at most one.
    left join int_node_gpu_price_spans as p
        on p.node = e.node and e.ts_ms >= p.from_ms and e.ts_ms < p.until_ms
)
select
    cluster,
    ts_ms,
    node,
    uuid,
    model_name,
    is_mig,
    unhealthy,
    gpu_price_per_hour,
    gpu_price_units,
    gpu_fb_used_mib,
    -- A counter that went down was reset (driver reload): the new value is what accrued since (R10).
    energy_step_mj / 1000.0 as energy_joules,
    -- Whole mJ (the counter's unit), so that energy money is exact (R12).
    round(energy_step_mj)::bigint as energy_mj
from (
    select
        * exclude (energy_step_mj),
        case
            when energy_mj is null then 0
            when energy_step_mj is null then 0
            when energy_step_mj >= 0 then energy_step_mj
            else energy_mj
        end as energy_step_mj
    from priced
)
where in_day
