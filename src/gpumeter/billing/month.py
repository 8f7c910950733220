"""A month's invoice lines rolled up from its stored days (R2), with the adjustments it carries for closed
periods (R16)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from gpumeter.billing import adjustments, periods, refusals
from gpumeter.billing.exports import EXPORTS, write_exports
from gpumeter.billing.invoices import INVOICE_SCHEMA, Period, Reconciliation, reconcile
from gpumeter.config import Config
from gpumeter.storage.paths import MARTS
from gpumeter.storage.warehouse import Warehouse


def read_mart(warehouse: Warehouse, table: str, days: list[date]) -> pa.Table | None:
    return warehouse.read_days(MARTS, table, days)


@dataclass(frozen=True)
class MonthSummary:
    period: str
    line_count: int
    day_count: int
    reconciliation: Reconciliation
    exports: list[Path]
    closed: bool = False  # R16: a closed period is left untouched
    adjustment_count: int = 0


def _pool(warehouse: Warehouse, days: list[date]) -> pa.Table:
    pool = read_mart(warehouse, "pool_daily_cost", days)
    if pool is None:
        return pa.table({"day": pa.array([], pa.date32()), "pool_cost": pa.array([], pa.decimal128(38, 12))})
    return pool


def _plan(
    config: Config, warehouse: Warehouse, period: Period, action: str, config_path: str
) -> tuple[pa.Table, list[adjustments.Correction], Reconciliation]:
    """The open month's lines as its stored days say now, with the adjustments it carries, and their
    reconciliation; nothing is written. Refused (gpumeter.billing.refusals.MonthRefused) when a day they are
    rolled up from is half written, or when they do not reconcile."""
    refusals.check_days_whole(
        warehouse, period, action, config_path, adjustments.corrected_periods(warehouse, period)
    )
    lines, found = adjustments.roll_up(config, warehouse, period, lambda t, d: read_mart(warehouse, t, d))
    delta = sum((c.pool_delta for c in found), Decimal(0))
    reconciliation = reconcile(
        lines, _pool(warehouse, period.days()), period, config.minor_unit, corrections=delta
    )
    refusals.check_reconciles(warehouse, period, reconciliation, config.currency, action, config_path)
    return lines, found, reconciliation


def check_month(
    config: Config,
    warehouse: Warehouse,
    period_key: str,
    *,
    action: str = refusals.INVOICED,
    config_path: str = "F",
) -> Reconciliation | None:
    """Whether the month can be invoiced (or closed: `action`), before anything is run or written: raises
    MonthRefused naming a half-written day or the difference that keeps it from reconciling. None for a
    closed month, which is never rolled up again. `config_path` is named in the command to run."""
    period = Period.parse(period_key[:7])
    if periods.is_closed(warehouse, str(period)):
        return None
    return _plan(config, warehouse, period, action, config_path)[2]


def roll_up_month(
    config: Config,
    warehouse: Warehouse,
    period_key: str,
    *,
    with_exports: bool = True,
    config_path: str = "F",
) -> MonthSummary:
    """Invoice lines of the month from its stored days (R2: the month is the sum of its days), plus the
    adjustments it carries for closed periods (R16). A closed month is not rolled up again: its lines and
    files stay as closed, and the summary says so. A month with a half-written day, or whose lines do not
    reconcile with its pool cost, is refused (MonthRefused) before anything is written."""
    period = Period.parse(period_key[:7])
    key = str(period)
    days = period.days()
    daily = read_mart(warehouse, "tenant_daily_cost", days)
    day_count = len(set(daily.column("day").to_pylist())) if daily is not None else 0
    if periods.is_closed(warehouse, key):
        lines = periods.stored_lines(warehouse, key)
        assert lines is not None  # a closed period always has its closed copy
        corrections = [r for r in lines.to_pylist() if r["corrects_period"]]
        # Against its own days as closed: Σ closed lines = manifest total (late data goes elsewhere).
        manifest = periods.read_manifest(warehouse, key) or {}
        closed_total = Decimal(manifest.get("total_unrounded", "0"))
        pool = pa.table(
            {
                "day": pa.array([period.start], pa.date32()),
                "pool_cost": pa.array([closed_total], pa.decimal128(38, 12)),
            }
        )
        return MonthSummary(
            key,
            lines.num_rows,
            day_count,
            reconcile(lines, pool, period, config.minor_unit),
            [],
            closed=True,
            adjustment_count=len(corrections),
        )
    lines, found, reconciliation = _plan(config, warehouse, period, refusals.INVOICED, config_path)
    warehouse.write_period(MARTS, "invoice_lines", key, lines)
    exports = export_month(config, warehouse, key, "all") if with_exports else []
    return MonthSummary(
        key,
        lines.num_rows,
        day_count,
        reconciliation,
        exports,
        adjustment_count=sum(len(c.lines) for c in found),
    )


def export_month(config: Config, warehouse: Warehouse, period_key: str, kind: str) -> list[Path]:
    """Write one kind of export (gpumeter.billing.exports, or `all`) of the month's stored lines. A closed
    month's exports were written when it closed and are never written again (R16): returns []."""
    period = Period.parse(period_key[:7])
    key = str(period)
    if periods.is_closed(warehouse, key):
        return []
    lines = periods.stored_lines(warehouse, key)
    if lines is None:
        lines = INVOICE_SCHEMA.empty_table()
    status = periods.status_of(warehouse, key, lines, config.minor_unit)
    kinds = tuple(EXPORTS) if kind == "all" else (kind,)
    return write_exports(lines, config, period, periods.exports_dir(warehouse, key), status, kinds)
