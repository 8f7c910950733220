-- Grain: day × tenant × charge type × GPU model × MIG profile. Reserved charges of tenants and
-- __unallocated__, and what is left of the pool cost as __idle__ (R9), or spread as idle_share lines
-- under idle_policy: proportional. Σ amount = pool cost, exactly (R13).
with reserved as (
    select
        cluster,
        day,
        tenant,
        any_value(cost_center) as cost_center,
        'reserved' as charge_type,
        gpu_model,
        mig_profile,
        sum(device_seconds) as device_seconds,
        sum(gpu_seconds) as gpu_seconds,
        sum(busy_gpu_seconds) as busy_gpu_seconds,
        sum(energy_joules) as energy_joules,
        sum(reserved_cost) as amount
    from mart_device_seconds
    group by cluster, day, tenant, gpu_model, mig_profile
),
pool as (
    select cluster, day, gpu_model, sum(observed_gpu_seconds) as observed_gpu_seconds, sum(pool_cost) as pool_cost
    from mart_pool_daily_cost
    group by all
),
held as (
    select gpu_model, sum(gpu_seconds) as gpu_seconds, sum(amount) as amount
    from reserved
    group by gpu_model
),
idle as (
    select
        p.cluster,
        p.day,
        p.gpu_model,
        p.observed_gpu_seconds - coalesce(h.gpu_seconds, 0) as gpu_seconds,
        p.pool_cost - coalesce(h.amount, 0) as amount
    from pool as p
    left join held as h on h.gpu_model = p.gpu_model
),
-- idle_policy: proportional spreads each model's idle over its holders by their reserved charge. The last
-- holder in name order takes the remainder, so that the parts sum to the whole exactly (R13).
holder_weights as (
    select
        tenant,
        any_value(cost_center) as cost_center,
        gpu_model,
        sum(amount) as amount,
        sum(sum(amount)) over (partition by gpu_model) as model_amount,
        row_number() over (partition by gpu_model order by tenant desc) = 1 as takes_remainder
    from reserved
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
        cast(i.amount * (w.amount / w.model_amount) as decimal(38, 12)) as amount,
        cast(i.gpu_seconds * (w.amount / w.model_amount) as decimal(38, 12)) as gpu_seconds
    from idle as i
    join holder_weights as w on w.gpu_model = i.gpu_model
    where getvariable('idle_policy') = 'proportional' and w.model_amount > 0
),
idle_shares as (
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
            then i.amount - coalesce(sum(p.amount) filter (where not p.takes_remainder)
                over (partition by p.gpu_model), 0)
            else p.amount end as amount
    from idle_parts as p
    join idle as i on i.gpu_model = p.gpu_model
),
idle_left as (
    -- What no policy spread: all of it under platform, a model nobody held under proportional.
    select
        i.cluster,
        i.day,
        '__idle__' as tenant,
        null::varchar as cost_center,
        'idle' as charge_type,
        i.gpu_model,
        null::varchar as mig_profile,
        cast(0 as decimal(38, 12)) as device_seconds,
        i.gpu_seconds,
        cast(0 as decimal(38, 12)) as busy_gpu_seconds,
        cast(0 as decimal(38, 12)) as energy_joules,
        i.amount
    from idle as i
    where getvariable('idle_policy') = 'platform'
       or not exists (select 1 from idle_shares as s where s.gpu_model = i.gpu_model)
)
select * from reserved
union all
select * from idle_shares
union all
select * from idle_left
