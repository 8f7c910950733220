"""The invoice a person reads: one self-contained HTML file per tenant and period (R14, R16), and the same
invoice as a PDF, the document a finance team sends.

Rendered with Jinja2 and autoescaping on, so that a tenant, cost center or model name is shown as text,
never as markup. The PDF is WeasyPrint's rendering of the same template with the same figures: the template
adds only its print stylesheet (A4 pages, page numbers), so the two never disagree."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING

import pyarrow as pa
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from gpumeter.billing.invoices import ADJUSTMENT, ENERGY, Period, charge_words, invoice_id, tenant_lines
from gpumeter.billing.status import data_through, day_words
from gpumeter.config import Config

if TYPE_CHECKING:
    from gpumeter.billing.status import Status

SOURCE_DATE_EPOCH = "SOURCE_DATE_EPOCH"
_ENV = Environment(
    loader=PackageLoader("gpumeter.billing", "templates"),
    autoescape=select_autoescape(["html", "j2"], default=True),
    undefined=StrictUndefined,
    keep_trailing_newline=True,
)


def issue_and_due(status: Status, payment_terms_days: int) -> tuple[date, date] | None:
    """The day an invoice is issued (the UTC day its period was closed) and the day it is due (that day plus
    the payment terms); None for a draft, which is not issued."""
    if not status.closed or not status.closed_at:
        return None
    issued = datetime.fromisoformat(status.closed_at.replace("Z", "+00:00")).date()
    return issued, issued + timedelta(days=payment_terms_days)


# The note under the lines, which explains device-hours against GPU-hours, says the rule the config meters by.
_MIG_EXAMPLE = {
    "compute": "an hour of a 3g.40gb MIG instance, 3 of the 7 compute slices of its GPU, is 3/7 of a GPU-hour",
    "memory": "an hour of a 3g.40gb MIG instance, 4 of the 8 memory slices of its GPU, is 4/8 of a GPU-hour",
}
_SHARE_WORDS = {"equal": "equally", "requested": "by the fractions they requested, else equally"}


def _hours(value: Decimal) -> str:
    return f"{value:,.3f}"


def render_invoice(
    lines: pa.Table, config: Config, period: Period, tenant: str, status: Status, *, for_print: bool = False
) -> str:
    """The tenant's invoice as HTML. `for_print` adds the print stylesheet the PDF is laid out with; without
    it the HTML is the one written beside the PDF."""
    minor = config.minor_unit
    money = f"{{:,.{minor}f}}"
    rows = tenant_lines(lines, tenant).to_pylist()

    def shown(row: dict) -> dict:
        # An energy line bills kilowatt-hours: its GPU-hours are 0, so it shows its kWh and price per kWh
        # (the unrounded amount over the kWh, as FOCUS states it) rather than a unit price of 0 per GPU-hour.
        if ENERGY in (row["charge_type"], row["corrects_charge_type"]):
            kwh = row["energy_kwh"] or Decimal(0)
            per_kwh = row["amount_unrounded"] / kwh if kwh else Decimal(0)
            quantity, unit_price = f"{_hours(kwh)} kWh", f"{per_kwh:,.{max(minor, 4)}f} per kWh"
        else:
            quantity = f"{_hours(row['gpu_hours'])} GPU-hours"
            unit_price = f"{money.format(row['unit_price'])} per GPU-hour"
        return {
            **row,
            "charge": charge_words(row["charge_type"]),
            "corrects_charge": charge_words(row["corrects_charge_type"]),
            "device_hours": _hours(row["device_hours"]),
            "quantity": quantity,
            "unit_price": unit_price,
            "amount": money.format(row["amount"]),
        }

    usage = [r for r in rows if r["charge_type"] != ADJUSTMENT]
    adjustments = [r for r in rows if r["charge_type"] == ADJUSTMENT]
    total = sum((r["amount"] for r in rows), Decimal(0))  # R12: totals are sums of rounded lines
    cost_center = next((r["cost_center"] for r in rows if r["cost_center"]), "")
    dates = issue_and_due(status, config.payment_terms_days)
    return _ENV.get_template("invoice.html.j2").render(
        invoice_id=invoice_id(period, tenant),
        tenant=tenant,
        cost_center=cost_center,
        pool=config.pool,
        period=str(period),
        period_first=day_words(period.start),
        period_last=day_words(period.days()[-1]),
        data_through=None if status.metered_days is None else data_through(period, status.metered_days),
        currency=config.currency,
        closed=status.closed,
        status_word="closed" if status.closed else "draft",
        closed_at=status.closed_at,
        closed_by=status.closed_by,
        issued=day_words(dates[0]) if dates else None,
        due=day_words(dates[1]) if dates else None,
        payment_terms_days=config.payment_terms_days,
        mig_example=_MIG_EXAMPLE[config.rate_card.mig_weight],
        share_words=_SHARE_WORDS[config.share],
        content_hash=status.content_hash,
        usage=[shown(r) for r in usage],
        adjustments=[shown(r) for r in adjustments],
        usage_total=money.format(sum((r["amount"] for r in usage), Decimal(0))),
        adjustment_total=money.format(sum((r["amount"] for r in adjustments), Decimal(0))),
        total=money.format(total),
        line_count=len(rows),
        for_print=for_print,
    )


_FONT_TIME = threading.Lock()


@contextmanager
def _fixed_font_time() -> Iterator[None]:
    """Where HarfBuzz-Subset is not installed, WeasyPrint subsets fonts with fontTools, which stamps each
    embedded font with the time it was written unless SOURCE_DATE_EPOCH (reproducible builds) says which:
    without it, the same invoice written a second later would differ. The font's time means nothing on an
    invoice, so it is the epoch unless the environment already fixes it."""
    with _FONT_TIME:
        if SOURCE_DATE_EPOCH in os.environ:
            yield
            return
        os.environ[SOURCE_DATE_EPOCH] = "0"
        try:
            yield
        finally:
            os.environ.pop(SOURCE_DATE_EPOCH, None)


def invoice_pdf(html: str) -> bytes:
    """An invoice rendered by `render_invoice(..., for_print=True)`, as PDF (WeasyPrint).

    The same HTML gives the same bytes, so that re-exporting an unchanged draft rewrites the same file: the
    template has no dcterms.created/modified meta tags, the only source of WeasyPrint's /CreationDate and
    /ModDate, and no file identifier (/ID) is written. The bytes still depend on the WeasyPrint release and
    the fonts installed: requirements.lock pins the one, and the print stylesheet names DejaVu, the font
    .ci/run installs."""
    # Imported here: loading WeasyPrint loads Pango, which only the writers of PDFs need.
    from weasyprint import HTML
    from weasyprint.urls import URLFetcher

    # The invoice is self-contained: a URL in it (there is none) is never fetched, file:// included.
    document = HTML(string=html, url_fetcher=URLFetcher(allowed_protocols=()), media_type="print")
    with _fixed_font_time():
        pdf = document.write_pdf(pdf_identifier=None)
    assert pdf is not None  # bytes when no target is given
    return pdf


def render_invoice_pdf(lines: pa.Table, config: Config, period: Period, tenant: str, status: Status) -> bytes:
    """The tenant's invoice as PDF: the HTML invoice's template, figures and status, laid out on A4."""
    return invoice_pdf(render_invoice(lines, config, period, tenant, status, for_print=True))
