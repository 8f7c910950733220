"""The Usage page: GPU-hours held and used, and efficiency, per tenant and day, today so far apart.

A page script of st.navigation (dashboard/navigation.py): run as the page, it shows it for the session's viewer
and filters; imported, it hands the warm-up its reads (`warm`)."""

from __future__ import annotations

import plotly.express as px
import polars as pl
import streamlit as st

from gpumeter.config import IDLE
from gpumeter.dashboard.charts import COMPLETE, basis, chart, floats, lighten, provisional_note, tenant_colors
from gpumeter.dashboard.common import Context, show, table
from gpumeter.views.charges import provisional_label


def usage(ctx: Context) -> None:
    who = "" if ctx.viewer.sees_all_tenants else f" of {ctx.viewer.tenant}"
    st.title(f"Usage and efficiency{who} — {ctx.filters.period}")
    per_tenant = ctx.views.tenant_charges(ctx.viewer, ctx.filters)
    per_tenant = per_tenant.filter(pl.col("tenant") != IDLE) if not per_tenant.is_empty() else per_tenant
    so_far = ctx.views.provisional_days(ctx.viewer, ctx.filters)
    if per_tenant.is_empty() and not so_far:
        st.info("No usage metered for these filters.")
        return
    if not per_tenant.is_empty():
        cols = st.columns(3)
        cols[0].metric("GPU-hours held", f"{per_tenant['gpu_hours'].sum():,.1f}")
        cols[1].metric("GPU-hours used", f"{per_tenant['used_gpu_hours'].sum():,.1f}")
        held = per_tenant["gpu_hours"].sum()
        cols[2].metric(
            "Efficiency (used ÷ held)", f"{per_tenant['used_gpu_hours'].sum() / held:.0%}" if held else "—"
        )
    label = provisional_label(so_far)
    if so_far:
        provisional_note(label)
        st.caption("The figures above are complete days; today so far is in the charts below only.")
    daily = ctx.views.daily_charges(ctx.viewer, ctx.filters, so_far=bool(so_far))
    daily = (
        (basis(daily, label) if so_far else daily)
        .filter(pl.col("tenant") != IDLE)
        .with_columns((pl.col("used_gpu_hours") / pl.col("gpu_hours")).cast(pl.Float64).alias("efficiency"))
    )
    drawn = floats(daily, "gpu_hours", "used_gpu_hours")  # both charts name Unmapped workloads in words
    # Today so far is its own trace per tenant (a lighter open marker): a part of a day is no day's total.
    shape = (
        {"symbol": "basis", "symbol_map": {COMPLETE: "circle", f"today, {label}": "circle-open"}}
        if so_far
        else {}
    )
    chart(
        lighten(
            px.line(
                drawn,
                x="day",
                y="gpu_hours",
                color="tenant",
                color_discrete_map=tenant_colors(ctx),
                markers=True,
                title="GPU-hours held per day",
                labels={"gpu_hours": "GPU-hours", "day": "", "basis": ""},
                **shape,
            ).update_yaxes(rangemode="tozero")
        ),
        "usage-daily",
        daily=True,
    )
    chart(
        lighten(
            px.line(
                drawn,
                x="day",
                y="efficiency",
                color="tenant",
                color_discrete_map=tenant_colors(ctx),
                markers=True,
                title="Efficiency per day (used ÷ held GPU-hours)",
                labels={"efficiency": "efficiency", "day": "", "basis": ""},
                **shape,
            ).update_yaxes(tickformat=".0%", range=[0, 1])
        ),
        "usage-efficiency",
        daily=True,
    )
    table(ctx, ctx.views.usage_by_model(ctx.viewer, ctx.filters), "usage_by_model", money=("amount",))


def warm(ctx: Context) -> None:
    """The reads of a view of this page, widgets at their defaults (dashboard/warmup.py)."""
    ctx.views.tenant_charges(ctx.viewer, ctx.filters)
    so_far = ctx.views.provisional_days(ctx.viewer, ctx.filters)
    ctx.views.daily_charges(ctx.viewer, ctx.filters, so_far=bool(so_far))
    ctx.views.usage_by_model(ctx.viewer, ctx.filters)


if __name__ == "__main__":  # run by st.navigation
    show(usage)
