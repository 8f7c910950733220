-- R8: a GPU whose price cannot be resolved stops the run, naming its model and node; never a silent zero.
-- One row per (GPU model, node) without a price, at its first such sample.
select
    m.model_name,
    n.node,
    u.ts_ms,
    'GPU model ' || coalesce('''' || m.model_name || '''', 'None') || ' on node ' || coalesce('''' || n.node || '''', 'None')
        || ' has no price at ' || utc_text(u.ts_ms) || ': '
        || case
            -- The node could not be found: the price is not what is missing.
            when h.unknown_hostnames is not null then
                'dcgm-exporter names the GPU''s host ' || h.unknown_hostnames || ', which is neither a node '
                || 'kube-state-metrics knows nor a pod it places on one (kube_pod_info), so no node price can '
                || 'match; set NODE_NAME in dcgm-exporter''s environment to the node''s name (spec.nodeName), as '
                || 'the GPU Operator does, or keep kube-state-metrics'' kube_pod_info'
            else
                'OpenCost''s node_gpu_hourly_cost has no sample for the node within kube_lookback_seconds '
                || '(price_source: opencost); check that OpenCost is scraped, or price the model under '
                || 'rate_card.models with price_source: rate_card'
        end as message
from (
    select model_key, node_key, min(ts_ms) as ts_ms
    from int_gpu_samples
    where gpu_price_per_hour is null
    group by model_key, node_key
) as u
-- Every GPU sample's model has a class (int_gpu_samples joins it): the name is the class's.
left join int_keyed_device_classes as m on m.model_key = u.model_key and m.profile_key is null
left join stg_dcgm_nodes as n on n.node_key = u.node_key
left join (
    select node_key, string_agg(distinct '''' || hostname || '''', ', ' order by '''' || hostname || '''') as unknown_hostnames
    from stg_dcgm_series
    where node_source = 'unknown'
    group by node_key
) as h on h.node_key = u.node_key
order by m.model_name, n.node
