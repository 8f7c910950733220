"""Every export of a period's invoice lines, in one registry: each kind writes its files into the period's
exports folder (file names: gpumeter.storage.paths). A kind is added here and nowhere else: the invoice
assets, `gpumeter invoices` and closing a period all write what this registry lists."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa

from gpumeter.billing.documents import render_invoice
from gpumeter.billing.focus import focus_csv
from gpumeter.billing.invoices import Period, billed_tenants, invoice_csv, tenant_lines
from gpumeter.billing.status import Status
from gpumeter.config import Config
from gpumeter.storage import paths
from gpumeter.storage.files import atomic_write_text

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


def write_focus(lines: pa.Table, config: Config, period: Period, out_dir: Path, _: Status) -> list[Path]:
    """The same lines as FOCUS 1.2 (gpumeter.billing.focus)."""
    return [atomic_write_text(out_dir / paths.focus_csv_name(period), focus_csv(lines, config, period))]


def write_documents(
    lines: pa.Table, config: Config, period: Period, out_dir: Path, status: Status
) -> list[Path]:
    """One self-contained HTML invoice per tenant that has lines."""
    return [
        atomic_write_text(
            out_dir / paths.invoice_document_name(period, tenant),
            render_invoice(lines, config, period, tenant, status),
        )
        for tenant in billed_tenants(lines)
    ]


EXPORTS: dict[str, Writer] = {"csv": write_invoice_csvs, "focus": write_focus, "documents": write_documents}
EXPORT_KINDS = tuple(EXPORTS)


def write_exports(
    lines: pa.Table,
    config: Config,
    period: Period,
    out_dir: Path,
    status: Status,
    kinds: Sequence[str] = EXPORT_KINDS,
) -> list[Path]:
    """Write the exports of `kinds` (default: every kind), in registry order."""
    return [path for kind in kinds for path in EXPORTS[kind](lines, config, period, out_dir, status)]
