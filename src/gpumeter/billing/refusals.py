"""What makes a month impossible to invoice or close, said in finance's words (docs/billing.md, "When a
month is refused").

Two things refuse a month before anything of it is written (no invoice lines, no export file, no closed
period):

- **A day half written.** A day is metered into several stored tables, one file each; the month is rolled up
  from two of them, the day's pool cost and its tenants' charges (ROLLED_UP). A day that has any of its
  tables stored but lacks one of those two (a disk that filled between two writes) would bill its pool cost
  without its charges, or the reverse. It is named, with the command that meters it again.
- **A month that does not reconcile.** Its invoice lines after rounding (tenants, unallocated and idle, with
  the adjustments it carries) against the pool cost of its days (plus the change in pool cost of the closed
  months it corrects): `gpumeter.billing.invoices.reconcile`. The month, both totals and their difference
  are named, with the days whose charges and pool cost differ when there are such days.

gpumeter.billing.month calls these before it writes a month's lines; `gpumeter invoices` and `gpumeter close`
call them through `month.check_month` before they run anything, and the invoice_lines asset reports them as
its blocking check.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal

from gpumeter.billing.invoices import InvoiceError, Period, Reconciliation, round_money
from gpumeter.storage import paths
from gpumeter.storage.files import read_parquet
from gpumeter.storage.warehouse import Warehouse

POOL_COST = "pool_daily_cost"
TENANT_CHARGES = paths.TENANT_DAILY_COST
# The stored tables of a day that the month is rolled up from, in finance's words.
ROLLED_UP = {POOL_COST: "pool cost", TENANT_CHARGES: "tenants' charges"}

# The verb of each refused command: "2026-11 cannot be invoiced", "… cannot be closed".
INVOICED = "invoiced"
CLOSED = "closed"

_MORE_NAMED = 3  # half-written days named after the first one, before "and N more"


class MonthRefused(InvoiceError):
    """A month that cannot be invoiced or closed (one line: what is wrong and what to do). `figures` are
    what the refusal names, as plain strings (the Dagster check's metadata)."""

    def __init__(self, message: str, reason: str, figures: dict[str, object]) -> None:
        super().__init__(message)
        self.reason = reason
        self.figures = figures


@dataclass(frozen=True)
class HalfWrittenDay:
    cluster: str
    day: date
    missing: tuple[str, ...]  # stored tables of ROLLED_UP that the day lacks
    stored: tuple[str, ...]  # stored tables of ROLLED_UP that it has

    def describe(self) -> str:
        if not self.stored:
            return "neither its pool cost nor its tenants' charges are stored (other figures of the day are)"
        if self.missing == (TENANT_CHARGES,):
            return "its pool cost is stored but not its tenants' charges"
        return "its tenants' charges are stored but not its pool cost"


def _daily_tables(warehouse: Warehouse) -> list[str]:
    """The daily tables of the marts zone (the month's invoice lines, stored per period, are not daily)."""
    base = warehouse.root / paths.MARTS
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if p.is_dir() and p.name != paths.INVOICE_LINES)


def half_written_days(warehouse: Warehouse, days: list[date]) -> list[HalfWrittenDay]:
    """(cluster, day)s among `days` with any stored daily table but not every table the roll-up reads."""
    stored: dict[tuple[str, date], set[str]] = {}
    for table in _daily_tables(warehouse):
        for path in warehouse.day_paths(paths.MARTS, table, days):
            stored.setdefault(paths.partition_of(path), set()).add(table)
    found = []
    for (cluster, day), tables in sorted(stored.items(), key=lambda item: (item[0][1], item[0][0])):
        missing = tuple(t for t in ROLLED_UP if t not in tables)
        if missing:
            found.append(HalfWrittenDay(cluster, day, missing, tuple(t for t in ROLLED_UP if t in tables)))
    return found


def _rerun(config_path: str, cluster: str | None, start: date, end: date) -> str:
    end = min(
        end, datetime.now(UTC).date()
    )  # the days of the current month up to today: later ones cannot run
    command = f"gpumeter run --config {config_path} --start {start} --end {end}"
    return f"`{command} --cluster {cluster}`" if cluster else f"`{command}`"


def check_days_whole(
    warehouse: Warehouse,
    period: Period,
    action: str,
    config_path: str,
    corrected: list[Period] | tuple[Period, ...] = (),
) -> None:
    """Refuse the month when a day it is rolled up from is half written: a day of the month, or of a closed
    month it carries adjustments for (their charges are recomputed from their stored days)."""
    days = [d for p in (period, *corrected) for d in p.days()]
    found = half_written_days(warehouse, days)
    if not found:
        return
    first = found[0]
    more = found[1 : 1 + _MORE_NAMED]
    others = ""
    if len(found) > 1:
        named = ", ".join(f"{h.cluster} {h.day}" for h in more)
        left = len(found) - 1 - len(more)
        others = f" (also half written: {named}{f' and {left} more' if left else ''})"
    where = (
        ""
        if Period.of(first.day) == period
        else f" (in the closed month {Period.of(first.day)}, which it corrects)"
    )
    raise MonthRefused(
        f"{period} cannot be {action}: day {first.day} of cluster {first.cluster}{where} is half written, "
        f"{first.describe()}{others}; meter it again with "
        f"{_rerun(config_path, first.cluster, first.day, first.day)}, then run this again",
        "half written day",
        {
            "half_written_days": [
                {"cluster": h.cluster, "day": str(h.day), "missing": [ROLLED_UP[t] for t in h.missing]}
                for h in found
            ]
        },
    )


def metered_days(warehouse: Warehouse, days: list[date]) -> list[tuple[str, date]]:
    """The (cluster, day)s among `days` metered with GPU samples: their stored pool cost has a line (a day
    metered without any sample stores none)."""
    return sorted(
        (
            paths.partition_of(path)
            for path in warehouse.day_paths(paths.MARTS, POOL_COST, days)
            if read_parquet(path).num_rows
        ),
        key=lambda key: (key[1], key[0]),
    )


def is_empty(warehouse: Warehouse, period: Period) -> bool:
    """A month with nothing to bill: none of its days metered with GPU samples."""
    return not metered_days(warehouse, period.days())


def empty_month(period: Period, config_path: str) -> str:
    """What an empty month is, and how to meter it, in one sentence."""
    return (
        f"none of the days of {period} has been metered with GPU samples, so it bills nothing; meter its days "
        f"with {_rerun(config_path, None, period.start, period.days()[-1])}"
    )


def check_not_empty(warehouse: Warehouse, period: Period, config_path: str, adjusts: bool = False) -> None:
    """Refuse to close a month none of whose days has been metered with GPU samples, unless it carries
    adjustments for a closed month (`adjusts`): an empty closed month is most often a month closed before
    its days were metered (`gpumeter close --allow-empty` closes it all the same)."""
    if adjusts or not is_empty(warehouse, period):
        return
    raise MonthRefused(
        f"{period} cannot be {CLOSED}: {empty_month(period, config_path)}, then close it; or, if it truly bills "
        f"nothing, close it empty with `gpumeter close --config {config_path} --period {period} --allow-empty`",
        "no metered day",
        {"metered_days": 0},
    )


def _money(amount: Decimal, currency: str, minor_unit: int) -> str:
    """An amount in the currency: to its minor unit, or every decimal it has when it has more (a pool cost
    is exact, not rounded: nothing named is rounded away)."""
    rounded = round_money(amount, minor_unit)
    if amount == rounded:
        return f"{rounded:,.{minor_unit}f} {currency}"
    return f"{amount.normalize():,f} {currency}"


@dataclass(frozen=True)
class DayOff:
    """A (cluster, day) whose tenants' charges do not add up to its pool cost."""

    cluster: str
    day: date
    charged: Decimal
    pool_cost: Decimal


def days_off(warehouse: Warehouse, days: list[date]) -> list[DayOff]:
    """The (cluster, day)s among `days` whose stored tenants' charges and pool cost differ."""
    sums: dict[str, dict[tuple[str, date], Decimal]] = {TENANT_CHARGES: {}, POOL_COST: {}}
    for table, column in ((TENANT_CHARGES, "amount"), (POOL_COST, "pool_cost")):
        for path in warehouse.day_paths(paths.MARTS, table, days):
            values = read_parquet(path).column(column).to_pylist()
            sums[table][paths.partition_of(path)] = sum(
                (Decimal(v) for v in values if v is not None), Decimal(0)
            )
    charged, pool = sums[TENANT_CHARGES], sums[POOL_COST]
    return [
        DayOff(c, d, charged.get((c, d), Decimal(0)), pool.get((c, d), Decimal(0)))
        for c, d in sorted(set(charged) | set(pool), key=lambda k: (k[1], k[0]))
        if charged.get((c, d), Decimal(0)) != pool.get((c, d), Decimal(0))
    ]


def check_reconciles(
    warehouse: Warehouse,
    period: Period,
    reconciliation: Reconciliation,
    currency: str,
    action: str,
    config_path: str,
) -> None:
    """Refuse the month when its lines after rounding do not reconcile with its pool cost (with adjustments)."""
    rec = reconciliation
    if rec.ok:
        return
    unit = rec.minor_unit
    if rec.within_rounding:  # the rounded totals agree, the exact ones do not: name the exact difference
        difference, how = rec.lines_unrounded - rec.pool_cost, " before rounding"
        shown = f"{difference:f} {currency}"
    else:
        difference, how = rec.lines_rounded - rec.pool_cost, ""
        shown = _money(difference, currency, unit)
    sign = "+" if difference > 0 else ""
    off = days_off(warehouse, period.days())
    if off:
        first = off[0]
        culprit = (
            f"; on day {first.day} of cluster {first.cluster} the tenants' charges are "
            f"{_money(first.charged, currency, unit)} against a pool cost of {_money(first.pool_cost, currency, unit)}"
            + (f" ({len(off) - 1} more such day(s))" if len(off) > 1 else "")
            + f": meter it again with {_rerun(config_path, first.cluster, first.day, first.day)}"
        )
    else:
        culprit = f"; meter the month's days again with {_rerun(config_path, None, period.start, period.days()[-1])}"
    raise MonthRefused(
        f"{period} cannot be {action}: it does not reconcile, the invoices total "
        f"{_money(rec.lines_rounded, currency, unit)} against a pool cost of "
        f"{_money(rec.pool_cost, currency, unit)}, a difference of {sign}{shown}{how} "
        f"(rounding allows {rec.tolerance.normalize():f} {currency}){culprit}, then run this again",
        "does not reconcile",
        {
            "invoiced_rounded": str(rec.lines_rounded),
            "invoiced_unrounded": str(rec.lines_unrounded),
            "pool_cost_with_adjustments": str(rec.pool_cost),
            "difference": str(difference),
            "tolerance": str(rec.tolerance),
            "days_off": [
                {
                    "cluster": d.cluster,
                    "day": str(d.day),
                    "charged": str(d.charged),
                    "pool_cost": str(d.pool_cost),
                }
                for d in off
            ],
        },
    )
