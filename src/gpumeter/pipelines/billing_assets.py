"""Monthly billing assets (R12-R16): the invoice lines and one asset per export of the registry. Thin shells over
gpumeter.billing.month / gpumeter.billing.periods. A closed period is never written again: each asset then reports that
it left the period untouched, and its check verifies the closed files against the manifest."""

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from dagster import (
    AssetCheckResult,
    AssetDep,
    AssetExecutionContext,
    AssetsDefinition,
    MaterializeResult,
    MetadataValue,
    asset,
)

from gpumeter.billing.exports import EXPORTS, Export
from gpumeter.billing.month import export_month, roll_up_month
from gpumeter.billing.refusals import MonthRefused
from gpumeter.pipelines import checks
from gpumeter.pipelines.partitions import MONTH_OF_CLUSTER_DAYS, monthly_partitions
from gpumeter.pipelines.resources import GpumeterConfigResource

GROUP = "invoices"


def _period(context: AssetExecutionContext) -> str:
    return context.partition_key[:7]


@asset(
    name="invoice_lines",
    group_name=GROUP,
    partitions_def=monthly_partitions,
    deps=[
        AssetDep(mart, partition_mapping=MONTH_OF_CLUSTER_DAYS)
        for mart in ("mart_tenant_daily_cost", "mart_pool_daily_cost")
    ],
    check_specs=[checks.INVOICE_LINES_CHECK, checks.MONTH_RECONCILES_CHECK],
    output_required=False,  # a refused month is not materialized: nothing of it is written
    kinds={"python", "parquet"},
    description="Monthly invoice lines per tenant, rolled up from the month's days and rounded once per line, "
    "with the adjustment lines it carries for closed periods. A closed month is left untouched. A month with a "
    "half-written day, or that does not reconcile with its pool cost, is refused: nothing of it is written and "
    "no export runs.",
)
def invoice_lines(
    context: AssetExecutionContext, gpumeter: GpumeterConfigResource
) -> Iterator[MaterializeResult | AssetCheckResult]:
    try:
        summary = roll_up_month(
            gpumeter.config,
            gpumeter.warehouse,
            context.partition_key,
            with_exports=False,
            config_path=gpumeter.config_path,
        )
    except MonthRefused as refused:
        # The blocking check fails and the step with it, saying why in finance's words: no invoice lines, and
        # no export asset downstream runs.
        yield checks.month_reconciles(None, refused)
        raise
    if summary.closed:
        context.log.info(f"period {summary.period} is closed: its invoice lines are left untouched")
    yield MaterializeResult(
        metadata={
            "status": "closed, untouched" if summary.closed else "draft",
            "lines": MetadataValue.int(summary.line_count),
            "adjustment_lines": MetadataValue.int(summary.adjustment_count),
            "days": MetadataValue.int(summary.day_count),
            "pool_cost": MetadataValue.float(float(summary.reconciliation.pool_cost)),
            "invoiced_rounded": MetadataValue.float(float(summary.reconciliation.lines_rounded)),
            "reconciles": MetadataValue.bool(summary.reconciliation.ok),
        }
    )
    yield checks.invoice_matches_daily_costs(gpumeter.warehouse, gpumeter.config, _period(context))
    yield checks.month_reconciles(None if summary.closed else summary.reconciliation)


def _write(context: AssetExecutionContext, gpumeter: GpumeterConfigResource, kind: str) -> list[Path]:
    paths = export_month(gpumeter.config, gpumeter.warehouse, context.partition_key, kind)
    if not paths:
        context.log.info(f"period {_period(context)} is closed: its {kind} exports are left untouched")
    return paths


def _written(paths: list[Path]) -> MaterializeResult:
    by_suffix = Counter(p.suffix.lstrip(".") for p in paths)
    return MaterializeResult(
        metadata={
            "status": "draft" if paths else "closed, untouched",
            "files": MetadataValue.json([str(p) for p in paths]),
            **{f"{suffix}_count": MetadataValue.int(n) for suffix, n in sorted(by_suffix.items())},
        }
    )


def export_asset(export: Export) -> AssetsDefinition:
    """The asset that writes one kind of export of the registry (gpumeter.billing.exports.EXPORTS), with the
    check the kind has (gpumeter.pipelines.checks.EXPORT_CHECKS)."""
    check = checks.EXPORT_CHECKS.get(export.kind)

    @asset(
        name=export.asset,
        group_name=GROUP,
        partitions_def=monthly_partitions,
        deps=["invoice_lines", *(EXPORTS[kind].asset for kind in export.after)],
        check_specs=[check.spec] if check else None,
        kinds=set(export.file_kinds),
        description=export.description,
    )
    def _export(
        context: AssetExecutionContext, gpumeter: GpumeterConfigResource
    ) -> Iterator[MaterializeResult | AssetCheckResult]:
        yield _written(_write(context, gpumeter, export.kind))
        if check:
            yield check.run(gpumeter.warehouse, gpumeter.config, _period(context))

    return _export


def billing_assets() -> list[AssetsDefinition]:
    """The month's invoice lines and one asset per kind of export the registry lists."""
    return [invoice_lines, *(export_asset(export) for export in EXPORTS.values())]
