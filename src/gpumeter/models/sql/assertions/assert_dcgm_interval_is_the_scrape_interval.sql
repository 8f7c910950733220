-- R1: each DCGM sample stands for Δ, so dcgm-exporter must be scraped every Δ. A node whose GPUs' samples mostly
-- come at an interval outside [¾ Δ, 1½ Δ) stops the day, naming both, rather than billing each sample for Δ (a
-- 15 s scrape under Δ = 30 s would bill twice the time). Judged on ten gaps or more, fewer than half of them
-- near Δ: not a scrape delivered twice at an offset (half its gaps are near Δ; reported as repeated scrapes),
-- nor an outage.
select
    node,
    dcgm_interval_seconds,
    'dcgm-exporter''s samples on node ' || coalesce('''' || node || '''', '(no node label)') || ' of cluster '
        || getvariable('cluster') || ' come every ' || dcgm_interval_seconds || ' s on ' || metered_day()
        || ' (the most common gap between a GPU''s consecutive samples; ' || dcgm_gaps_near_scrape_interval
        || ' of ' || dcgm_sample_gaps || ' gaps are near the configured interval), but scrape_interval_seconds is '
        || regexp_replace(getvariable('scrape_s')::varchar, '\.0+$', '') || ' s, the time each sample is billed '
        || 'for: set scrape_interval_seconds (or the cluster''s clusters[].scrape_interval_seconds) to '
        || dcgm_interval_seconds || ', the interval dcgm-exporter is scraped at, and meter the day again'
        as message
from mart_data_quality
where dcgm_sample_gaps >= 10
  and dcgm_gaps_near_scrape_interval * 2 < dcgm_sample_gaps
  and (dcgm_interval_seconds < 0.75 * getvariable('scrape_s') or dcgm_interval_seconds >= 1.5 * getvariable('scrape_s'))
order by node
