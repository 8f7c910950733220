"""Every export of a period's invoice lines, in one registry: each kind writes its files into the period's
exports folder (file names: gpumeter.storage.paths), and write_exports publishes all kinds as one set
(below). A kind is added here and nowhere else: the invoice assets, `gpumeter invoices` and closing a period
all write what this registry lists.

The documents kind writes each tenant's invoice twice, as HTML and as PDF, in one writer: the PDF is
another form of the same document, rendered from the same template and figures in the same call, so no
run can write the one without the other, and one asset (invoice_documents) reports both."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from gpumeter.billing.documents import render_invoice, render_invoice_pdf
from gpumeter.billing.focus import focus_csv
from gpumeter.billing.invoices import Period, billed_tenants, invoice_csv, tenant_lines
from gpumeter.billing.status import Status
from gpumeter.config import Config
from gpumeter.storage import locks, paths
from gpumeter.storage.files import atomic_write_bytes, atomic_write_text, fsync_folder

# (the period's lines, config, period, exports folder, status of the lines) -> the files written
Writer = Callable[[pa.Table, Config, Period, Path, Status], list[Path]]


def write_invoice_csvs(
    lines: pa.Table, config: Config, period: Period, out_dir: Path, _: Status
) -> list[Path]:
    """The invoice-lines CSV of the output contract: every line (__idle__ and __unallocated__ included), and
    one file per tenant that has lines. Each file is written atomically (`out_dir` may be on an object store)."""
    written = [
        atomic_write_text(out_dir / paths.invoice_csv_name(period), invoice_csv(lines, config.minor_unit))
    ]
    for tenant in billed_tenants(lines):
        text = invoice_csv(tenant_lines(lines, tenant), config.minor_unit)
        written.append(atomic_write_text(out_dir / paths.invoice_csv_name(period, tenant), text))
    return written


def write_focus(lines: pa.Table, config: Config, period: Period, out_dir: Path, status: Status) -> list[Path]:
    """The same lines as FOCUS (config focus_version, gpumeter.billing.focus); InvoiceId is set once the period is closed."""
    text = focus_csv(lines, config, period, closed=status.closed)
    return [atomic_write_text(out_dir / paths.focus_csv_name(period), text)]


def write_documents(
    lines: pa.Table, config: Config, period: Period, out_dir: Path, status: Status
) -> list[Path]:
    """Per tenant that has lines: its self-contained HTML invoice, and the same invoice as PDF beside it."""
    written = []
    for tenant in billed_tenants(lines):
        written.append(
            atomic_write_text(
                out_dir / paths.invoice_document_name(period, tenant),
                render_invoice(lines, config, period, tenant, status),
            )
        )
        written.append(
            atomic_write_bytes(
                out_dir / paths.invoice_document_name(period, tenant, ".pdf"),
                render_invoice_pdf(lines, config, period, tenant, status),
            )
        )
    return written


@dataclass(frozen=True)
class Export:
    """One kind of export: its writer, and the Dagster asset that writes it (gpumeter.pipelines.billing_assets
    makes one asset per kind from these fields)."""

    kind: str
    write: Writer
    asset: str
    description: str
    file_kinds: tuple[str, ...]  # what the asset shows it writes (Dagster `kinds`)
    after: tuple[str, ...] = ()  # kinds whose asset must succeed first (its blocking check gates this one)


EXPORTS: dict[str, Export] = {
    export.kind: export
    for export in (
        Export(
            "csv",
            write_invoice_csvs,
            "invoice_csv",
            "Invoice-lines CSV of the output contract: all tenants (with __idle__ and __unallocated__) and one "
            "file per tenant.",
            ("csv",),
        ),
        Export(
            "focus",
            write_focus,
            "invoice_focus",
            "FOCUS CSV of the same lines, 1.2 or 1.3 by config focus_version (docs/billing.md: the mapping).",
            ("csv",),
            after=("csv",),
        ),
        Export(
            "documents",
            write_documents,
            "invoice_documents",
            "Per tenant, one self-contained HTML invoice and the same invoice as PDF (A4, the document finance "
            "sends): lines, adjustments, totals, hash and status.",
            ("html", "pdf"),
        ),
    )
}


# --- a month's exports are one set ------------------------------------------------------------------
#
# Every kind of a month's exports is written into a fresh staged folder beside the month's folder
# (`exports/.<P>.staged-<pid>-<id>/`), and only when every writer is done does the staged folder replace the
# month's folder: the old folder is renamed away (`exports/.<P>.old-<pid>-<id>/`), the staged one renamed in,
# the old one removed. A reader sees the previous set or the new one, never a mix, and the new set holds only
# the files of this run: a tenant no longer billed has no file left in it.
#
# The invoice assets write one kind per Dagster step (csv, then focus; documents), and a blocking check of a
# step keeps the later ones from running. A step that writes some kinds keeps the other kinds' files of the
# current set only when that set was written from the same lines, status and config (the set's record
# `exports/.<P>.set.json`, removed before a swap and written after it); a set of other figures is replaced
# whole, by one that holds this step's kinds only until the month's other steps add theirs. So the folder
# never holds files of two runs' figures side by side, whichever step ran last or died; `gpumeter close`
# and a write of every kind replace the whole set in one swap.
#
# A run killed while writing leaves at most a staged folder, or (killed between the two renames) the old
# folder renamed away: the next write of the month, holding the month's exports lock, removes the former
# and puts the latter back before it starts.
#
# An object store has no rename. There each set is a folder of its own inside the month's folder
# (`exports/<P>/set-<id>/`), and the set's record names it: the record is one PUT, so writing it switches
# readers (`published`) from the previous set to the new one at once; then every other object of the month's
# folder is deleted. A run killed before the record leaves a set folder no record names, deleted by the
# next write.


def _set_key(lines: pa.Table, config: Config, period: Period, status: Status) -> str:
    """What a set's figures are written from: the lines, their status and the config (its warehouse aside:
    the same month written to another warehouse is the same set)."""
    digest = hashlib.sha256()
    digest.update(str(period).encode())
    digest.update(repr(status).encode())
    digest.update(config.model_dump_json(exclude={"warehouse"}).encode())
    digest.update(invoice_csv(lines, config.minor_unit).encode())
    return digest.hexdigest()


def _set_record(out_dir: Path) -> Path:
    """What the month's current set was written from (kinds and file names): beside the folder, so that the set
    holds export files only; removed before the set is replaced, written after."""
    return out_dir.parent / f".{out_dir.name}.set.json"


def _read_set(out_dir: Path) -> dict:
    try:
        return json.loads(_set_record(out_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def published(out_dir: Path) -> Path:
    """The folder that holds the month's current set of exports, for readers: the month's folder, or on an
    object store the set folder its record names (the month's folder for a set written before sets had
    folders)."""
    folder = _read_set(out_dir).get("folder") if not isinstance(out_dir, Path) else None
    return out_dir / folder if folder else out_dir


def _lock(out_dir: Path) -> Path:
    return out_dir.parent / f".{out_dir.name}.lock"


def _staged_name(out_dir: Path, what: str) -> str:
    return f".{out_dir.name}.{what}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def sweep_leftovers(out_dir: Path) -> None:
    """Undo what a killed write of `out_dir` left beside it (call with the month's exports lock held): a staged
    folder is removed; a folder renamed away is put back when the swap died before the new one was renamed in,
    else removed."""
    parent = out_dir.parent
    if not isinstance(out_dir, Path) or not parent.is_dir():
        return
    olds = sorted(parent.glob(f".{out_dir.name}.old-*"), key=lambda p: p.stat().st_mtime, reverse=True)
    if olds and not out_dir.exists():
        os.rename(olds.pop(0), out_dir)  # the previous set, whole: the swap died between its two renames
    for leftover in [*olds, *parent.glob(f".{out_dir.name}.staged-*")]:
        shutil.rmtree(leftover, ignore_errors=True)


def _swap(staged: Path, out_dir: Path) -> None:
    """Make the complete staged folder the month's folder: the old renamed away, the staged renamed in, the
    old removed. Between the two renames the month has no folder; sweep_leftovers puts the old one back."""
    fsync_folder(staged)
    old = out_dir.parent / _staged_name(out_dir, "old")
    if out_dir.exists():
        os.rename(out_dir, old)
    os.rename(staged, out_dir)
    fsync_folder(out_dir.parent)
    shutil.rmtree(old, ignore_errors=True)


def _remove_all_but(out_dir: Path, folder: str) -> None:
    """Delete every object of the month's folder on an object store but the current set's folder: the
    previous set, a killed run's set, files of a set written before sets had folders."""
    out_dir.fs.invalidate_cache(out_dir.path)  # a killed run's folder was written by another process
    for path in list(out_dir.iterdir()) if out_dir.exists() else []:
        if path.name == folder:
            continue
        if path.is_dir():
            path.fs.rm(path.path, recursive=True)
        else:
            path.unlink()


def _write_set(
    lines: pa.Table,
    config: Config,
    period: Period,
    target: Path,
    status: Status,
    kinds: Sequence[str],
    current: Path,
    before: dict,
) -> dict:
    """Write the set into `target`: the `kinds` asked for, and the other kinds of the set at `current` (copied)
    when it was written from the same figures (`before`: its record). A set of other figures keeps none of its
    files: its other kinds are written by their own steps. Returns the new set's record (key, kinds' names)."""
    key = _set_key(lines, config, period, status)
    kept = before.get("kinds", {}) if before.get("key") == key else {}
    names: dict[str, list[str]] = {}
    for kind in EXPORTS:
        if kind in kinds:
            names[kind] = [p.name for p in EXPORTS[kind].write(lines, config, period, target, status)]
        elif kind in kept:
            names[kind] = list(kept[kind])
            for name in names[kind]:
                if target != current:
                    atomic_write_bytes(target / name, (current / name).read_bytes())
    return {"key": key, "kinds": names}


def write_exports(
    lines: pa.Table,
    config: Config,
    period: Period,
    out_dir: Path,
    status: Status,
    kinds: Sequence[str] | None = None,
) -> list[Path]:
    """Write the month's set of exports to `out_dir`, replacing the previous set as a whole (above), and return
    the files of `kinds` (default: every kind), in registry order, as published in `out_dir`."""
    kinds = tuple(EXPORTS) if kinds is None else kinds
    unknown = [k for k in kinds if k not in EXPORTS]
    if unknown:
        raise KeyError(f"unknown export kind(s) {', '.join(unknown)} (one of {', '.join(EXPORTS)})")
    with locks.hold(_lock(out_dir), f"exports of {period}"):
        before = _read_set(out_dir)
        if not isinstance(out_dir, Path):
            folder = f"set-{uuid.uuid4().hex[:12]}"
            current = published(out_dir)
            record = _write_set(lines, config, period, out_dir / folder, status, kinds, current, before)
            record["folder"] = folder
            atomic_write_text(_set_record(out_dir), json.dumps(record, indent=2) + "\n")  # the switch
            _remove_all_but(out_dir, folder)
            return [out_dir / folder / name for kind in kinds for name in record["kinds"][kind]]
        else:
            sweep_leftovers(out_dir)
            out_dir.parent.mkdir(parents=True, exist_ok=True)
            staged = out_dir.parent / _staged_name(out_dir, "staged")
            staged.mkdir()
            try:
                record = _write_set(lines, config, period, staged, status, kinds, out_dir, before)
                _set_record(out_dir).unlink(missing_ok=True)  # the record goes first, returns after the swap
                _swap(staged, out_dir)
            except BaseException:
                shutil.rmtree(staged, ignore_errors=True)
                raise
        atomic_write_text(_set_record(out_dir), json.dumps(record, indent=2) + "\n")
    return [out_dir / name for kind in kinds for name in record["kinds"][kind]]
