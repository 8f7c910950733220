"""Monthly invoices from daily tenant costs (R2, R12, R14) and their CSV export (output contract)."""

from __future__ import annotations

import csv
import hashlib
import io
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpumeter.config import IDLE, UNALLOCATED, Config, tenant_slug

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
# R16: adjustment lines name what they correct. Trailing columns, so that the contract's 13 columns keep
# their order and position; empty on usage lines (docs/billing.md).
ADJUSTMENT_COLUMNS = ("corrects_period", "corrects_charge_type")
CSV_COLUMNS = INVOICE_COLUMNS + ADJUSTMENT_COLUMNS
ADJUSTMENT = "adjustment"
ENERGY = "energy"  # the charge type billed by the kWh, not by the GPU-hour

# The charge types of invoice lines in the words an invoice, a FOCUS description and a page say them in: one
# mapping, for a line's own type and for the type an adjustment corrects. A type not listed is shown as stored.
CHARGE_WORDS = {
    "reserved": "GPU time reserved",
    "usage": "GPU time used",
    "idle": "Idle capacity",
    "idle_share": "Share of idle capacity",
    ENERGY: "Energy",
    ADJUSTMENT: "Correction to a closed month",
}


def charge_words(charge_type: str | None) -> str:
    """A charge type as the invoice says it: `reserved` is "GPU time reserved"."""
    return CHARGE_WORDS.get(charge_type or "", charge_type or "")


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
        ("busy_gpu_hours", pa.decimal128(38, 9)),  # R10, for efficiency on exports
        ("energy_kwh", pa.decimal128(38, 9)),  # R10, the priced quantity of `energy` lines
        ("corrects_period", pa.string()),  # R16: the closed period an adjustment line corrects
        ("corrects_charge_type", pa.string()),  # ... and the charge type it corrects
    ]
)

_CHARGE_ORDER = {"reserved": 0, "usage": 1, "idle_share": 2, "energy": 3, "adjustment": 4, "idle": 5}
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


def round_money(amount: Decimal | Fraction, minor_unit: int) -> Decimal:
    """R12: once per invoice line, half-even, to the currency's minor unit; an exact Fraction is rounded
    from its exact value (Python rounds a Fraction half to even)."""
    if isinstance(amount, Fraction):
        return Decimal(round(amount * 10**minor_unit)).scaleb(-minor_unit)
    return amount.quantize(Decimal(1).scaleb(-minor_unit), rounding=ROUND_HALF_EVEN)


def invoiced_by_tenant(
    lines: Iterable[tuple[str, int | None, int | None, Decimal]], minor_unit: int
) -> dict[str, Decimal]:
    """What each tenant's invoice says: its lines, each given as (tenant, Σ amount_units, units per currency,
    Σ amount) of one (period, tenant, charge type, GPU model, MIG profile), rounded once (R12) and summed.
    Every figure of a tenant's charges (dashboard, CLI, downloads) is this one, so none differs from the
    invoice by a cent."""
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for tenant, units, per, amount in lines:
        exact = Fraction(int(units), int(per)) if units is not None and per else None
        totals[tenant] += round_money(Decimal(amount) if exact is None else exact, minor_unit)
    return dict(totals)


def line_sums_sql(where: str, source: str = "tenant_daily_cost") -> str:
    """SQL summing the tenant_daily_cost rows (or `source`'s, of the same columns) that match `where` per
    invoice line (month, tenant, charge type, GPU model, MIG profile): rows of (period, tenant, Σ amount_units,
    units per currency, Σ amount), whose last four columns are what invoiced_by_tenant takes."""
    return f"""
        select strftime(day, '%Y-%m') as period, tenant, sum(amount_units) as units,
               max(units_per_currency) as per, sum(amount) as amount
        from {source} where {where}
        group by period, tenant, charge_type, gpu_model, mig_profile
    """


# The columns of tenant_daily_cost that key an invoice line and hold its exact money.
LINE_COLUMNS = ("charge_type", "gpu_model", "mig_profile", "amount_units", "units_per_currency")


def invoiced_from_rows(rows: Iterable[Mapping[str, Any]], minor_unit: int) -> dict[str, Decimal]:
    """invoiced_by_tenant of tenant_daily_cost rows (with LINE_COLUMNS): grouped into their invoice lines, per
    month, tenant, charge type, GPU model and MIG profile."""
    lines: dict[tuple, list] = {}
    for row in rows:
        key = (
            row["day"].strftime("%Y-%m"),
            row["tenant"],
            row["charge_type"],
            row["gpu_model"],
            row["mig_profile"],
        )
        acc = lines.setdefault(key, [0, None, Decimal(0)])
        acc[0] += int(row["amount_units"] or 0)
        acc[1] = acc[1] or row["units_per_currency"]
        acc[2] += Decimal(row["amount"])
    return invoiced_by_tenant(((k[1], u, p, a) for k, (u, p, a) in lines.items()), minor_unit)


_PLAIN_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


def invoice_id(period: Period, tenant: str) -> str:
    """One id per tenant and period, never shared (R14), read from the exact tenant name alone, so that it is
    stable across runs and configs:

    - a plain name (lowercase letters, digits, single hyphens) is its capitals: `ml-training` ->
      `INV-2026-11-ML-TRAINING` (lowercasing it gives the name back, so no two plain names share one);
    - any other name is its slug, `--` and 8 hex digits of the SHA-256 of the exact name:
      `team.a` -> `INV-2026-11-TEAM-A--…`. A slug never holds `--`, so no plain name's id looks like it;
    - the buckets are their own names, `INV-2026-11-__IDLE__`: no tenant's id holds `_`.
    """
    if tenant in (IDLE, UNALLOCATED):
        return f"INV-{period}-{tenant.upper()}"
    if _PLAIN_NAME.fullmatch(tenant):
        return f"INV-{period}-{tenant.upper()}"
    digest = hashlib.sha256(tenant.encode("utf-8")).hexdigest()[:8].upper()
    return f"INV-{period}-{tenant_slug(tenant) or 'TENANT'}--{digest}"


LineKey = tuple[str, str, str, str]  # (tenant, charge type, GPU model, MIG profile)


@dataclass
class LineSums:
    """Exact sums behind one invoice line (R1: decimal, order-independent)."""

    device_hours: Decimal = Decimal(0)
    gpu_hours: Decimal = Decimal(0)
    busy_gpu_hours: Decimal = Decimal(0)
    energy_kwh: Decimal = Decimal(0)
    amount: Decimal = Decimal(0)
    # The exact amount (units of money / units per currency, summed over the days, R12), where the marts
    # carry it: the line is rounded from it, not from the 12-place decimals `amount` sums.
    exact: Fraction | None = None
    # What the line bills, when that is not `amount` rounded: an adjustment bills the corrected line rounded
    # minus what was billed (R12), while `amount` is the exact change (docs/billing.md, "Adjustments").
    billed: Decimal | None = None


def cost_centers_of(config: Config) -> dict[str, str]:
    """The config is the reference for cost centers."""
    return {t.name: t.cost_center for t in config.tenants if t.cost_center}


def line_order(row: dict) -> tuple:
    """Tenants by name, then __unallocated__, then __idle__; usage before adjustments (R14)."""
    tenant = row["tenant"]
    bucket = 2 if tenant == IDLE else 1 if tenant == UNALLOCATED else 0
    return (
        bucket,
        tenant,
        _CHARGE_ORDER.get(row["charge_type"], 9),
        row.get("corrects_period") or "",
        _CHARGE_ORDER.get(row.get("corrects_charge_type") or "", 9),
        row["gpu_model"],
        row["mig_profile"],
    )


def make_lines(
    sums: dict[LineKey, LineSums],
    config: Config,
    period: Period,
    cost_centers: dict[str, str] | None = None,
    corrects: Period | None = None,
) -> list[dict]:
    """Invoice line rows of `period` from exact sums. With `corrects`, they are `adjustment` lines of that
    closed period (R16): the key's charge type becomes `corrects_charge_type`."""
    centers = {**(cost_centers or {}), **cost_centers_of(config)}
    rows = []
    for (tenant, charge, model, profile), acc in sums.items():
        unit_price = (acc.amount / acc.gpu_hours).quantize(Decimal("1e-9")) if acc.gpu_hours else Decimal(0)
        rows.append(
            {
                "invoice_id": invoice_id(period, tenant),
                "tenant": tenant,
                "cost_center": centers.get(tenant) or "",
                "period_start": iso_utc(period.start),
                "period_end": iso_utc(period.end),
                "charge_type": ADJUSTMENT if corrects else charge,
                "gpu_model": model,
                "mig_profile": profile,
                "device_hours": acc.device_hours.quantize(Decimal("1e-9")),
                "gpu_hours": acc.gpu_hours.quantize(Decimal("1e-9")),
                "unit_price": unit_price,
                "amount_unrounded": acc.amount.quantize(Decimal("1e-12")),
                "amount": round_money(
                    acc.amount if acc.exact is None else acc.exact, config.minor_unit
                )  # R12
                if acc.billed is None
                else round_money(acc.billed, config.minor_unit),  # already in minor units: no rounding
                "currency": config.currency,
                "busy_gpu_hours": acc.busy_gpu_hours.quantize(Decimal("1e-9")),
                "energy_kwh": acc.energy_kwh.quantize(Decimal("1e-9")),
                "corrects_period": str(corrects) if corrects else None,
                "corrects_charge_type": charge if corrects else None,
            }
        )
    return rows


def lines_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(sorted(rows, key=line_order), schema=INVOICE_SCHEMA)


def build_invoice_lines(tenant_daily_cost: pa.Table, config: Config, period: Period) -> pa.Table:
    """Roll the period's days up to invoice lines: one per (tenant, charge type, GPU model, MIG profile)."""
    seconds: dict[LineKey, list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 5)
    exact: dict[LineKey, Fraction] = defaultdict(Fraction)
    cost_centers: dict[str, str] = {}
    start, end = period.start, period.end
    for row in tenant_daily_cost.to_pylist():
        if not start <= row["day"] < end:
            continue
        key = (row["tenant"], row["charge_type"], row["gpu_model"] or "", row["mig_profile"] or "")
        acc = seconds[key]
        if row.get("units_per_currency"):
            exact[key] += Fraction(int(row["amount_units"]), int(row["units_per_currency"]))
        acc[0] += Decimal(row["device_seconds"])
        acc[1] += Decimal(row["gpu_seconds"])
        acc[2] += Decimal(row.get("busy_gpu_seconds") or 0)
        acc[3] += Decimal(row["amount"])
        acc[4] += Decimal(row.get("energy_joules") or 0)
        if row.get("cost_center"):
            cost_centers[row["tenant"]] = row["cost_center"]
    hour = Decimal(3600)  # sums in seconds are exact; hours are derived once per line
    kwh = Decimal(3_600_000)  # joules per kWh
    sums = {
        key: LineSums(
            device_hours=d / hour,
            gpu_hours=g / hour,
            busy_gpu_hours=b / hour,
            energy_kwh=joules / kwh,
            amount=amount,
            exact=exact.get(key),
        )
        for key, (d, g, b, amount, joules) in seconds.items()
    }
    return lines_table(make_lines(sums, config, period, cost_centers))


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


def csv_text(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Every CSV gpumeter writes (invoice lines, FOCUS, dashboard downloads): `\n` line ends, cells already
    neutralized by the caller. Python 3.11's csv quotes a cell holding `\n` but not one holding a bare `\r`
    (it is not in the line terminator), which a spreadsheet takes as a line break: such a row is written
    with every cell quoted, which any CSV reader parses to the same values."""
    out = io.StringIO()
    minimal = csv.writer(out, lineterminator="\n")
    quoted = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)
    minimal.writerow(header)
    for row in rows:
        (quoted if any("\r" in cell for cell in row) else minimal).writerow(row)
    return out.getvalue()


def invoice_csv(lines: pa.Table, minor_unit: int) -> str:
    return csv_text(
        CSV_COLUMNS, ([_format(row[c], minor_unit, c) for c in CSV_COLUMNS] for row in lines.to_pylist())
    )


def billed_tenants(lines: pa.Table) -> list[str]:
    """Tenants that get an invoice of their own: every one with lines, the buckets excepted (R7, R9)."""
    return [t for t in dict.fromkeys(lines.column("tenant").to_pylist()) if t not in (IDLE, UNALLOCATED)]


def tenant_lines(lines: pa.Table, tenant: str) -> pa.Table:
    return lines.filter(pc.equal(lines.column("tenant"), tenant))


@dataclass(frozen=True)
class Reconciliation:
    """R13 after rounding: the invoice lines against the pool cost of the same days (plus, for a period
    carrying adjustments, the change in pool cost of the closed periods they correct: R16)."""

    pool_cost: Decimal
    lines_unrounded: Decimal
    lines_rounded: Decimal
    line_count: int
    minor_unit: int
    # Roundings the rounded total carries: one per usage line, two per adjustment line, which moves a tenant
    # from what was billed (rounded then) to the corrected line (rounded now): R12.
    roundings: int | None = None

    @property
    def exact(self) -> bool:
        return self.lines_unrounded == self.pool_cost

    @property
    def tolerance(self) -> Decimal:
        """Half a minor unit per rounding (R13 after rounding)."""
        count = self.line_count if self.roundings is None else self.roundings
        return Decimal(1).scaleb(-self.minor_unit) / 2 * max(count, 1)

    @property
    def within_rounding(self) -> bool:
        return abs(self.lines_rounded - self.pool_cost) <= self.tolerance

    @property
    def ok(self) -> bool:
        return self.exact and self.within_rounding


def reconcile(
    lines: pa.Table,
    pool_daily_cost: pa.Table,
    period: Period,
    minor_unit: int,
    corrections: Decimal = Decimal(0),
) -> Reconciliation:
    pool = corrections + sum(
        (
            Decimal(r["pool_cost"])
            for r in pool_daily_cost.to_pylist()
            if period.start <= r["day"] < period.end
        ),
        Decimal(0),
    )
    unrounded = sum((Decimal(v) for v in lines.column("amount_unrounded").to_pylist()), Decimal(0))
    rounded = sum((Decimal(v) for v in lines.column("amount").to_pylist()), Decimal(0))
    adjustments = sum(1 for v in lines.column("charge_type").to_pylist() if v == ADJUSTMENT)
    return Reconciliation(pool, unrounded, rounded, lines.num_rows, minor_unit, lines.num_rows + adjustments)
