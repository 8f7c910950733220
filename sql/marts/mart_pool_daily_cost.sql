-- Grain: day × node × GPU model. Pool cost: every observed GPU-second at its GPU's price (R4, R9).
select
    g.cluster,
    getvariable('day')::date as day,
    g.node,
    c.gpu_model,
    g.model_name,
    count(*) as gpu_samples,
    cast(count(*) * getvariable('scrape_s') as decimal(38, 12)) as observed_gpu_seconds,
    sum(cast(getvariable('scrape_s') / 3600.0 * g.gpu_price_per_hour as decimal(38, 12))) as pool_cost
from int_gpu_samples as g
join int_device_classes as c on c.model_name = g.model_name and c.mig_profile is null
group by all
