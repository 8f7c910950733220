"""The lifecycle of a period (R14, R16): its state (draft or closed), close, reopen and the audit log.

A closed period's files are never written again (R16): its manifest records the content hash of its lines
and the hash of every export file, and its lines are kept as closed (the base of adjustments,
gpumeter.billing.adjustments). Every close and reopen is appended to the audit log. The files' names and
folders are gpumeter.storage.paths'.
"""

from __future__ import annotations

import hashlib
import json
from datetime import date
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from gpumeter.billing.exports import published, write_exports
from gpumeter.billing.invoices import INVOICE_SCHEMA, InvoiceError, Period, round_money
from gpumeter.billing.refusals import check_not_empty, is_empty
from gpumeter.billing.status import Status, content_hash
from gpumeter.config import Config
from gpumeter.storage import audit, paths
from gpumeter.storage.audit import append_audit
from gpumeter.storage.files import atomic_write_parquet, atomic_write_text, move, read_parquet
from gpumeter.storage.warehouse import Warehouse


class PeriodError(InvoiceError):
    """A lifecycle request that cannot be honoured, with what to do instead."""


# --- where a period's files are ------------------------------------------------------------------


def invoice_lines_path(warehouse: Warehouse, period: str) -> Path:
    return warehouse.period_path(paths.MARTS, paths.INVOICE_LINES, period)


def exports_dir(warehouse: Warehouse, period: str) -> Path:
    return warehouse.exports_dir(period)


def published_exports(warehouse: Warehouse, period: str) -> Path:
    """Where readers find the month's current set of exports (gpumeter.billing.exports.published)."""
    return published(exports_dir(warehouse, period))


def period_dir(warehouse: Warehouse, period: str) -> Path:
    return warehouse.periods_dir() / period


def manifest_path(warehouse: Warehouse, period: str) -> Path:
    return period_dir(warehouse, period) / paths.MANIFEST


def closed_lines_path(warehouse: Warehouse, period: str) -> Path:
    return period_dir(warehouse, period) / paths.CLOSED_LINES


# --- state ---------------------------------------------------------------------------------------


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
    return sorted(p.parent.name for p in base.glob(f"*/{paths.MANIFEST}"))


def metered_days(warehouse: Warehouse, period: str) -> tuple[date, ...]:
    """The days of the period with stored charges (any cluster)."""
    days = set(Period.parse(period).days())
    return tuple(sorted({d for _, d in warehouse.days(paths.MARTS, paths.TENANT_DAILY_COST) if d in days}))


def status_of(warehouse: Warehouse, period: str, lines: pa.Table, minor_unit: int) -> Status:
    manifest = read_manifest(warehouse, period)
    metered = metered_days(warehouse, period)
    if manifest:
        return Status(
            period, True, manifest["content_hash"], manifest["closed_at"], manifest.get("closed_by"), metered
        )
    return Status(period, False, content_hash(lines, minor_unit), metered_days=metered)


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
    refuse_empty: bool = False,
    config_path: str = "F",
) -> dict:
    """Freeze the period's stored lines (R16): exports with status closed, the closed copy of the lines, the
    manifest (written last: it is what makes the period closed) and an audit line. With `refuse_empty` (what
    `gpumeter close` asks without --allow-empty), a month none of whose days was metered with GPU samples and
    that carries no adjustment is refused; the audit line says when a month was closed empty. `config_path`
    is named in the commands a refusal suggests."""
    key = str(period)
    manifest = read_manifest(warehouse, key)
    if manifest:
        raise PeriodError(
            f"period {key} is already closed (at {manifest['closed_at']}, hash {manifest['content_hash'][:12]}…); "
            f'to change it run `gpumeter reopen --period {key} --reason "…" --config {config_path}` first'
        )
    draft = invoice_lines_path(warehouse, key)
    if not draft.exists():
        raise PeriodError(
            f"no invoice lines stored for {key} ({draft}): meter its days and run "
            f"`gpumeter invoices --period {key} --config {config_path} --out invoices-{key}` before closing it"
        )
    lines = read_lines(draft)
    adjusts = any(lines.column("corrects_period").to_pylist())
    if refuse_empty:
        check_not_empty(warehouse, period, config_path, adjusts)
    empty = not adjusts and is_empty(warehouse, period)
    digest = content_hash(lines, config.minor_unit)
    closed_at = now or audit.now()
    who = audit.who(by)
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
            **({"empty": True} if empty else {}),  # closed with --allow-empty: no day of it was metered
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
    config_path: str = "F",
) -> dict:
    """Make a closed period a draft again. Needs a reason; refused while a later closed period carries
    adjustments for it (they would be billed twice): reopen that one first."""
    key = str(period)
    if not reason or not reason.strip():
        raise PeriodError(
            f'reopening {key} needs a reason: `gpumeter reopen --period {key} --reason "…" --config {config_path}`'
        )
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
    at = now or audit.now()
    who = audit.who(by)
    folder = period_dir(warehouse, key)
    stamp = at.replace(":", "")
    # The former manifest and closed lines are kept beside, renamed: nothing recorded is lost.
    # The manifest goes first: it is what makes the period closed.
    move(manifest_path(warehouse, key), folder / paths.reopened_manifest(stamp))
    move(closed_lines_path(warehouse, key), folder / paths.reopened_lines(stamp))
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
    out = published_exports(warehouse, period)
    return [
        name
        for name, digest in manifest["files"].items()
        if not (out / name).exists() or _sha256(out / name) != digest
    ]
