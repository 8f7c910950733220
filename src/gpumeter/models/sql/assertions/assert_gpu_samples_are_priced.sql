-- R8: a GPU whose price cannot be resolved stops the run, naming its model and node; never a silent zero.
-- One row per (GPU model, node) without a price, at its first such sample.
select
    model_name,
    node,
    min(ts_ms) as ts_ms,
    'GPU model ' || coalesce('''' || model_name || '''', 'None') || ' on node ' || coalesce('''' || node || '''', 'None')
        || ' has no price at ' || utc_text(min(ts_ms)) || ': OpenCost''s node_gpu_hourly_cost has no sample for '
        || 'the node within kube_lookback_seconds (price_source: opencost); check that OpenCost is scraped, or '
        || 'price the model under rate_card.models with price_source: rate_card' as message
from int_gpu_samples
where gpu_price_per_hour is null
group by model_name, node
order by model_name, node
