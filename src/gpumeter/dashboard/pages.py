"""The dashboard's pages. Each takes the Context (viewer, scoped reads, filters) and shows what
gpumeter/views/scoped.py returns for that viewer: no page filters rows by itself."""

from __future__ import annotations

from decimal import Decimal
from functools import partial

import plotly.express as px
import plotly.graph_objects as go
import polars as pl
import streamlit as st

from gpumeter.billing.documents import render_invoice, render_invoice_pdf
from gpumeter.billing.focus import focus_csv
from gpumeter.billing.invoices import billed_tenants, invoice_csv, tenant_lines
from gpumeter.config import IDLE, UNALLOCATED
from gpumeter.dashboard.common import Context, table
from gpumeter.storage import paths
from gpumeter.views.rightsizing import advise, holder_peaks

CATEGORY_COLORS = {
    "allocated_active": "#2e7d32",
    "allocated_idle": "#f9a825",
    "unallocated": "#90a4ae",
    "mig_unpartitioned": "#8e24aa",
    "unschedulable": "#6d4c41",
    "unhealthy": "#c62828",
}


def _floats(frame: pl.DataFrame, *columns: str) -> pl.DataFrame:
    """Decimals as floats for plotting only (the tables and downloads keep them exact)."""
    return frame.with_columns(pl.col(c).cast(pl.Float64) for c in columns if c in frame.columns)


def _chart(fig: go.Figure, key: str, daily: bool = False) -> None:
    fig.update_layout(margin={"l": 10, "r": 10, "t": 40, "b": 10}, legend_title_text="")
    if daily:  # one tick per UTC day, not the hours plotly would invent between two days
        fig.update_xaxes(dtick=86_400_000, tickformat="%b %d")
    st.plotly_chart(fig, key=key)


# --- finance ---------------------------------------------------------------------------------------
def charges(ctx: Context) -> None:
    st.title(f"Charges — {ctx.filters.period}")
    per_tenant = ctx.views.tenant_charges(ctx.viewer, ctx.filters)
    if per_tenant.is_empty():
        st.info("No charges metered for these filters.")
        return
    total = sum((Decimal(v) for v in per_tenant["amount"].to_list()), Decimal(0))
    tenants_only = per_tenant.filter(~pl.col("tenant").is_in([IDLE, UNALLOCATED]))
    billed = sum((Decimal(v) for v in tenants_only["amount"].to_list()), Decimal(0))
    left, right = st.columns(2)
    left.metric("Total in scope" if ctx.viewer.sees_all_tenants else "Your charges", ctx.money(total))
    right.metric("Billed to tenants", ctx.money(billed))
    _chart(
        px.bar(
            _floats(per_tenant, "amount"),
            x="tenant",
            y="amount",
            title=f"What each tenant owes ({ctx.config.currency})",
            labels={"amount": ctx.config.currency, "tenant": ""},
        ),
        "charges-bar",
    )
    table(ctx, per_tenant, "tenant_charges", money=("amount",))
    daily = ctx.views.daily_charges(ctx.viewer, ctx.filters)
    if not daily.is_empty():
        _chart(
            px.bar(
                _floats(daily, "amount"),
                x="day",
                y="amount",
                color="tenant",
                title=f"Charges per day ({ctx.config.currency})",
                labels={"amount": ctx.config.currency, "day": ""},
            ),
            "charges-daily",
            daily=True,
        )
    history = ctx.views.monthly_charges(ctx.viewer, ctx.filters)
    st.subheader("Over time (every stored period)")
    if not history.is_empty():
        _chart(
            px.bar(
                _floats(history, "amount"),
                x="period",
                y="amount",
                color="tenant",
                labels={"amount": ctx.config.currency, "period": ""},
            ),
            "charges-history",
        )
    table(ctx, history, "monthly_charges", money=("amount",))


def budgets(ctx: Context) -> None:
    st.title(f"Budgets — {ctx.filters.period}")
    # Scoped by the data layer, config included: a tenant viewer's budgets hold its own tenant only.
    statuses = ctx.views.budgets(ctx.viewer, ctx.filters)
    if not statuses:
        st.info("No spend metered for these filters.")
        return
    rows = [
        {
            "tenant": s.tenant,
            "cost_center": s.cost_center,
            "budget": s.budget,
            "spent": s.spent,
            "remaining": s.remaining,
            "forecast": s.forecast,
            "forecast_over": s.forecast_over,
            "burn_ratio": float(s.burn_ratio) if s.burn_ratio is not None else None,
            "days_elapsed": s.days_elapsed,
            "days_in_period": s.days_in_period,
        }
        for s in statuses
    ]
    frame = pl.DataFrame(rows, infer_schema_length=None)
    over = [s.tenant for s in statuses if s.forecast_over is not None and s.forecast_over > 0]
    if over:
        st.warning(f"Forecast over budget this period: {', '.join(over)}")
    table(ctx, frame, "budgets", money=("budget", "spent", "remaining", "forecast", "forecast_over"))
    fig = go.Figure()
    palette = px.colors.qualitative.Plotly
    for index, status in enumerate(s for s in statuses if s.cumulative):
        color = palette[index % len(palette)]  # a tenant's spend and budget share a color
        days = [d for d, _ in status.cumulative]
        fig.add_scatter(
            x=days,
            y=[float(v) for _, v in status.cumulative],
            name=f"{status.tenant} spent",
            line={"color": color},
        )
        if status.budget is not None:
            fig.add_scatter(
                x=[ctx.filters.period.start, ctx.filters.period.days()[-1]],
                y=[float(status.budget)] * 2,
                name=f"{status.tenant} budget",
                line={"dash": "dot", "color": color},
                mode="lines",
            )
    fig.update_layout(
        title=f"Cumulative spend against budget ({ctx.config.currency})", yaxis_title=ctx.config.currency
    )
    _chart(fig, "budget-burn")


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
        st.info("Draft: the period is open; its lines change as days are metered or re-run.")
    frame = pl.from_arrow(lines)
    assert isinstance(frame, pl.DataFrame)
    shown = frame.drop(
        [c for c in frame.columns if c == "amount_unrounded" or frame[c].null_count() == frame.height]
    )
    st.dataframe(ctx.money_column(shown, "amount"), hide_index=True, width="stretch")
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
    with middle:  # the FOCUS 1.2 export of the same lines (output contract)
        _download(
            "FOCUS 1.2 (CSV)",
            focus_csv(lines, ctx.config, period),
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


# --- usage (every role; a tenant sees its own) -----------------------------------------------------
def usage(ctx: Context) -> None:
    who = "" if ctx.viewer.sees_all_tenants else f" of {ctx.viewer.tenant}"
    st.title(f"Usage and efficiency{who} — {ctx.filters.period}")
    per_tenant = ctx.views.tenant_charges(ctx.viewer, ctx.filters).filter(pl.col("tenant") != IDLE)
    if per_tenant.is_empty():
        st.info("No usage metered for these filters.")
        return
    cols = st.columns(3)
    cols[0].metric("GPU-hours held", f"{per_tenant['gpu_hours'].sum():,.1f}")
    cols[1].metric("GPU-hours used", f"{per_tenant['used_gpu_hours'].sum():,.1f}")
    held = per_tenant["gpu_hours"].sum()
    cols[2].metric(
        "Efficiency (used ÷ held)", f"{per_tenant['used_gpu_hours'].sum() / held:.0%}" if held else "—"
    )
    daily = ctx.views.daily_charges(ctx.viewer, ctx.filters).filter(pl.col("tenant") != IDLE)
    daily = daily.with_columns(
        (pl.col("used_gpu_hours") / pl.col("gpu_hours")).cast(pl.Float64).alias("efficiency")
    )
    _chart(
        px.line(
            _floats(daily, "gpu_hours", "used_gpu_hours"),
            x="day",
            y="gpu_hours",
            color="tenant",
            markers=True,
            title="GPU-hours held per day",
            labels={"gpu_hours": "GPU-hours", "day": ""},
        ).update_yaxes(rangemode="tozero"),
        "usage-daily",
        daily=True,
    )
    _chart(
        px.line(
            daily,
            x="day",
            y="efficiency",
            color="tenant",
            markers=True,
            title="Efficiency per day (used ÷ held GPU-hours)",
            labels={"efficiency": "efficiency", "day": ""},
        ).update_yaxes(tickformat=".0%", range=[0, 1]),
        "usage-efficiency",
        daily=True,
    )
    table(ctx, ctx.views.usage_by_model(ctx.viewer, ctx.filters), "usage_by_model", money=("amount",))


# --- platform ops ----------------------------------------------------------------------------------
def capacity(ctx: Context) -> None:
    st.title(f"Capacity — {ctx.filters.period}")
    heat = ctx.views.gpu_hourly_heatmap(ctx.viewer, ctx.filters)
    measure = st.radio("Heatmap of", ["allocated", "busy"], horizontal=True, key="heat-measure")
    if heat.is_empty():
        st.info("No GPU samples for these filters.")
    else:
        heat = heat.with_columns(
            (pl.col("node") + " · " + pl.col("uuid").str.slice(0, 12)).alias("gpu"),
        )
        pivot = heat.pivot(on="hour", index="gpu", values=measure, sort_columns=True)
        gpus = pivot["gpu"].to_list()
        hours = pivot.columns[1:]
        fig = go.Figure(
            go.Heatmap(
                z=pivot.drop("gpu").to_numpy(),
                x=hours,
                y=gpus,
                zmin=0,
                zmax=1,
                colorscale="Viridis",
                colorbar={"title": measure, "tickformat": ".0%"},
            )
        )
        fig.update_layout(
            title=f"{measure.capitalize()} share per GPU and hour (UTC)",
            height=max(320, 18 * len(gpus) + 120),
            yaxis={"autorange": "reversed"},
        )
        _chart(fig, "capacity-heatmap")
    st.subheader("Where capacity went")
    stranded = ctx.views.stranded_capacity(ctx.viewer, ctx.filters)
    if stranded.is_empty():
        st.info("No capacity metered for these filters.")
        return
    total = stranded["gpu_hours"].sum()
    stranded_hours = stranded.filter(pl.col("is_stranded"))["gpu_hours"].sum()
    st.metric(
        "Stranded share",
        f"{stranded_hours / total:.1%}" if total else "—",
        help="Everything but allocated_active",
    )
    by_category = (
        stranded.group_by("category").agg(pl.col("gpu_hours").sum()).sort("gpu_hours", descending=True)
    )
    left, right = st.columns(2)
    with left:
        _chart(
            px.bar(
                by_category,
                x="category",
                y="gpu_hours",
                color="category",
                color_discrete_map=CATEGORY_COLORS,
                title="GPU-hours by category",
                labels={"gpu_hours": "GPU-hours", "category": ""},
            ).update_layout(showlegend=False),
            "stranded-category",
        )
    with right:
        _chart(
            px.bar(
                stranded.filter(pl.col("is_stranded")),
                x="node",
                y="gpu_hours",
                color="category",
                color_discrete_map=CATEGORY_COLORS,
                title="Stranded GPU-hours by node",
                labels={"gpu_hours": "GPU-hours", "node": ""},
            ),
            "stranded-node",
        )
    table(ctx, stranded, "stranded_capacity")


def mig(ctx: Context) -> None:
    st.title(f"MIG layout — {ctx.filters.period}")
    layout = ctx.views.mig_layout(ctx.viewer, ctx.filters)
    if layout.is_empty():
        st.info("No MIG-partitioned GPUs for these filters.")
        return
    st.caption(
        "Average compute slices (of 7) of each GPU over the time it was observed: held and busy, held but "
        "idle, free (an instance nobody holds), and unpartitioned (no instance at all)."
    )
    per_gpu = (
        layout.with_columns((pl.col("node") + " · " + pl.col("uuid").str.slice(0, 12)).alias("gpu"))
        .group_by("gpu")
        .agg(
            pl.col("busy_slices").sum().alias("held, busy"),
            pl.col("held_idle_slices").sum().alias("held, idle"),
            pl.col("free_slices").sum().alias("free"),
            pl.col("unpartitioned_slices").sum().alias("unpartitioned"),
        )
        .sort("gpu")
    )
    long = per_gpu.unpivot(index="gpu", variable_name="state", value_name="slices")
    _chart(
        px.bar(
            long,
            y="gpu",
            x="slices",
            color="state",
            orientation="h",
            title="Compute slices per MIG GPU (average)",
            color_discrete_map={
                "held, busy": "#2e7d32",
                "held, idle": "#f9a825",
                "free": "#90a4ae",
                "unpartitioned": "#8e24aa",
            },
            labels={"slices": "slices of 7", "gpu": ""},
        ).update_xaxes(range=[0, 7]),
        "mig-layout",
    )
    table(ctx, layout, "mig_layout")


def idle(ctx: Context) -> None:
    st.title(f"Allocated but idle — {ctx.filters.period}")
    st.caption(
        f"Holders ranked by what their allocated-idle samples cost (held while busy below {ctx.config.idle_threshold:.0%})."
    )
    holders = ctx.views.idle_holders(ctx.viewer, ctx.filters)
    if holders.is_empty():
        st.info("No allocated-idle time for these filters.")
        return
    top = _floats(holders.head(15), "idle_cost").with_columns(
        (pl.col("namespace") + "/" + pl.col("pod")).alias("holder")
    )
    _chart(
        px.bar(
            top,
            x="idle_cost",
            y="holder",
            color="tenant",
            orientation="h",
            title=f"Top allocated-idle cost ({ctx.config.currency})",
            labels={"idle_cost": ctx.config.currency, "holder": ""},
        ).update_yaxes(autorange="reversed"),
        "idle-top",
    )
    table(ctx, holders, "idle_holders", money=("idle_cost",))


def rightsizing(ctx: Context) -> None:
    st.title(f"MIG right-sizing — {ctx.filters.period}")
    st.caption(
        "Whole GPUs whose holder never needed all of it: the smallest MIG profile that fits the observed peak "
        "memory and busy, and the monthly saving at the same holding pattern (rate card prices)."
    )
    rows = ctx.views.whole_gpu_holders(ctx.viewer, ctx.filters)
    metered = len(ctx.views.metered_days(ctx.viewer, ctx.filters))
    holders = holder_peaks(rows)
    advice = advise(holders, ctx.config, metered, len(ctx.filters.period.days()))
    if not advice:
        st.info("No whole GPU in scope would fit a smaller MIG profile.")
        return
    frame = pl.DataFrame(
        [
            {
                "tenant": a.holder.tenant,
                "namespace": a.holder.namespace,
                "pod": a.holder.pod,
                "node": a.holder.node,
                "gpu_model": a.holder.gpu_model,
                "peak_memory_gib": round((a.holder.peak_fb_used_mib or 0) / 1024, 1),
                "peak_busy": a.holder.peak_busy,
                "suggested_profile": a.profile,
                "gpu_price_per_hour": a.gpu_price_per_hour,
                "profile_price_per_hour": a.profile_price_per_hour,
                "monthly_saving": a.monthly_saving,
            }
            for a in advice
        ],
        infer_schema_length=None,
    )
    total = sum((a.monthly_saving for a in advice), Decimal(0))
    st.metric("Monthly saving if all were right-sized", ctx.money(total))
    table(ctx, frame, "rightsizing", money=("gpu_price_per_hour", "profile_price_per_hour", "monthly_saving"))


def data_quality(ctx: Context) -> None:
    st.title(f"Data quality — {ctx.filters.period}")
    quality = ctx.views.data_quality(ctx.viewer, ctx.filters)
    if quality.is_empty():
        st.info("No data-quality rows for these filters.")
        return
    observed, expected = quality["observed_gpu_hours"].sum(), quality["expected_gpu_hours"].sum()
    figures = [
        ("Coverage (observed ÷ expected)", f"{observed / expected:.1%}" if expected else "—"),
        ("Unobserved GPU-hours (not billed)", f"{quality['unobserved_gpu_hours'].sum():,.1f}"),
    ]
    # Whatever quarantine columns the mart has (the pipeline may add more): numeric ones as figures.
    for column in [c for c in quality.columns if "quarantin" in c.lower() and quality[c].dtype.is_numeric()]:
        label = column.replace("_", " ").capitalize().replace("gpu seconds", "GPU-hours")
        scale = 3600 if column.endswith("_seconds") else 1
        figures.append((label, f"{float(quality[column].sum()) / scale:,.{1 if scale > 1 else 0}f}"))
    for col, (label, value) in zip(st.columns(len(figures)), figures, strict=True):
        col.metric(label, value)
    table(ctx, quality, "data_quality")
    st.subheader("Days with no metered data")
    table(ctx, ctx.views.coverage_gaps(ctx.viewer, ctx.filters), "coverage_gaps")
    st.subheader("Unmapped namespaces (charged to `__unallocated__`: no tenant rule matches them)")
    table(
        ctx, ctx.views.unmapped_namespaces(ctx.viewer, ctx.filters), "unmapped_namespaces", money=("amount",)
    )
