"""The invoice lifecycle of a period (R14, R16): draft roll-up, close, reopen, adjustments, audit log.

Layout under the warehouse root (docs/billing.md):

    marts/invoice_lines/period=<P>/data.parquet   the period's lines (draft; frozen once closed)
    exports/<P>/                                  CSV, FOCUS and HTML exports of those lines
    periods/<P>/manifest.json                     present = closed: content hash, totals, file hashes
    periods/<P>/invoice_lines.parquet             the closed lines, as closed (the base of adjustments)
    periods/<P>/reopened-<when>.json              a former manifest, kept when the period was reopened
    periods/audit.jsonl                           every close and reopen, appended and fsync'd, never rewritten

A closed period's files are never written again (R16). Late data for it is billed in the next open period
as `adjustment` lines, per (tenant, charge type, GPU model, MIG profile): (current recomputation of the
closed period's line, rounded) − (what was billed for it: its closed line + adjustments for it already
billed in other periods), so that a tenant pays in total what the corrected line rounds to (R12).
"""

from __future__ import annotations

import getpass
import hashlib
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from metering.config import Config
from metering.invoices import (
    ADJUSTMENT,
    INVOICE_SCHEMA,
    InvoiceError,
    LineKey,
    LineSums,
    Period,
    billed_tenants,
    build_invoice_lines,
    invoice_csv,
    lines_table,
    make_lines,
    round_money,
    write_invoice_csvs,
)
from metering.warehouse import (
    MARTS,
    Warehouse,
    append_line,
    atomic_write_parquet,
    atomic_write_text,
    move,
    read_parquet,
)

AUDIT_LOG = "audit.jsonl"
FOCUS_SUFFIX = ".focus.csv"


class PeriodError(InvoiceError):
    """A lifecycle request that cannot be honoured, with what to do instead."""


# --- paths ---------------------------------------------------------------------------------------


def invoice_lines_path(warehouse: Warehouse, period: str) -> Path:
    return warehouse.period_path(MARTS, "invoice_lines", period)


def exports_dir(warehouse: Warehouse, period: str) -> Path:
    return warehouse.exports_dir(period)


def period_dir(warehouse: Warehouse, period: str) -> Path:
    return warehouse.periods_dir() / period


def manifest_path(warehouse: Warehouse, period: str) -> Path:
    return period_dir(warehouse, period) / "manifest.json"


def closed_lines_path(warehouse: Warehouse, period: str) -> Path:
    return period_dir(warehouse, period) / "invoice_lines.parquet"


def audit_log_path(warehouse: Warehouse) -> Path:
    return warehouse.periods_dir() / AUDIT_LOG


def focus_path(out_dir: Path, period: Period | str) -> Path:
    # Sorts after the contract's `invoice_lines_<P>_all.csv`, which readers list first.
    return out_dir / f"invoice_lines_{period}_all{FOCUS_SUFFIX}"


def document_path(out_dir: Path, period: Period | str, tenant: str) -> Path:
    return out_dir / f"tenant_invoice_{period}_{tenant}.html"


# --- state ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Status:
    """What an export says about its lines: closed (immutable, with the hash of record) or draft."""

    period: str
    closed: bool
    content_hash: str
    closed_at: str | None = None
    closed_by: str | None = None


def content_hash(lines: pa.Table, minor_unit: int) -> str:
    """sha256 of the canonical all-tenants invoice-lines CSV (R16)."""
    return hashlib.sha256(invoice_csv(lines, minor_unit).encode("utf-8")).hexdigest()


def read_manifest(warehouse: Warehouse, period: str) -> dict | None:
    path = manifest_path(warehouse, period)
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PeriodError(
            f"{path}: unreadable manifest of closed period {period} ({exc}); restore it from backup — "
            "the period stays closed and nothing is rolled up over it"
        ) from None


def is_closed(warehouse: Warehouse, period: str) -> bool:
    return manifest_path(warehouse, period).exists()


def closed_periods(warehouse: Warehouse) -> list[str]:
    base = warehouse.periods_dir()
    if not base.is_dir():
        return []
    return sorted(p.parent.name for p in base.glob("*/manifest.json"))


def status_of(warehouse: Warehouse, period: str, lines: pa.Table, minor_unit: int) -> Status:
    manifest = read_manifest(warehouse, period)
    if manifest:
        return Status(
            period, True, manifest["content_hash"], manifest["closed_at"], manifest.get("closed_by")
        )
    return Status(period, False, content_hash(lines, minor_unit))


def read_lines(path: Path) -> pa.Table:
    table = read_parquet(path)
    # Lines stored before adjustments existed lack the trailing columns: they are usage lines.
    for field in INVOICE_SCHEMA:
        if field.name not in table.column_names:
            table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    return table.select(INVOICE_SCHEMA.names).cast(INVOICE_SCHEMA)


def stored_lines(warehouse: Warehouse, period: str) -> pa.Table | None:
    """The period's lines of record: the closed copy when closed, else the draft roll-up."""
    path = closed_lines_path(warehouse, period) if is_closed(warehouse, period) else None
    path = path or invoice_lines_path(warehouse, period)
    return read_lines(path) if path.exists() else None


# --- audit log -----------------------------------------------------------------------------------


def append_audit(warehouse: Warehouse, event: dict) -> None:
    """One JSON line per lifecycle event, appended and made durable; earlier lines are never changed."""
    append_line(audit_log_path(warehouse), json.dumps(event, sort_keys=True, ensure_ascii=False) + "\n")


def read_audit(warehouse: Warehouse) -> list[dict]:
    path = audit_log_path(warehouse)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _who(by: str | None) -> str:
    if by:
        return by
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        return "unknown"


# --- adjustments (R16) ---------------------------------------------------------------------------


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


# --- exports -------------------------------------------------------------------------------------


def write_csv_exports(lines: pa.Table, config: Config, period: Period, out_dir: Path) -> list[Path]:
    return write_invoice_csvs(lines, config, period, out_dir)


def write_focus_export(lines: pa.Table, config: Config, period: Period, out_dir: Path) -> list[Path]:
    from metering.focus import focus_csv

    return [atomic_write_text(focus_path(out_dir, period), focus_csv(lines, config, period))]


def write_documents(
    lines: pa.Table, config: Config, period: Period, out_dir: Path, status: Status
) -> list[Path]:
    from metering.invoice_document import render_invoice

    written = []
    for tenant in billed_tenants(lines):
        html = render_invoice(lines, config, period, tenant, status)
        written.append(atomic_write_text(document_path(out_dir, period, tenant), html))
    return written


def write_exports(
    lines: pa.Table, config: Config, period: Period, out_dir: Path, status: Status
) -> list[Path]:
    return [
        *write_csv_exports(lines, config, period, out_dir),
        *write_focus_export(lines, config, period, out_dir),
        *write_documents(lines, config, period, out_dir, status),
    ]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- close / reopen ------------------------------------------------------------------------------


def close_period(
    config: Config,
    warehouse: Warehouse,
    period: Period,
    *,
    by: str | None = None,
    reason: str | None = None,
    now: str | None = None,
) -> dict:
    """Freeze the period's stored lines (R16): exports with status closed, the closed copy of the lines, the
    manifest (written last: it is what makes the period closed) and an audit line."""
    key = str(period)
    manifest = read_manifest(warehouse, key)
    if manifest:
        raise PeriodError(
            f"period {key} is already closed (at {manifest['closed_at']}, hash {manifest['content_hash'][:12]}…); "
            f'to change it run `gpumeter reopen --period {key} --reason "…"` first'
        )
    draft = invoice_lines_path(warehouse, key)
    if not draft.exists():
        raise PeriodError(
            f"no invoice lines stored for {key} ({draft}): meter its days and run "
            f"`gpumeter invoices --period {key}` before closing it"
        )
    lines = read_lines(draft)
    digest = content_hash(lines, config.minor_unit)
    closed_at = now or _now()
    who = _who(by)
    status = Status(key, True, digest, closed_at, who)
    out = exports_dir(warehouse, key)
    files = write_exports(lines, config, period, out, status)
    atomic_write_parquet(closed_lines_path(warehouse, key), lines)
    amounts = lines.column("amount").to_pylist()
    manifest = {
        "period": key,
        "status": "closed",
        "closed_at": closed_at,
        "closed_by": who,
        "reason": reason,
        "content_hash": digest,
        "line_count": lines.num_rows,
        "currency": config.currency,
        "total": str(round_money(sum(amounts, Decimal(0)), config.minor_unit)),
        "total_unrounded": str(
            sum((Decimal(v) for v in lines.column("amount_unrounded").to_pylist()), Decimal(0))
        ),
        "invoice_ids": sorted(set(lines.column("invoice_id").to_pylist())),
        "files": {p.name: _sha256(p) for p in sorted(files)},
    }
    atomic_write_text(manifest_path(warehouse, key), json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    append_audit(
        warehouse,
        {
            "event": "close",
            "period": key,
            "at": closed_at,
            "by": who,
            "reason": reason,
            "content_hash": digest,
            "line_count": lines.num_rows,
            "total": manifest["total"],
        },
    )
    return manifest


def reopen_period(
    warehouse: Warehouse,
    period: Period,
    *,
    reason: str,
    by: str | None = None,
    now: str | None = None,
) -> dict:
    """Make a closed period a draft again. Needs a reason; refused while a later closed period carries
    adjustments for it (they would be billed twice): reopen that one first."""
    key = str(period)
    if not reason or not reason.strip():
        raise PeriodError(f'reopening {key} needs a reason: `gpumeter reopen --period {key} --reason "…"`')
    manifest = read_manifest(warehouse, key)
    if not manifest:
        raise PeriodError(f"period {key} is not closed; nothing to reopen")
    for later in closed_periods(warehouse):
        if later > key and any(
            r["corrects_period"] == key for r in read_lines(closed_lines_path(warehouse, later)).to_pylist()
        ):
            raise PeriodError(
                f"closed period {later} carries adjustments for {key}; reopen {later} first, "
                "or bill further corrections as adjustments instead"
            )
    at = now or _now()
    who = _who(by)
    folder = period_dir(warehouse, key)
    stamp = at.replace(":", "")
    # The former manifest and closed lines are kept beside, renamed: nothing recorded is lost.
    # The manifest goes first: it is what makes the period closed.
    move(manifest_path(warehouse, key), folder / f"reopened-{stamp}.manifest.json")
    move(closed_lines_path(warehouse, key), folder / f"reopened-{stamp}.invoice_lines.parquet")
    event = {
        "event": "reopen",
        "period": key,
        "at": at,
        "by": who,
        "reason": reason.strip(),
        "content_hash": manifest["content_hash"],
    }
    append_audit(warehouse, event)
    return event


def verify_closed(warehouse: Warehouse, period: str) -> list[str]:
    """Files of a closed period that differ from its manifest (empty when all are byte-identical)."""
    manifest = read_manifest(warehouse, period)
    if not manifest:
        return []
    out = exports_dir(warehouse, period)
    return [
        name
        for name, digest in manifest["files"].items()
        if not (out / name).exists() or _sha256(out / name) != digest
    ]
