"""Monthly invoices from daily tenant costs (R2, R12, R14) and their CSV export (output contract)."""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pyarrow as pa

from metering.config import IDLE, UNALLOCATED, Config
from metering.warehouse import atomic_write_text

INVOICE_COLUMNS = (
    "invoice_id",
    "tenant",
    "cost_center",
    "period_start",
    "period_end",
    "charge_type",
    "gpu_model",
    "mig_profile",
    "device_hours",
    "gpu_hours",
    "unit_price",
    "amount",
    "currency",
)

INVOICE_SCHEMA = pa.schema(
    [
        ("invoice_id", pa.string()),
        ("tenant", pa.string()),
        ("cost_center", pa.string()),
        ("period_start", pa.string()),
        ("period_end", pa.string()),
        ("charge_type", pa.string()),
        ("gpu_model", pa.string()),
        ("mig_profile", pa.string()),
        ("device_hours", pa.decimal128(38, 9)),
        ("gpu_hours", pa.decimal128(38, 9)),
        ("unit_price", pa.decimal128(38, 9)),
        ("amount_unrounded", pa.decimal128(38, 12)),
        ("amount", pa.decimal128(38, 4)),
        ("currency", pa.string()),
    ]
)

_CHARGE_ORDER = {"reserved": 0, "idle_share": 1, "energy": 2, "adjustment": 3, "idle": 4}
_PERIOD = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


class InvoiceError(ValueError):
    pass


@dataclass(frozen=True)
class Period:
    """A calendar month, half-open [start, end) in UTC (R2)."""

    year: int
    month: int

    @classmethod
    def parse(cls, text: str) -> Period:
        if not _PERIOD.match(text):
            raise InvoiceError(f"period {text!r} is not YYYY-MM")
        return cls(int(text[:4]), int(text[5:7]))

    @classmethod
    def of(cls, day: date) -> Period:
        return cls(day.year, day.month)

    @property
    def start(self) -> date:
        return date(self.year, self.month, 1)

    @property
    def end(self) -> date:
        return date(self.year + (self.month == 12), self.month % 12 + 1, 1)

    def days(self) -> list[date]:
        return [date.fromordinal(o) for o in range(self.start.toordinal(), self.end.toordinal())]

    def __str__(self) -> str:
        return f"{self.year:04d}-{self.month:02d}"


def iso_utc(day: date) -> str:
    return datetime(day.year, day.month, day.day, tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def round_money(amount: Decimal, minor_unit: int) -> Decimal:
    """R12: once per invoice line, half-even, to the currency's minor unit."""
    return amount.quantize(Decimal(1).scaleb(-minor_unit), rounding=ROUND_HALF_EVEN)


def invoice_id(period: Period, tenant: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", tenant.strip("_")).strip("-").upper() or "POOL"
    return f"INV-{period}-{slug}"


def build_invoice_lines(tenant_daily_cost: pa.Table, config: Config, period: Period) -> pa.Table:
    """Roll the period's days up to invoice lines: one per (tenant, charge type, GPU model, MIG profile)."""
    sums: dict[tuple[str, str, str, str], list[Decimal]] = defaultdict(
        lambda: [Decimal(0), Decimal(0), Decimal(0)]
    )
    cost_centers: dict[str, str | None] = {}
    start, end = period.start, period.end
    for row in tenant_daily_cost.to_pylist():
        day = row["day"]
        if not start <= day < end:
            continue
        key = (row["tenant"], row["charge_type"], row["gpu_model"] or "", row["mig_profile"] or "")
        acc = sums[key]
        acc[0] += Decimal(row["device_seconds"])
        acc[1] += Decimal(row["gpu_seconds"])
        acc[2] += Decimal(row["amount"])
        if row.get("cost_center"):
            cost_centers[row["tenant"]] = row["cost_center"]
    for tenant in config.tenants:  # the config is the reference for cost centers
        if tenant.cost_center:
            cost_centers[tenant.name] = tenant.cost_center

    def order(key: tuple[str, str, str, str]) -> tuple[int, str, int, str, str]:
        tenant, charge, model, profile = key
        bucket = 2 if tenant == IDLE else 1 if tenant == UNALLOCATED else 0
        return (bucket, tenant, _CHARGE_ORDER.get(charge, 9), model, profile)

    rows = []
    hour = Decimal(3600)
    for key in sorted(sums, key=order):
        tenant, charge, model, profile = key
        device_seconds, gpu_seconds, amount = sums[key]
        gpu_hours = gpu_seconds / hour
        unit_price = (amount / gpu_hours).quantize(Decimal("1e-9")) if gpu_hours else Decimal(0)
        rows.append(
            {
                "invoice_id": invoice_id(period, tenant),
                "tenant": tenant,
                "cost_center": cost_centers.get(tenant) or "",
                "period_start": iso_utc(start),
                "period_end": iso_utc(end),
                "charge_type": charge,
                "gpu_model": model,
                "mig_profile": profile,
                "device_hours": (device_seconds / hour).quantize(Decimal("1e-9")),
                "gpu_hours": gpu_hours.quantize(Decimal("1e-9")),
                "unit_price": unit_price,
                "amount_unrounded": amount.quantize(Decimal("1e-12")),
                "amount": round_money(amount, config.minor_unit),
                "currency": config.currency,
            }
        )
    return pa.Table.from_pylist(rows, schema=INVOICE_SCHEMA)


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralize(cell: str) -> str:
    """Spreadsheet formula injection: a text cell that starts like a formula is prefixed with '."""
    return "'" + cell if cell.startswith(_FORMULA_START) else cell


def _format(value: object, minor_unit: int, column: str) -> str:
    if value is None:
        return ""
    if isinstance(value, Decimal):
        if column == "amount":
            return f"{value:.{minor_unit}f}"
        return format(value.normalize(), "f") if value else "0"
    return neutralize(str(value))


def invoice_csv(lines: pa.Table, minor_unit: int) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(INVOICE_COLUMNS)
    for row in lines.to_pylist():
        writer.writerow([_format(row[c], minor_unit, c) for c in INVOICE_COLUMNS])
    return out.getvalue()


def write_invoice_csvs(lines: pa.Table, config: Config, period: Period, out_dir: Path) -> list[Path]:
    """`invoice_lines_<period>_all.csv` (every line, __idle__ and __unallocated__ included) and one file per
    configured tenant that has lines. Each file is written atomically."""
    out_dir = Path(out_dir)
    written = [
        atomic_write_text(out_dir / f"invoice_lines_{period}_all.csv", invoice_csv(lines, config.minor_unit))
    ]
    tenants = [t for t in dict.fromkeys(lines.column("tenant").to_pylist()) if t not in (IDLE, UNALLOCATED)]
    for tenant in tenants:
        mask = [t == tenant for t in lines.column("tenant").to_pylist()]
        tenant_lines = lines.filter(pa.array(mask))
        written.append(
            atomic_write_text(
                out_dir / f"invoice_lines_{period}_{tenant}.csv", invoice_csv(tenant_lines, config.minor_unit)
            )
        )
    return written


@dataclass(frozen=True)
class Reconciliation:
    """R13 after rounding: the invoice lines against the pool cost of the same days."""

    pool_cost: Decimal
    lines_unrounded: Decimal
    lines_rounded: Decimal
    line_count: int
    minor_unit: int

    @property
    def exact(self) -> bool:
        return self.lines_unrounded == self.pool_cost

    @property
    def within_rounding(self) -> bool:
        tolerance = Decimal(1).scaleb(-self.minor_unit) / 2 * max(self.line_count, 1)
        return abs(self.lines_rounded - self.pool_cost) <= tolerance

    @property
    def ok(self) -> bool:
        return self.exact and self.within_rounding


def reconcile(lines: pa.Table, pool_daily_cost: pa.Table, period: Period, minor_unit: int) -> Reconciliation:
    pool = sum(
        (
            Decimal(r["pool_cost"])
            for r in pool_daily_cost.to_pylist()
            if period.start <= r["day"] < period.end
        ),
        Decimal(0),
    )
    unrounded = sum((Decimal(v) for v in lines.column("amount_unrounded").to_pylist()), Decimal(0))
    rounded = sum((Decimal(v) for v in lines.column("amount").to_pylist()), Decimal(0))
    return Reconciliation(pool, unrounded, rounded, lines.num_rows, minor_unit)
