-- materialized: ephemeral
-- Every kube-state-metrics / OpenCost / Kueue sample of the cluster in the day and its lookback, with the
-- time until which it describes its series (R1a): the target's next scrape, which either shows the series
-- again (and its next sample takes over) or does not (the series has ended there). `kube_lookback_seconds`
-- bounds it only for a target that stopped being scraped. `until_ms` is exclusive; `next_scrape_ms` is null
-- after the target's last scrape of the window.
with window_rows as (
    select *, coalesce(target, split_part(metric, '_', 1)) as scrape_target
    from raw_kube_samples
    where cluster = getvariable('cluster')
      and ts_ms >= getvariable('window_start_ms')
      and ts_ms < getvariable('day_end_ms')
)
select
    w.* exclude (scrape_target),
    w.scrape_target,
    s.next_scrape_ms,
    s.scrape_index,
    least(coalesce(s.next_scrape_ms, w.ts_ms + getvariable('lookback_ms') + 1), w.ts_ms + getvariable('lookback_ms') + 1)
        as until_ms
from window_rows as w
join stg_kube_target_scrapes as s on s.scrape_target = w.scrape_target and s.ts_ms = w.ts_ms
