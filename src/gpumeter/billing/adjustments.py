"""Adjustments (R16): data that arrives after a period closed is billed in the next open period.

Per (tenant, charge type, GPU model, MIG profile): the closed period's line as recomputed now, rounded, minus
what was billed for it (its closed line and the adjustments for it already billed in other periods), so that
a tenant pays in total what the corrected line rounds to (R12). docs/billing.md, "Adjustments".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

import pyarrow as pa

from gpumeter.billing.invoices import (
    ADJUSTMENT,
    LineKey,
    LineSums,
    Period,
    build_invoice_lines,
    lines_table,
    make_lines,
)
from gpumeter.billing.periods import closed_lines_path, closed_periods, read_lines
from gpumeter.config import Config
from gpumeter.storage.warehouse import Warehouse


def _line_key(row: dict) -> LineKey:
    charge = row["corrects_charge_type"] if row["charge_type"] == ADJUSTMENT else row["charge_type"]
    return (row["tenant"], charge, row["gpu_model"] or "", row["mig_profile"] or "")


def _add(sums: dict[LineKey, LineSums], rows: list[dict], sign: int) -> None:
    for row in rows:
        acc = sums[_line_key(row)]
        acc.device_hours += sign * Decimal(row["device_hours"])
        acc.gpu_hours += sign * Decimal(row["gpu_hours"])
        acc.busy_gpu_hours += sign * Decimal(row["busy_gpu_hours"] or 0)
        acc.energy_kwh += sign * Decimal(row["energy_kwh"] or 0)
        acc.amount += sign * Decimal(row["amount_unrounded"])


def corrected_periods(warehouse: Warehouse, period: Period) -> list[Period]:
    """Closed periods whose next open period is `period`: every month between them is closed too."""
    closed = set(closed_periods(warehouse))
    found = []
    for key in sorted(closed, reverse=True):
        earlier = Period.parse(key)
        if earlier.start >= period.start:
            continue
        between = Period.of(earlier.end)
        while between.start < period.start and str(between) in closed:
            between = Period.of(between.end)
        if between == period:
            found.append(earlier)
    return sorted(found, key=str)


def _billed_for(warehouse: Warehouse, corrected: Period, other_than: Period) -> list[dict]:
    """What has been billed for `corrected`: its closed usage lines and the adjustments for it in other
    closed periods (never those of `other_than`, which is being rolled up again)."""
    billed = [
        r
        for r in read_lines(closed_lines_path(warehouse, str(corrected))).to_pylist()
        if not r["corrects_period"]
    ]
    for key in closed_periods(warehouse):
        if key in (str(corrected), str(other_than)):
            continue
        rows = read_lines(closed_lines_path(warehouse, key)).to_pylist()
        billed += [r for r in rows if r["corrects_period"] == str(corrected)]
    return billed


@dataclass(frozen=True)
class Correction:
    """The adjustment of one closed period billed in an open one, and the pool cost it accounts for."""

    corrected: Period
    pool_cost_now: Decimal  # of the corrected period's days as stored now
    billed_before: Decimal  # exact amounts (`amount_unrounded`) of all that was billed for it
    lines: list[dict]
    billed_before_rounded: Decimal = Decimal(0)  # what was billed for it: the rounded amounts
    billed_now_rounded: Decimal = Decimal(0)  # what it rounds to now: Σ of its recomputed lines, rounded
    # Exact changes of lines whose correction rounds to nothing and moves no hours: not billed (R12), so
    # they have no line.
    unbilled: Decimal = Decimal(0)

    @property
    def pool_delta(self) -> Decimal:
        """What the adjustment lines carry exactly (Σ their `amount_unrounded`): the change in the corrected
        period's pool cost, less the `unbilled` changes that round to nothing."""
        return self.pool_cost_now - self.billed_before - self.unbilled

    @property
    def billed_delta(self) -> Decimal:
        """What the adjustment lines bill (Σ their rounded `amount`): R12, the corrected period rounded now
        minus what was billed for it, so that in total it is billed what it rounds to now."""
        return self.billed_now_rounded - self.billed_before_rounded


DailyReader = Callable[[str, list], pa.Table | None]  # (mart table, days) -> stored rows or None


def corrections(
    config: Config, warehouse: Warehouse, period: Period, read_days: DailyReader
) -> list[Correction]:
    """Adjustment lines for `period`: per closed period it is the next open period of, and per (tenant, charge
    type, GPU model, MIG profile), the current recomputation of that line against all that was billed for it
    (R16). The line bills the recomputed line rounded minus the rounded amounts billed (R12), so that a
    tenant pays in total what the corrected line rounds to; its hours and `amount_unrounded` are the exact
    differences. A key whose hours do not move and whose billed amount would be zero gets no line.
    Differences of `__idle__` and `__unallocated__` are lines too, so Σ = Δ pool cost (R13)."""
    found = []
    for corrected in corrected_periods(warehouse, period):
        days = corrected.days()
        daily = read_days("tenant_daily_cost", days)
        pool = read_days("pool_daily_cost", days)
        now = build_invoice_lines(daily, config, corrected).to_pylist() if daily is not None else []
        billed = _billed_for(warehouse, corrected, period)
        sums: dict[LineKey, LineSums] = defaultdict(LineSums)
        _add(sums, now, +1)
        _add(sums, billed, -1)
        to_bill: dict[LineKey, Decimal] = defaultdict(Decimal)
        for row in now:
            to_bill[_line_key(row)] += Decimal(row["amount"])  # the recomputed line, rounded once
        for row in billed:
            to_bill[_line_key(row)] -= Decimal(row["amount"])  # what the tenant was invoiced for it
        lines: dict[LineKey, LineSums] = {}
        unbilled = Decimal(0)
        for key, acc in sums.items():
            acc.billed = to_bill[key]
            if acc.billed or acc.device_hours or acc.gpu_hours or acc.energy_kwh:
                lines[key] = acc
            else:
                unbilled += acc.amount
        pool_now = (
            sum((Decimal(v) for v in pool.column("pool_cost").to_pylist()), Decimal(0))
            if pool
            else Decimal(0)
        )
        found.append(
            Correction(
                corrected,
                pool_now,
                sum((Decimal(r["amount_unrounded"]) for r in billed), Decimal(0)),
                make_lines(lines, config, period, corrects=corrected),
                billed_before_rounded=sum((Decimal(r["amount"]) for r in billed), Decimal(0)),
                billed_now_rounded=sum((Decimal(r["amount"]) for r in now), Decimal(0)),
                unbilled=unbilled,
            )
        )
    return found


def roll_up(
    config: Config, warehouse: Warehouse, period: Period, read_days: DailyReader
) -> tuple[pa.Table, list[Correction]]:
    """The lines of an open period: its days (R2) plus the adjustments it carries (R16)."""
    daily = read_days("tenant_daily_cost", period.days())
    usage = build_invoice_lines(daily, config, period).to_pylist() if daily is not None else []
    found = corrections(config, warehouse, period, read_days)
    return lines_table(usage + [line for c in found for line in c.lines]), found
