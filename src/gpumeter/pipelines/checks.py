"""Asset checks as Dagster runs them: the specs, and each check's finding (gpumeter.models.day_checks for a
metered (cluster, day), gpumeter.billing.invoice_checks for an invoiced month) as an AssetCheckResult.

The day's checks are evaluated by the `day_accounting` multi-asset right after it writes its partition, so
each result belongs to that (cluster, day); the month's by the billing assets of
gpumeter/pipelines/billing_assets.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, MetadataValue

from gpumeter.billing import invoice_checks
from gpumeter.billing.invoices import Reconciliation
from gpumeter.billing.refusals import MonthRefused
from gpumeter.config import Config
from gpumeter.models import day_checks
from gpumeter.models.day_checks import Marts
from gpumeter.models.findings import Finding
from gpumeter.storage.warehouse import Warehouse

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


def _metadata_value(value: Any) -> Any:
    return MetadataValue.json(value) if isinstance(value, dict | list) else value


def _result(spec: AssetCheckSpec, finding: Finding) -> AssetCheckResult:
    return AssetCheckResult(
        check_name=spec.name,
        asset_key=spec.asset_key,
        passed=finding.passed,
        severity=AssetCheckSeverity(finding.severity),
        metadata={name: _metadata_value(value) for name, value in finding.figures.items()},
    )


# --- the day's checks ----------------------------------------------------------------------------

# The rule each check of CHECK_SPECS runs (gpumeter.models.day_checks), given the day's marts and the config.
_DAY_RULES: dict[str, Callable[[Marts, Config], Finding]] = {
    "conservation_r13": lambda marts, _config: day_checks.conservation(marts),
    "no_overbooked_device": lambda marts, _config: day_checks.no_overbooked_device(marts),
    "coverage": day_checks.coverage,
    "unmapped_namespaces": lambda marts, _config: day_checks.unmapped_namespaces(marts),
    "quarantined_samples": lambda marts, _config: day_checks.quarantined_samples(marts),
    "kueue_sampled_once_per_interval": day_checks.kueue_sampled_once_per_interval,
}


def evaluate(marts_by_cluster: Marts, config: Config) -> list[AssetCheckResult]:
    """Every check of the metered day, in the order of CHECK_SPECS."""
    return [_result(spec, _DAY_RULES[spec.name](marts_by_cluster, config)) for spec in CHECK_SPECS]


# --- the month's checks (R13, R14, R16): evaluated by the billing assets -----------------------

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
    return _result(MONTH_RECONCILES_CHECK, invoice_checks.month_reconciles(reconciliation, refused))


def invoice_matches_daily_costs(warehouse: Warehouse, config: Config, period: str) -> AssetCheckResult:
    finding = invoice_checks.invoice_matches_daily_costs(warehouse, config, period)
    return _result(INVOICE_LINES_CHECK, finding)


def invoice_csv_reconciles(warehouse: Warehouse, period: str, minor_unit: int) -> AssetCheckResult:
    finding = invoice_checks.invoice_csv_reconciles(warehouse, period, minor_unit)
    return _result(INVOICE_CSV_CHECK, finding)


def focus_billed_cost_total(warehouse: Warehouse, period: str) -> AssetCheckResult:
    return _result(INVOICE_FOCUS_CHECK, invoice_checks.focus_billed_cost_total(warehouse, period))


@dataclass(frozen=True)
class ExportCheck:
    """The check of one kind of export, run by its asset after it writes (gpumeter.pipelines.billing_assets)."""

    spec: AssetCheckSpec
    run: Callable[[Warehouse, Config, str], AssetCheckResult]


EXPORT_CHECKS = {
    "csv": ExportCheck(
        INVOICE_CSV_CHECK,
        lambda warehouse, config, period: invoice_csv_reconciles(warehouse, period, config.minor_unit),
    ),
    "focus": ExportCheck(
        INVOICE_FOCUS_CHECK, lambda warehouse, _config, period: focus_billed_cost_total(warehouse, period)
    ),
}
