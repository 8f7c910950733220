"""Asset checks of a metered day. The specs are declared here and evaluated by the `day_accounting`
multi-asset right after it writes the day, so each result belongs to that day's partition.

- R13 conservation (blocking): Σ tenant, __unallocated__ and __idle__ amounts = pool cost, exactly.
- No over-booked device: holders' shares of a device sample ≤ 1; a MIG GPU's instance weights ≤ 1.
- Coverage: observed vs expected GPU-seconds (kube-state-metrics' GPUs per node), warns below the floor.
- Unmapped namespaces: holders that no tenant rule matched (`__unallocated__`), a warning.
"""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, MetadataValue

from metering.config import UNALLOCATED, Config

EPSILON = 1e-9

CHECK_SPECS = [
    AssetCheckSpec(
        "conservation_r13",
        asset="mart_tenant_daily_cost",
        blocking=True,
        description="R13: tenants + __unallocated__ + __idle__ = pool cost, exactly, for every cluster.",
    ),
    AssetCheckSpec(
        "no_overbooked_device",
        asset="mart_data_quality",
        description="Holders' shares of a device sample sum to at most 1; a MIG GPU's instance weights too.",
    ),
    AssetCheckSpec(
        "coverage",
        asset="mart_data_quality",
        description="Observed GPU-seconds against those kube-state-metrics expects (R4).",
    ),
    AssetCheckSpec(
        "unmapped_namespaces",
        asset="mart_device_seconds",
        description="Holders in namespaces no tenant rule matches are charged to __unallocated__ (R7).",
    ),
]


def _sum(table: pa.Table, column: str, where: dict[str, str] | None = None) -> Decimal:
    total = Decimal(0)
    for row in table.select([column, *(where or {})]).to_pylist():
        if where and any(row[k] != v for k, v in where.items()):
            continue
        if row[column] is not None:
            total += Decimal(row[column])
    return total


def conservation(marts_by_cluster: dict[str, dict[str, pa.Table]]) -> AssetCheckResult:
    per_cluster = {}
    passed = True
    for cluster, marts in marts_by_cluster.items():
        invoiced = _sum(marts["mart_tenant_daily_cost"], "amount")
        pool = _sum(marts["mart_pool_daily_cost"], "pool_cost")
        per_cluster[cluster] = {
            "pool_cost": str(pool),
            "charged": str(invoiced),
            "difference": str(invoiced - pool),
        }
        passed = passed and invoiced == pool
    return AssetCheckResult(
        check_name="conservation_r13",
        asset_key="mart_tenant_daily_cost",
        passed=passed,
        severity=AssetCheckSeverity.ERROR,
        metadata={"clusters": MetadataValue.json(per_cluster)},
    )


def no_overbooked_device(marts_by_cluster: dict[str, dict[str, pa.Table]]) -> AssetCheckResult:
    worst_share, worst_mig, bad = 0.0, 0.0, 0
    for marts in marts_by_cluster.values():
        for row in marts["mart_data_quality"].to_pylist():
            worst_share = max(worst_share, float(row["max_holder_share_sum"]))
            worst_mig = max(worst_mig, float(row["max_mig_weight_sum"]))
            bad += row["overbooked_device_samples"] + row["overbooked_mig_samples"]
    return AssetCheckResult(
        check_name="no_overbooked_device",
        asset_key="mart_data_quality",
        passed=worst_share <= 1 + EPSILON and worst_mig <= 1 + EPSILON,
        severity=AssetCheckSeverity.ERROR,
        metadata={
            "max_holder_share_sum": worst_share,
            "max_mig_weight_sum": worst_mig,
            "overbooked_samples": bad,
        },
    )


def coverage(marts_by_cluster: dict[str, dict[str, pa.Table]], config: Config) -> AssetCheckResult:
    observed = expected = 0.0
    short_nodes = []
    for cluster, marts in marts_by_cluster.items():
        for row in marts["mart_data_quality"].to_pylist():
            observed += float(row["observed_gpu_seconds"])
            expected += float(row["expected_gpu_seconds"])
            if float(row["unobserved_gpu_seconds"]) > 0:
                short_nodes.append(
                    f"{cluster}/{row['node']}: {float(row['unobserved_gpu_seconds']) / 3600:.2f} GPU-h"
                )
    ratio = observed / expected if expected else 1.0
    return AssetCheckResult(
        check_name="coverage",
        asset_key="mart_data_quality",
        passed=ratio >= config.checks.min_coverage,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "coverage": MetadataValue.float(ratio),
            "observed_gpu_hours": observed / 3600,
            "expected_gpu_hours": expected / 3600,
            "unobserved": MetadataValue.json(short_nodes),
        },
    )


def unmapped_namespaces(marts_by_cluster: dict[str, dict[str, pa.Table]]) -> AssetCheckResult:
    namespaces: dict[str, float] = {}
    for cluster, marts in marts_by_cluster.items():
        for row in marts["mart_device_seconds"].select(["tenant", "namespace", "device_seconds"]).to_pylist():
            if row["tenant"] == UNALLOCATED:
                key = f"{cluster}/{row['namespace']}"
                namespaces[key] = namespaces.get(key, 0.0) + float(row["device_seconds"]) / 3600
    return AssetCheckResult(
        check_name="unmapped_namespaces",
        asset_key="mart_device_seconds",
        passed=not namespaces,
        severity=AssetCheckSeverity.WARN,
        metadata={"device_hours_by_namespace": MetadataValue.json(dict(sorted(namespaces.items())))},
    )


def evaluate(marts_by_cluster: dict[str, dict[str, pa.Table]], config: Config) -> list[AssetCheckResult]:
    return [
        conservation(marts_by_cluster),
        no_overbooked_device(marts_by_cluster),
        coverage(marts_by_cluster, config),
        unmapped_namespaces(marts_by_cluster),
    ]
