"""The Invoices page: the period's invoice lines and their files (CSV, FOCUS, each tenant's HTML and PDF).

A page script of st.navigation (dashboard/navigation.py): run as the page, it shows it for the session's viewer
and filters; imported, it hands the warm-up its reads (`warm`)."""

from __future__ import annotations

from functools import partial

import polars as pl
import streamlit as st

from gpumeter.billing.documents import render_invoice, render_invoice_pdf
from gpumeter.billing.focus import focus_csv
from gpumeter.billing.invoices import billed_tenants, invoice_csv, tenant_lines
from gpumeter.dashboard.common import Context, show, table
from gpumeter.storage import paths


def invoices(ctx: Context) -> None:
    st.title(f"Invoices — {ctx.filters.period}")
    lines = ctx.views.invoice_lines(ctx.viewer, ctx.filters)
    status = ctx.views.invoice_status(ctx.filters)
    if lines.num_rows == 0 or status is None:
        st.info("No invoice lines stored for this period yet: the monthly invoice job writes them.")
        return
    if status.closed:  # R16: a closed period's lines never change
        st.success(f"Closed {status.closed_at or ''} — content hash `{status.content_hash[:16]}…`")
    else:
        st.info(
            "Draft: the period is open; its lines change as days are metered or re-run. "
            f"Figures {ctx.views.data_through(ctx.filters)}."
        )
    frame = pl.from_arrow(lines)
    assert isinstance(frame, pl.DataFrame)
    # The amount among the first columns, so that it shows without scrolling; the period is the page's.
    first = [
        "invoice_id",
        "tenant",
        "charge_type",
        "gpu_model",
        "mig_profile",
        "gpu_hours",
        "unit_price",
        "amount",
    ]
    dropped = {"amount_unrounded", "period_start", "period_end", "currency"}
    shown = frame.select(
        [c for c in first if c in frame.columns]
        + [c for c in frame.columns if c not in first and c not in dropped]
    )
    shown = shown.drop([c for c in shown.columns if shown[c].null_count() == shown.height])
    table(ctx, shown, "invoice_lines", money=("amount",), offer_download=False)
    period, minor = ctx.filters.period, ctx.config.minor_unit
    scope = (
        ctx.viewer.tenant
        if not ctx.viewer.sees_all_tenants
        else (paths.ALL_TENANTS if not ctx.filters.tenants else "selected")
    )
    left, middle, _ = st.columns(3)
    with left:
        _download(
            "Invoice lines (CSV)",
            invoice_csv(lines, minor),
            paths.invoice_csv_name(period, scope),
            "text/csv",
        )
    with middle:  # the FOCUS export of the same lines (output contract), in the config's version
        _download(
            f"FOCUS {ctx.config.focus_version} (CSV)",
            focus_csv(lines, ctx.config, period, closed=status.closed),
            paths.focus_csv_name(period, scope),
            "text/csv",
        )
    tenants = billed_tenants(lines)
    if tenants:
        st.subheader("Per tenant")
    for tenant in tenants:
        csv_col, html_col, pdf_col = st.columns(3)
        with csv_col:
            _download(
                f"{tenant}: lines (CSV)",
                invoice_csv(tenant_lines(lines, tenant), minor),
                paths.invoice_csv_name(period, tenant),
                "text/csv",
            )
        with html_col:
            _download(
                f"{tenant}: invoice (HTML)",
                render_invoice(lines, ctx.config, period, tenant, status),
                paths.invoice_document_name(period, tenant),
                "text/html",
            )
        with pdf_col:  # rendered on click (a second or so per tenant), not on every rerun of the page
            label, name = f"{tenant}: invoice (PDF)", paths.invoice_document_name(period, tenant, ".pdf")
            st.download_button(
                label,
                partial(render_invoice_pdf, lines, ctx.config, period, tenant, status),
                file_name=name,
                mime="application/pdf",
                key=f"dl-{label}-{name}",
                on_click="ignore",
            )


def _download(label: str, data: str, file_name: str, mime: str) -> None:
    st.download_button(
        label, data, file_name=file_name, mime=mime, key=f"dl-{label}-{file_name}", on_click="ignore"
    )


def warm(ctx: Context) -> None:
    """The reads of a view of this page, widgets at their defaults (dashboard/warmup.py)."""
    ctx.views.invoice_lines(ctx.viewer, ctx.filters)
    ctx.views.invoice_status(ctx.filters)


if __name__ == "__main__":  # run by st.navigation
    show(invoices)
