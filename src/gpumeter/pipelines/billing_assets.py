"""Monthly billing assets (R12-R16): the invoice lines and one asset per export of them. Thin shells over
gpumeter.billing.month / gpumeter.billing.periods. A closed period is never written again: each asset then reports that
it left the period untouched, and its check verifies the closed files against the manifest."""

from collections.abc import Iterator
from pathlib import Path

from dagster import (
    AssetCheckResult,
    AssetDep,
    AssetExecutionContext,
    MaterializeResult,
    MetadataValue,
    asset,
)

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


def _written(paths: list[Path], **more: MetadataValue) -> MaterializeResult:
    return MaterializeResult(
        metadata={
            "status": "draft" if paths else "closed, untouched",
            "files": MetadataValue.json([str(p) for p in paths]),
            **more,
        }
    )


def _export(context: AssetExecutionContext, gpumeter: GpumeterConfigResource, kind: str) -> MaterializeResult:
    return _written(_write(context, gpumeter, kind))


@asset(
    name="invoice_csv",
    group_name=GROUP,
    partitions_def=monthly_partitions,
    deps=["invoice_lines"],
    check_specs=[checks.INVOICE_CSV_CHECK],
    kinds={"csv"},
    description="Invoice-lines CSV of the output contract: all tenants (with __idle__ and __unallocated__) "
    "and one file per tenant.",
)
def invoice_csv(
    context: AssetExecutionContext, gpumeter: GpumeterConfigResource
) -> Iterator[MaterializeResult | AssetCheckResult]:
    yield _export(context, gpumeter, "csv")
    yield checks.invoice_csv_reconciles(gpumeter.warehouse, _period(context), gpumeter.config.minor_unit)


@asset(
    name="invoice_focus",
    group_name=GROUP,
    partitions_def=monthly_partitions,
    deps=["invoice_lines", "invoice_csv"],
    check_specs=[checks.INVOICE_FOCUS_CHECK],
    kinds={"csv"},
    description="FOCUS CSV of the same lines, 1.2 or 1.3 by config focus_version (docs/billing.md: the mapping).",
)
def invoice_focus(
    context: AssetExecutionContext, gpumeter: GpumeterConfigResource
) -> Iterator[MaterializeResult | AssetCheckResult]:
    yield _export(context, gpumeter, "focus")
    yield checks.focus_billed_cost_total(gpumeter.warehouse, _period(context))


@asset(
    name="invoice_documents",
    group_name=GROUP,
    partitions_def=monthly_partitions,
    deps=["invoice_lines"],
    kinds={"html", "pdf"},
    description="Per tenant, one self-contained HTML invoice and the same invoice as PDF (A4, the document "
    "finance sends): lines, adjustments, totals, hash and status.",
)
def invoice_documents(context: AssetExecutionContext, gpumeter: GpumeterConfigResource) -> MaterializeResult:
    paths = _write(context, gpumeter, "documents")
    pdfs = [str(p) for p in paths if p.suffix == ".pdf"]
    return _written(paths, pdfs=MetadataValue.json(pdfs), pdf_count=MetadataValue.int(len(pdfs)))


BILLING_ASSETS = [invoice_lines, invoice_csv, invoice_focus, invoice_documents]
