-- One row per observed GPU sample (R4): a GPU is observed at a sample time when any series of it, the
-- device itself or any MIG instance, has a sample then. Carries the GPU's health and energy (R10, R11).
with gpu_modes as (
    -- A GPU is MIG-partitioned for the day when any of its series carries a GPU instance id.
    select uuid, bool_or(gpu_i_id is not null) as is_mig
    from stg_dcgm_series
    where seen_in_day
    group by uuid
),
gpu_samples as (
    select
        d.cluster,
        s.ts_ms,
        s.in_day,
        min(d.node) as node,
        d.uuid,
        min(d.model_name) as model_name,
        m.is_mig,
        coalesce(max(s.xid_error), 0) <> 0 as unhealthy,
        -- Energy is a GPU-level counter: vgpu copies repeat it, MIG instances may lack it.
        max(s.energy_mj) filter (where d.gpu_i_id is null) as energy_mj
    from stg_dcgm_samples as s
    join stg_dcgm_series as d on d.series_key = s.series_key
    join gpu_modes as m on m.uuid = d.uuid
    group by d.cluster, s.ts_ms, s.in_day, d.uuid, m.is_mig
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
    -- change during the day is time-weighted. A null price stops the run (accounting._require_prices).
    select
        e.*,
        coalesce(c.gpu_price_per_hour, p.gpu_price_per_hour) as gpu_price_per_hour
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
    -- A counter that went down was reset (driver reload): the new value is what accrued since (R10).
    case
        when energy_mj is null then 0
        when energy_step_mj is null then 0
        when energy_step_mj >= 0 then energy_step_mj / 1000.0
        else energy_mj / 1000.0
    end as energy_joules
from priced
where in_day
