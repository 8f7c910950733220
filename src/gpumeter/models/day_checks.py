"""The checks of a metered (cluster, day), on its marts (gpumeter.pipelines.checks evaluates them as asset
checks of the `day_accounting` multi-asset right after it writes its partition). Each takes the marts per
cluster and names the cluster in what it reports.

- R13 conservation (an error): Σ tenant, __unallocated__ and __idle__ amounts = pool cost, exactly (in units
  of money and in their decimals).
- No over-booked device (an error): holders' shares of a device sample ≤ 1; a MIG GPU's instance weights ≤ 1.
- Coverage: observed vs expected GPU-seconds (kube-state-metrics' GPUs per node), warns below the floor.
- Unmapped namespaces: holders that no tenant rule matched (`__unallocated__`), a warning.
- Quarantined samples: raw DCGM samples set aside as hostile, a warning.
- Kueue sampled once per scrape interval, a warning.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pyarrow as pa

from gpumeter.config import UNALLOCATED, Config
from gpumeter.ingest.contract import SLOW_SCRAPE_INTERVALS
from gpumeter.models.findings import Finding, column_total

EPSILON = 1e-9

# A queue's samples may exceed the day's scrape intervals by this fraction (a drifting scrape schedule)
# before its quota-seconds read high.
KUEUE_SAMPLES_SLACK = 0.01

Marts = dict[str, dict[str, pa.Table]]  # cluster -> mart name -> the day's table


def conservation(marts_by_cluster: Marts) -> Finding:
    per_cluster = {}
    passed = True
    for cluster, marts in marts_by_cluster.items():
        invoiced = column_total(marts["mart_tenant_daily_cost"], "amount")
        pool = column_total(marts["mart_pool_daily_cost"], "pool_cost")
        # The exact money (R12): integer units of the day, and their decimals.
        charged_units = column_total(marts["mart_tenant_daily_cost"], "amount_units")
        pool_units = column_total(marts["mart_pool_daily_cost"], "pool_units")
        per_cluster[cluster] = {
            "pool_cost": str(pool),
            "charged": str(invoiced),
            "difference": str(invoiced - pool),
            "difference_in_units": str(charged_units - pool_units),
        }
        passed = passed and invoiced == pool and charged_units == pool_units
    return Finding(passed=passed, severity="ERROR", figures={"clusters": per_cluster})


def no_overbooked_device(marts_by_cluster: Marts) -> Finding:
    worst_share, worst_mig, bad = 0.0, 0.0, 0
    for marts in marts_by_cluster.values():
        for row in marts["mart_data_quality"].to_pylist():
            worst_share = max(worst_share, float(row["max_holder_share_sum"]))
            worst_mig = max(worst_mig, float(row["max_mig_weight_sum"]))
            bad += row["overbooked_device_samples"] + row["overbooked_mig_samples"]
    return Finding(
        passed=worst_share <= 1 + EPSILON and worst_mig <= 1 + EPSILON,
        severity="ERROR",
        figures={
            "max_holder_share_sum": worst_share,
            "max_mig_weight_sum": worst_mig,
            "overbooked_samples": bad,
        },
    )


def coverage(marts_by_cluster: Marts, config: Config) -> Finding:
    """Fails (a warning) where too little of the expected GPU-seconds was observed, where a GPU was observed
    again at most half a scrape interval after its previous sample (such samples are billed as they came,
    docs/rules.md R1), or where a series' pod labels could not be told from its scrape target's (held by
    nobody, R5)."""
    observed = expected = repeated = unverified = 0.0
    short_nodes = []
    repeating_nodes = []
    for cluster, marts in marts_by_cluster.items():
        for row in marts["mart_data_quality"].to_pylist():
            observed += float(row["observed_gpu_seconds"])
            expected += float(row["expected_gpu_seconds"])
            repeated += float(row["repeated_scrape_gpu_seconds"])
            unverified += float(row.get("holder_unverified_gpu_seconds") or 0)
            if float(row["unobserved_gpu_seconds"]) > 0:
                short_nodes.append(
                    f"{cluster}/{row['node']}: {float(row['unobserved_gpu_seconds']) / 3600:.2f} GPU-h"
                )
            if row["repeated_scrape_samples"]:
                repeating_nodes.append(f"{cluster}/{row['node']}: {row['repeated_scrape_samples']} samples")
    ratio = observed / expected if expected else 1.0
    return Finding(
        passed=ratio >= config.checks.min_coverage and not repeated and not unverified,
        severity="WARN",
        figures={
            "coverage": ratio,
            "observed_gpu_hours": observed / 3600,
            "expected_gpu_hours": expected / 3600,
            "unobserved": short_nodes,
            # GPU samples at most half a scrape interval after the GPU's previous one: a scrape delivered
            # twice, or scrape_interval_seconds larger than the real scrape interval.
            "repeated_scrape_gpu_hours": repeated / 3600,
            "repeated_scrapes": repeating_nodes,
            # GPU-hours whose series' pod labels may be the scrape target's own: metered as held by nobody.
            "holder_unverified_gpu_hours": unverified / 3600,
        },
    )


def unmapped_namespaces(marts_by_cluster: Marts) -> Finding:
    namespaces: dict[str, float] = {}
    for cluster, marts in marts_by_cluster.items():
        for row in marts["mart_device_seconds"].select(["tenant", "namespace", "device_seconds"]).to_pylist():
            if row["tenant"] == UNALLOCATED:
                key = f"{cluster}/{row['namespace']}"
                namespaces[key] = namespaces.get(key, 0.0) + float(row["device_seconds"]) / 3600
    return Finding(
        passed=not namespaces,
        severity="WARN",
        figures={"device_hours_by_namespace": dict(sorted(namespaces.items()))},
    )


def quarantined_samples(marts_by_cluster: Marts) -> Finding:
    """Warns when int_dcgm_quarantine set raw samples aside: what the day did not bill as it came, counted
    and shown per node (deduplicated copies are R1, not a warning; they are in the metadata)."""
    by_node: dict[str, dict[str, object]] = {}
    quarantined = duplicates = 0
    at_stake = dropped = Decimal(0)
    for cluster, marts in marts_by_cluster.items():
        for row in marts["mart_data_quality"].to_pylist():
            quarantined += row["quarantined_samples"]
            duplicates += row["duplicate_samples"]
            at_stake += Decimal(row["quarantined_gpu_seconds"])
            dropped += Decimal(row["dropped_gpu_seconds"])
            if row["quarantined_samples"]:
                by_node[f"{cluster}/{row['node']}"] = {
                    "samples": row["quarantined_samples"],
                    "gpu_seconds_at_stake": format(row["quarantined_gpu_seconds"], "f"),
                    "dropped_gpu_seconds": format(row["dropped_gpu_seconds"], "f"),
                    "by_reason": json.loads(row["quarantine_by_reason"]),
                }
    return Finding(
        passed=quarantined == 0,
        severity="WARN",
        figures={
            "quarantined_samples": quarantined,
            "gpu_seconds_at_stake": format(at_stake, "f"),
            "dropped_gpu_seconds": format(dropped, "f"),
            "deduplicated_copies": duplicates,
            "by_node": by_node,
        },
    )


def kueue_sampled_once_per_interval(marts_by_cluster: Marts, config: Config) -> Finding:
    """Warns where a Kueue queue was not sampled once every Δ. More samples than the day has scrape intervals:
    Kueue scraped more often than `scrape_interval_seconds`, or by two jobs at once. Samples further apart
    than 1.5 Δ (their median): Kueue scraped less often. Each sample stands for Δ, so the quota-seconds of
    such a queue read that many times too high, or too low (docs/tariffs.md)."""
    too_many: dict[str, int] = {}
    too_few: dict[str, float] = {}
    for cluster, marts in marts_by_cluster.items():
        interval_s = config.scrape_interval_of(cluster)
        intervals = 86_400 // interval_s
        for row in marts["mart_queue_quota_usage"].to_pylist():
            key = f"{cluster}/{row['cluster_queue']}/{row['flavor']}/{row['resource']}"
            if row["samples"] > intervals * (1 + KUEUE_SAMPLES_SLACK):
                too_many[key] = row["samples"]
            spacing = row["sample_interval_s"]
            if spacing is not None and spacing > SLOW_SCRAPE_INTERVALS * interval_s:
                too_few[key] = spacing
    return Finding(
        passed=not too_many and not too_few,
        severity="WARN",
        figures={
            "samples_by_queue": dict(sorted(too_many.items())),
            "seconds_between_samples_by_queue": dict(sorted(too_few.items())),
            "what_to_do": "scrape Kueue once, every scrape_interval_seconds (or set it to Kueue's interval)",
        },
    )
