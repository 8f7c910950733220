-- One row per observed GPU sample of the day (R4): the GPU's mode at that sample (R3), its health, price (R8),
-- energy (R10) and own frame-buffer reading; and, where it is not MIG-partitioned, the GPU as the device it
-- then is (R1, R5, R10, R11). By integer keys only (GPU, node, model, device: stg_dcgm_series): the readers
-- that show names join them to what they have summed, not to each of the day's GPU samples.
with gpu_readings as (
    -- A scrape of a series with nothing but an XID (or power) reading is not a sample of it (R4,
    -- stg_dcgm_samples.observed): it tells the GPU's health only, where another series observes the GPU then;
    -- the node, model and holders are those of the series observed.
    select
        d.gpu_key,
        s.ts_ms,
        -- A property of the GPU (stg_dcgm_series): grouped by, so that it costs no aggregate state.
        d.gpu_shows_instances,
        min(case when s.observed then d.node_key end) as node_key,
        min(case when s.observed then d.model_key end) as model_key,
        -- Four yes/no questions about the sample's series in one aggregate (each aggregate is a state per
        -- GPU sample, tens of millions at fleet scale): 1, a series read an XID error (any value but 0); 8, a
        -- series is observed (else this is no sample of the GPU); and what decides the mode (read for GPUs
        -- that ever show a MIG instance only, below): 2, an observed series of a MIG instance; 4, an observed
        -- GPU-level series showing what only a whole GPU shows (GPU_UTIL, a pod).
        bit_or(
            (coalesce(s.xid_error, 0) <> 0)::utinyint
            | ((s.observed and d.gpu_i_id is not null)::utinyint << 1)
            | ((s.observed and d.gpu_i_id is null and (s.gpu_util_pct is not null or d.pod is not null))::utinyint << 2)
            | (s.observed::utinyint << 3)
            | ((s.observed and d.holder_unverified)::utinyint << 4)
        ) as flags,
        -- Energy is a GPU-level counter: vgpu copies repeat it, MIG instances may lack it, and in dcgm-exporter's
        -- flex mode only the instances carry it (each the GPU's reading).
        coalesce(
            max(s.energy_mj) filter (where d.gpu_i_id is null), max(s.energy_mj) filter (where d.gpu_i_id is not null)
        ) as energy_mj,
        max(s.fb_used_mib) filter (where d.gpu_i_id is null) as gpu_fb_used_mib,
        -- The GPU as a device: at a sample where it is not MIG-partitioned every series of it is its own, so
        -- these are its device sample's (vgpu copies collapse: the largest value, R6), and its holders are
        -- the pods its series name (R5): the one, where there is one.
        max(s.gr_engine_active) as gr_engine_active,
        max(s.gpu_util_pct) as gpu_util_pct,
        min(case when s.observed then d.holder_key end) as first_holder,
        max(case when s.observed then d.holder_key end) as last_holder
    from stg_dcgm_samples as s
    join stg_dcgm_series as d on d.series_key = s.series_key
    group by d.gpu_key, s.ts_ms, d.gpu_shows_instances
),
stepped as (
    select
        * exclude (flags),
        flags & 1 <> 0 as unhealthy,
        flags & 2 <> 0 as shows_instances,
        flags & 4 <> 0 as shows_whole,
        flags & 16 <> 0 as holder_unverified,
        energy_mj - lag(energy_mj ignore nulls) over by_time as energy_step_mj,
        lag(ts_ms) over by_time as prev_ts_ms
    from gpu_readings
    where flags & 8 <> 0
    window by_time as (partition by gpu_key order by ts_ms)
),
runs as (
    -- Only a GPU that ever shows a MIG instance can change mode (the others are whole at every sample), and
    -- only its instances can need its frame buffer. A gap of more than two scrapes (a GPU reset) ends an
    -- observed run; a run starts whole.
    select
        *,
        sum(case when ts_ms - prev_ts_ms <= 2 * getvariable('scrape_s') * 1000 then 0 else 1 end)
            over (partition by gpu_key order by ts_ms) as observed_run
    from stepped
    where gpu_shows_instances
),
gpu_samples as (
    select
        * exclude (gpu_fb_used_mib),
        gpu_fb_used_mib as device_fb_mib,
        null::double as gpu_fb_used_mib,
        false as is_mig
    from stepped
    where not gpu_shows_instances and within_day(ts_ms)
    union all by name
    -- MIG when a series of the GPU carries a GPU instance id, whole when its GPU-level series shows what only a
    -- whole GPU shows (GPU_UTIL, a pod); otherwise the mode its last such sample showed in the run.
    select * from (
        select
            * exclude (observed_run),
            gpu_fb_used_mib as device_fb_mib,
            coalesce(
                last_value(
                    case when shows_instances then true when shows_whole then false end ignore nulls
                ) over (
                    partition by gpu_key, observed_run order by ts_ms rows between unbounded preceding and current row
                ),
                false
            ) as is_mig
        from runs
    )
    where within_day(ts_ms)
),
priced as (
    -- R8: the rate card's price of the GPU model, or under price_source: opencost the node's latest
    -- node_gpu_hourly_cost sample (at most kube_lookback_seconds old): a price per sample, so a price
    -- change during the day is time-weighted. A null price stops the run (assert_gpu_samples_are_priced).
    select
        e.*,
        c.weight,
        c.device_price_units,
        coalesce(c.gpu_price_per_hour, p.gpu_price_per_hour) as gpu_price_per_hour,
        -- The same price in 1e-8 of the currency (R12: exact money, gpumeter.models.money.price_units).
        coalesce(c.gpu_price_units, round(p.gpu_price_per_hour * 100000000)::bigint) as gpu_price_units,
        u.node_key is not null as unschedulable
    from gpu_samples as e
    join int_keyed_device_classes as c on c.model_key = e.model_key and c.profile_key is null
    -- Spans are disjoint per node: a sample meets at most one.
    left join (
        select k.node_key, p.from_ms, p.until_ms, p.gpu_price_per_hour
        from int_node_gpu_price_spans as p
        join stg_dcgm_nodes as k on k.node = p.node
    ) as p on p.node_key = e.node_key and e.ts_ms >= p.from_ms and e.ts_ms < p.until_ms
    -- R11: the node cannot take another GPU pod at the sample (spans disjoint per node).
    left join (
        select k.node_key, u.from_ms, u.until_ms
        from int_node_unschedulable_spans as u
        join stg_dcgm_nodes as k on k.node = u.node
    ) as u on u.node_key = e.node_key and e.ts_ms >= u.from_ms and e.ts_ms < u.until_ms
)
select
    p.gpu_key,
    p.ts_ms,
    p.node_key,
    p.model_key,
    p.is_mig,
    p.unhealthy,
    p.gpu_price_per_hour,
    p.gpu_price_units,
    p.gpu_fb_used_mib,
    -- A counter that went down was reset (driver reload): the new value is what accrued since (R10).
    p.energy_step_mj / 1000.0 as energy_joules,
    -- Whole mJ (the counter's unit), so that energy money is exact (R12).
    round(p.energy_step_mj)::bigint as energy_mj,
    -- The GPU as a whole device (R3), for the samples where it is not MIG-partitioned.
    w.device_key,
    p.weight,
    -- R8: a whole GPU's device price is the GPU's (its class's own, where the rate card gives one).
    coalesce(p.device_price_units, p.gpu_price_units) as price_units,
    -- R10: GR_ENGINE_ACTIVE where present, else GPU_UTIL / 100; clamped to [0, 1].
    least(greatest(coalesce(p.gr_engine_active, p.gpu_util_pct / 100.0), 0.0), 1.0) as busy,
    p.device_fb_mib as fb_used_mib,
    p.unschedulable,
    p.first_holder is not null as labelled,
    -- The only pod its series name at the sample; null where none or several do (int_keyed_device_holders).
    case when p.first_holder = p.last_holder then p.first_holder end as holder_key,
    -- Its previous sample lies within Δ/2 (what the Prometheus pull takes for one scrape seen twice, R1): a
    -- scrape delivered twice at an offset, or Δ larger than the scrape interval. Billed as it came, and
    -- reported (mart_data_quality.repeated_scrape_samples).
    coalesce(p.ts_ms - p.prev_ts_ms <= getvariable('scrape_s') * 500, false) as repeats_scrape,
    -- R5: an observed series of it carried pod labels that could not be told from its scrape target's own.
    p.holder_unverified
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
) as p
left join (select gpu_key, device_key from stg_dcgm_series where gpu_i_id is null group by all) as w
    on w.gpu_key = p.gpu_key
