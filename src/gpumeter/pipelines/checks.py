"""Asset checks of a metered (cluster, day). The specs are declared here and evaluated by the
`day_accounting` multi-asset right after it writes its partition, so each result belongs to that (cluster,
day); the functions take the tables per cluster, and name the cluster in what they report.

- R13 conservation (blocking): Σ tenant, __unallocated__ and __idle__ amounts = pool cost, exactly (in units
  of money and in their decimals).
- No over-booked device: holders' shares of a device sample ≤ 1; a MIG GPU's instance weights ≤ 1.
- Coverage: observed vs expected GPU-seconds (kube-state-metrics' GPUs per node), warns below the floor.
- Unmapped namespaces: holders that no tenant rule matched (`__unallocated__`), a warning.
"""

from __future__ import annotations

import csv
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, MetadataValue

from gpumeter.billing.adjustments import corrected_periods
from gpumeter.billing.invoices import Period, Reconciliation, build_invoice_lines
from gpumeter.billing.periods import (
    closed_lines_path,
    closed_periods,
    is_closed,
    published_exports,
    read_lines,
    stored_lines,
    verify_closed,
)
from gpumeter.billing.refusals import MonthRefused
from gpumeter.config import UNALLOCATED, Config
from gpumeter.ingest.contract import SLOW_SCRAPE_INTERVALS
from gpumeter.storage import paths
from gpumeter.storage.paths import MARTS
from gpumeter.storage.warehouse import Warehouse

EPSILON = 1e-9

CHECK_SPECS = [
    AssetCheckSpec(
        "conservation_r13",
        asset="mart_tenant_daily_cost",
        blocking=True,
        description="Conservation: tenants + __unallocated__ + __idle__ = pool cost, exactly, for the (cluster, day).",
    ),
    AssetCheckSpec(
        "no_overbooked_device",
        asset="mart_data_quality",
        description="Holders' shares of a device sample sum to at most 1; a MIG GPU's instance weights too.",
    ),
    AssetCheckSpec(
        "coverage",
        asset="mart_data_quality",
        description="Observed GPU-seconds against those kube-state-metrics expects, each GPU once per scrape.",
    ),
    AssetCheckSpec(
        "unmapped_namespaces",
        asset="mart_device_seconds",
        description="Holders in namespaces no tenant rule matches are charged to __unallocated__.",
    ),
    AssetCheckSpec(
        "quarantined_samples",
        asset="mart_data_quality",
        description="Raw DCGM samples dropped, ignored, clamped or merged as hostile (docs/reliability.md).",
    ),
    AssetCheckSpec(
        "kueue_sampled_once_per_interval",
        asset="mart_queue_quota_usage",
        description="One Kueue sample per queue and scrape interval, no more and no less often: each stands "
        "for Δ (docs/tariffs.md).",
    ),
]

# A queue's samples may exceed the day's scrape intervals by this fraction (a drifting scrape schedule)
# before its quota-seconds read high.
KUEUE_SAMPLES_SLACK = 0.01


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
        # The exact money (R12): integer units of the day, and their decimals.
        charged_units = _sum(marts["mart_tenant_daily_cost"], "amount_units")
        pool_units = _sum(marts["mart_pool_daily_cost"], "pool_units")
        per_cluster[cluster] = {
            "pool_cost": str(pool),
            "charged": str(invoiced),
            "difference": str(invoiced - pool),
            "difference_in_units": str(charged_units - pool_units),
        }
        passed = passed and invoiced == pool and charged_units == pool_units
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
    return AssetCheckResult(
        check_name="coverage",
        asset_key="mart_data_quality",
        passed=ratio >= config.checks.min_coverage and not repeated and not unverified,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "coverage": MetadataValue.float(ratio),
            "observed_gpu_hours": observed / 3600,
            "expected_gpu_hours": expected / 3600,
            "unobserved": MetadataValue.json(short_nodes),
            # GPU samples at most half a scrape interval after the GPU's previous one: a scrape delivered
            # twice, or scrape_interval_seconds larger than the real scrape interval.
            "repeated_scrape_gpu_hours": repeated / 3600,
            "repeated_scrapes": MetadataValue.json(repeating_nodes),
            # GPU-hours whose series' pod labels may be the scrape target's own: metered as held by nobody.
            "holder_unverified_gpu_hours": unverified / 3600,
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


def quarantined_samples(marts_by_cluster: dict[str, dict[str, pa.Table]]) -> AssetCheckResult:
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
    return AssetCheckResult(
        check_name="quarantined_samples",
        asset_key="mart_data_quality",
        passed=quarantined == 0,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "quarantined_samples": quarantined,
            "gpu_seconds_at_stake": format(at_stake, "f"),
            "dropped_gpu_seconds": format(dropped, "f"),
            "deduplicated_copies": duplicates,
            "by_node": MetadataValue.json(by_node),
        },
    )


def kueue_sampled_once_per_interval(
    marts_by_cluster: dict[str, dict[str, pa.Table]], config: Config
) -> AssetCheckResult:
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
    return AssetCheckResult(
        check_name="kueue_sampled_once_per_interval",
        asset_key="mart_queue_quota_usage",
        passed=not too_many and not too_few,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "samples_by_queue": MetadataValue.json(dict(sorted(too_many.items()))),
            "seconds_between_samples_by_queue": MetadataValue.json(dict(sorted(too_few.items()))),
            "what_to_do": "scrape Kueue once, every scrape_interval_seconds (or set it to Kueue's interval)",
        },
    )


def evaluate(marts_by_cluster: dict[str, dict[str, pa.Table]], config: Config) -> list[AssetCheckResult]:
    return [
        conservation(marts_by_cluster),
        no_overbooked_device(marts_by_cluster),
        coverage(marts_by_cluster, config),
        unmapped_namespaces(marts_by_cluster),
        quarantined_samples(marts_by_cluster),
        kueue_sampled_once_per_interval(marts_by_cluster, config),
    ]


# --- monthly invoice checks (R13, R14, R16): evaluated by the billing assets of gpumeter/pipelines/billing_assets.py

INVOICE_LINES_CHECK = AssetCheckSpec(
    "invoice_matches_daily_costs",
    asset="invoice_lines",
    blocking=True,
    description="Each tenant's usage lines = its tenant daily costs of the period, exactly; adjustment lines "
    "= the change in pool cost of the closed periods they correct. A closed period: its files "
    "are byte-identical to its manifest.",
)
MONTH_RECONCILES_CHECK = AssetCheckSpec(
    "month_reconciles_r13",
    asset="invoice_lines",
    blocking=True,
    description="Before the month's lines are written: every day it is rolled up from is stored whole (its "
    "pool cost and its tenants' charges), and its lines after rounding reconcile with the pool cost (+ "
    "adjustments). When it fails nothing of the month is written and no export runs (docs/billing.md, "
    '"When a month is refused").',
)
INVOICE_CSV_CHECK = AssetCheckSpec(
    "invoice_csv_reconciles_r13",
    asset="invoice_csv",
    blocking=True,
    description="The all-tenants invoice-lines CSV sums to the pool cost (+ adjustments) within half a minor "
    "unit per line; blocking: the FOCUS file is not written from a CSV that does not reconcile.",
)
INVOICE_FOCUS_CHECK = AssetCheckSpec(
    "focus_billed_cost_total",
    asset="invoice_focus",
    description="The FOCUS file's BilledCost sums to the all-tenants invoice-lines CSV total.",
)


def month_reconciles(
    reconciliation: Reconciliation | None, refused: MonthRefused | None = None
) -> AssetCheckResult:
    """The month's own reconciliation (gpumeter.billing.refusals), as the roll-up computed it: failed with
    the refusal's line and figures when the month was refused; passed for a closed month (never rolled up
    again; its files are verified by the other checks)."""
    spec = MONTH_RECONCILES_CHECK
    if refused is not None:
        metadata = {"refused": str(refused), "reason": refused.reason, **refused.figures}
        return AssetCheckResult(
            check_name=spec.name,
            asset_key=spec.asset_key,
            passed=False,
            severity=AssetCheckSeverity.ERROR,
            metadata={k: MetadataValue.json(v) if isinstance(v, list) else v for k, v in metadata.items()},
        )
    figures = (
        {"closed": True}
        if reconciliation is None
        else {
            "invoiced_rounded": str(reconciliation.lines_rounded),
            "invoiced_unrounded": str(reconciliation.lines_unrounded),
            "pool_cost_with_adjustments": str(reconciliation.pool_cost),
            "tolerance": str(reconciliation.tolerance),
        }
    )
    return AssetCheckResult(
        check_name=spec.name,
        asset_key=spec.asset_key,
        passed=reconciliation is None or reconciliation.ok,
        severity=AssetCheckSeverity.ERROR,
        metadata=figures,
    )


def _closed_files_intact(warehouse: Warehouse, period: str, spec: AssetCheckSpec) -> AssetCheckResult:
    changed = verify_closed(warehouse, period)
    return AssetCheckResult(
        check_name=spec.name,
        asset_key=spec.asset_key,
        passed=not changed,
        severity=AssetCheckSeverity.ERROR,
        metadata={"closed": True, "changed_files": MetadataValue.json(changed)},
    )


def _expected_adjustments(warehouse: Warehouse, period: str) -> dict[str, Decimal]:
    """Per corrected period: pool cost now − its closed total − adjustments for it billed elsewhere (R16).
    Computed from totals only, independently of the per-line adjustment arithmetic."""
    expected: dict[str, Decimal] = {}
    for corrected in corrected_periods(warehouse, Period.parse(period)):
        key = str(corrected)
        pool = warehouse.read_days(MARTS, "pool_daily_cost", corrected.days())
        now = _sum(pool, "pool_cost") if pool is not None else Decimal(0)
        expected[key] = now - sum(
            (Decimal(r["amount_unrounded"]) for r in _billed(warehouse, key, period)), Decimal(0)
        )
    return expected


def _billed(warehouse: Warehouse, corrected: str, rolled_up: str) -> list[dict]:
    """Every line billed so far for a closed period: its own usage lines, and the adjustments for it in the
    other closed periods (not in `rolled_up`, whose lines are being checked)."""
    rows = [
        r for r in read_lines(closed_lines_path(warehouse, corrected)).to_pylist() if not r["corrects_period"]
    ]
    for other in closed_periods(warehouse):
        if other not in (corrected, rolled_up):
            rows += [
                r
                for r in read_lines(closed_lines_path(warehouse, other)).to_pylist()
                if r["corrects_period"] == corrected
            ]
    return rows


def _line_key(row: dict) -> tuple[str, str, str, str]:
    charge = row["corrects_charge_type"] or row["charge_type"]
    return (row["tenant"], charge, row["gpu_model"] or "", row["mig_profile"] or "")


def _adjustments_off(
    warehouse: Warehouse, config: Config, period: str, lines: list[dict]
) -> dict[str, dict[str, str]]:
    """Per corrected period, what its adjustment lines bill against what they must bill (R12: the period's
    lines as recomputed now, each rounded, minus the rounded amounts billed for it so far), and their exact
    amounts against the change of its pool cost — which may differ only by the changes that round to
    nothing on a line whose hours do not move (no line is written for those, each under half a minor unit)."""
    half = Decimal(1).scaleb(-config.minor_unit) / 2
    off: dict[str, dict[str, str]] = {}
    for corrected in corrected_periods(warehouse, Period.parse(period)):
        key = str(corrected)
        daily = warehouse.read_days(MARTS, "tenant_daily_cost", corrected.days())
        now = build_invoice_lines(daily, config, corrected).to_pylist() if daily is not None else []
        billed = _billed(warehouse, key, period)
        mine = [r for r in lines if r["corrects_period"] == key]
        must_bill = sum((Decimal(r["amount"]) for r in now), Decimal(0)) - sum(
            (Decimal(r["amount"]) for r in billed), Decimal(0)
        )
        bills = sum((Decimal(r["amount"]) for r in mine), Decimal(0))
        exact_change = _expected_adjustments(warehouse, period)[key]
        carried = sum((Decimal(r["amount_unrounded"]) for r in mine), Decimal(0))
        lineless = {_line_key(r) for r in now + billed} - {_line_key(r) for r in mine}
        if bills != must_bill or abs(carried - exact_change) > half * len(lineless):
            off[key] = {
                "bills": str(bills),
                "must_bill": str(must_bill),
                "exact": str(carried),
                "pool_cost_change": str(exact_change),
            }
    return off


def invoice_matches_daily_costs(warehouse: Warehouse, config: Config, period: str) -> AssetCheckResult:
    spec = INVOICE_LINES_CHECK
    if is_closed(warehouse, period):
        return _closed_files_intact(warehouse, period, spec)
    stored = stored_lines(warehouse, period)
    lines = stored.to_pylist() if stored is not None else []
    daily = warehouse.read_days(MARTS, "tenant_daily_cost", Period.parse(period).days())
    billed: dict[str, Decimal] = {}
    for row in lines:
        if not row["corrects_period"]:
            billed[row["tenant"]] = billed.get(row["tenant"], Decimal(0)) + Decimal(row["amount_unrounded"])
    costs: dict[str, Decimal] = {}
    for row in daily.select(["tenant", "amount"]).to_pylist() if daily is not None else []:
        costs[row["tenant"]] = costs.get(row["tenant"], Decimal(0)) + Decimal(row["amount"])
    tenants_off = {
        t: str(billed.get(t, Decimal(0)) - costs.get(t, Decimal(0)))
        for t in sorted(set(billed) | set(costs))
        if billed.get(t, Decimal(0)) != costs.get(t, Decimal(0))
    }
    adjustments_off = _adjustments_off(warehouse, config, period, lines)
    adjusted: dict[str, Decimal] = {}
    for row in lines:
        if row["corrects_period"]:
            adjusted[row["corrects_period"]] = adjusted.get(row["corrects_period"], Decimal(0)) + Decimal(
                row["amount"]
            )
    return AssetCheckResult(
        check_name=spec.name,
        asset_key=spec.asset_key,
        passed=not tenants_off and not adjustments_off,
        severity=AssetCheckSeverity.ERROR,
        metadata={
            "tenants_off": MetadataValue.json(tenants_off),
            "adjustments": MetadataValue.json({k: str(v) for k, v in adjusted.items()}),
            "adjustments_off": MetadataValue.json(adjustments_off),
        },
    )


def _csv_column_total(path: Path, column: str) -> tuple[Decimal, int]:
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return sum((Decimal(r[column]) for r in rows), Decimal(0)), len(rows)


def invoice_csv_reconciles(warehouse: Warehouse, period: str, minor_unit: int) -> AssetCheckResult:
    spec = INVOICE_CSV_CHECK
    if is_closed(warehouse, period):
        return _closed_files_intact(warehouse, period, spec)
    path = published_exports(warehouse, period) / paths.invoice_csv_name(period)
    total, count = _csv_column_total(path, "amount")
    pool = warehouse.read_days(MARTS, "pool_daily_cost", Period.parse(period).days())
    expected = (_sum(pool, "pool_cost") if pool is not None else Decimal(0)) + sum(
        _expected_adjustments(warehouse, period).values(), Decimal(0)
    )
    with path.open(newline="", encoding="utf-8") as fh:
        adjustments = sum(1 for r in csv.DictReader(fh) if r["charge_type"] == "adjustment")
    # R13 after rounding (R12): half a minor unit per rounding — one per line, and one more per adjustment
    # line (the corrected line is rounded now, what was billed for it was rounded when it was billed).
    tolerance = Decimal(1).scaleb(-minor_unit) / 2 * max(count + adjustments, 1)
    return AssetCheckResult(
        check_name=spec.name,
        asset_key=spec.asset_key,
        passed=abs(total - expected) <= tolerance,
        severity=AssetCheckSeverity.ERROR,
        metadata={
            "file": str(path),
            "lines": count,
            "invoiced_rounded": str(total),
            "pool_cost_with_adjustments": str(expected),
            "tolerance": str(tolerance),
        },
    )


def focus_billed_cost_total(warehouse: Warehouse, period: str) -> AssetCheckResult:
    spec = INVOICE_FOCUS_CHECK
    if is_closed(warehouse, period):
        return _closed_files_intact(warehouse, period, spec)
    out = published_exports(warehouse, period)
    invoiced, lines = _csv_column_total(out / paths.invoice_csv_name(period), "amount")
    billed, rows = _csv_column_total(out / paths.focus_csv_name(period), "BilledCost")
    return AssetCheckResult(
        check_name=spec.name,
        asset_key=spec.asset_key,
        passed=billed == invoiced and rows == lines,
        severity=AssetCheckSeverity.ERROR,
        metadata={"billed_cost": str(billed), "invoiced": str(invoiced), "rows": rows, "lines": lines},
    )
