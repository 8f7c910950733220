-- R13: conservation: per (cluster, day) the lines of mart_tenant_daily_cost sum to the pool cost of
-- mart_pool_daily_cost exactly, in units of money (amount_units = pool_units) and as decimals (amount =
-- pool_cost).
with charged as (
    select cluster, day, sum(amount_units) as units, sum(amount) as amount
    from mart_tenant_daily_cost
    group by cluster, day
),
pool as (
    select cluster, day, sum(pool_units) as units, sum(pool_cost) as amount
    from mart_pool_daily_cost
    group by cluster, day
)
select
    coalesce(p.cluster, c.cluster) as cluster,
    coalesce(p.day, c.day) as day,
    'the cost lines of cluster ' || coalesce(p.cluster, c.cluster) || ' on ' || coalesce(p.day, c.day)
        || ' sum to ' || coalesce(c.amount, 0) || ' (' || coalesce(c.units, 0) || ' units), but the pool cost is '
        || coalesce(p.amount, 0) || ' (' || coalesce(p.units, 0) || ' units): every unit of the pool cost must be '
        || 'charged exactly once; report it with the day''s raw files and config' as message
from pool as p
full join charged as c on c.cluster = p.cluster and c.day = p.day
where coalesce(c.units, 0) <> coalesce(p.units, 0) or coalesce(c.amount, 0) <> coalesce(p.amount, 0)
order by cluster, day
