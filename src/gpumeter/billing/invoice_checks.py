"""Whether an invoiced month holds together (R13, R14, R16): its lines against its days, its reconciliation
after rounding, its CSV against the pool cost, its FOCUS file against its CSV; for a closed month, its files
against its manifest. gpumeter.pipelines.checks evaluates these as the blocking asset checks of the billing
assets (gpumeter.pipelines.billing_assets).
"""

from __future__ import annotations

import csv
from decimal import Decimal
from pathlib import Path

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
from gpumeter.config import Config
from gpumeter.models.findings import Finding, column_total
from gpumeter.storage import paths
from gpumeter.storage.paths import MARTS
from gpumeter.storage.warehouse import Warehouse


def month_reconciles(reconciliation: Reconciliation | None, refused: MonthRefused | None = None) -> Finding:
    """The month's own reconciliation (gpumeter.billing.refusals), as the roll-up computed it: failed with
    the refusal's line and figures when the month was refused; passed for a closed month (never rolled up
    again; its files are verified by the other checks)."""
    if refused is not None:
        figures = {"refused": str(refused), "reason": refused.reason, **refused.figures}
        return Finding(passed=False, severity="ERROR", figures=figures)
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
    return Finding(passed=reconciliation is None or reconciliation.ok, severity="ERROR", figures=figures)


def closed_files_intact(warehouse: Warehouse, period: str) -> Finding:
    changed = verify_closed(warehouse, period)
    return Finding(
        passed=not changed,
        severity="ERROR",
        figures={"closed": True, "changed_files": changed},
    )


def _expected_adjustments(warehouse: Warehouse, period: str) -> dict[str, Decimal]:
    """Per corrected period: pool cost now − its closed total − adjustments for it billed elsewhere (R16).
    Computed from totals only, independently of the per-line adjustment arithmetic."""
    expected: dict[str, Decimal] = {}
    for corrected in corrected_periods(warehouse, Period.parse(period)):
        key = str(corrected)
        pool = warehouse.read_days(MARTS, "pool_daily_cost", corrected.days())
        now = column_total(pool, "pool_cost") if pool is not None else Decimal(0)
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


def invoice_matches_daily_costs(warehouse: Warehouse, config: Config, period: str) -> Finding:
    if is_closed(warehouse, period):
        return closed_files_intact(warehouse, period)
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
    return Finding(
        passed=not tenants_off and not adjustments_off,
        severity="ERROR",
        figures={
            "tenants_off": tenants_off,
            "adjustments": {k: str(v) for k, v in adjusted.items()},
            "adjustments_off": adjustments_off,
        },
    )


def _csv_column_total(path: Path, column: str) -> tuple[Decimal, int]:
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return sum((Decimal(r[column]) for r in rows), Decimal(0)), len(rows)


def invoice_csv_reconciles(warehouse: Warehouse, period: str, minor_unit: int) -> Finding:
    if is_closed(warehouse, period):
        return closed_files_intact(warehouse, period)
    path = published_exports(warehouse, period) / paths.invoice_csv_name(period)
    total, count = _csv_column_total(path, "amount")
    pool = warehouse.read_days(MARTS, "pool_daily_cost", Period.parse(period).days())
    expected = (column_total(pool, "pool_cost") if pool is not None else Decimal(0)) + sum(
        _expected_adjustments(warehouse, period).values(), Decimal(0)
    )
    with path.open(newline="", encoding="utf-8") as fh:
        adjustments = sum(1 for r in csv.DictReader(fh) if r["charge_type"] == "adjustment")
    # R13 after rounding (R12): half a minor unit per rounding — one per line, and one more per adjustment
    # line (the corrected line is rounded now, what was billed for it was rounded when it was billed).
    tolerance = Decimal(1).scaleb(-minor_unit) / 2 * max(count + adjustments, 1)
    return Finding(
        passed=abs(total - expected) <= tolerance,
        severity="ERROR",
        figures={
            "file": str(path),
            "lines": count,
            "invoiced_rounded": str(total),
            "pool_cost_with_adjustments": str(expected),
            "tolerance": str(tolerance),
        },
    )


def focus_billed_cost_total(warehouse: Warehouse, period: str) -> Finding:
    if is_closed(warehouse, period):
        return closed_files_intact(warehouse, period)
    out = published_exports(warehouse, period)
    invoiced, lines = _csv_column_total(out / paths.invoice_csv_name(period), "amount")
    billed, rows = _csv_column_total(out / paths.focus_csv_name(period), "BilledCost")
    return Finding(
        passed=billed == invoiced and rows == lines,
        severity="ERROR",
        figures={"billed_cost": str(billed), "invoiced": str(invoiced), "rows": rows, "lines": lines},
    )
