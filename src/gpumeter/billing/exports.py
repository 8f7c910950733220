"""Every export of a period's invoice lines, in one registry: each kind writes its files into the period's
exports folder (file names: gpumeter.storage.paths). A kind is added here and nowhere else: the invoice
assets, `gpumeter invoices` and closing a period all write what this registry lists.

The documents kind writes each tenant's invoice twice, as HTML and as PDF, in one writer: the PDF is
another form of the same document, rendered from the same template and figures in the same call, so no
run can write the one without the other, and one asset (invoice_documents) reports both."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa

from gpumeter.billing.documents import render_invoice, render_invoice_pdf
from gpumeter.billing.focus import focus_csv
from gpumeter.billing.invoices import Period, billed_tenants, invoice_csv, tenant_lines
from gpumeter.billing.status import Status
from gpumeter.config import Config
from gpumeter.storage import paths
from gpumeter.storage.files import atomic_write_bytes, atomic_write_text

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
