"""The Budgets page: budget, spend, forecast and burn-down per tenant, today so far counted.

A page script of st.navigation (dashboard/navigation.py): run as the page, it shows it for the session's viewer
and filters; imported, it hands the warm-up its reads (`warm`)."""

from __future__ import annotations

from decimal import Decimal

import plotly.express as px
import plotly.graph_objects as go
import polars as pl
import streamlit as st

from gpumeter.dashboard.charts import chart, lighten, provisional_note
from gpumeter.dashboard.common import Context, show, table
from gpumeter.views.charges import provisional_label


def budgets(ctx: Context) -> None:
    st.title(f"Budgets — {ctx.filters.period}")
    # Scoped by the data layer, config included: a tenant viewer's budgets hold its own tenant only. With
    # today's provisional figures the spend counts them, and the forecast their part of the day.
    statuses = ctx.views.budgets(ctx.viewer, ctx.filters, so_far=True)
    if not statuses:
        st.info("No spend metered for these filters.")
        return
    so_far = ctx.views.provisional_days(ctx.viewer, ctx.filters)
    label = provisional_label(so_far)
    if so_far:
        provisional_note(label)
        st.caption(
            "The forecast is the spend per metered day times the days of the month, today counted as the part "
            f"of it metered: {_days(statuses[0].days_metered)} days so far."
        )
    rows = [
        {
            "tenant": s.tenant,
            "cost_center": s.cost_center,
            "budget": s.budget,
            "spent": s.spent,
            **({"of_which_today_provisional": s.provisional_spent} if so_far else {}),
            "remaining": s.remaining,
            "forecast": s.forecast,
            "forecast_over": s.forecast_over,
            "burn_ratio": float(s.burn_ratio) if s.burn_ratio is not None else None,
            "days_elapsed": s.days_elapsed,
            **({"days_metered": float(s.days_metered)} if so_far else {}),
            "days_in_period": s.days_in_period,
        }
        for s in statuses
    ]
    frame = pl.DataFrame(rows, infer_schema_length=None)
    over = [s.tenant for s in statuses if s.forecast_over is not None and s.forecast_over > 0]
    if over:
        st.warning(f"Forecast over budget this period: {', '.join(over)}")
    money = ("budget", "spent", "of_which_today_provisional", "remaining", "forecast", "forecast_over")
    table(ctx, frame, "budgets", money=money)
    fig = go.Figure()
    palette = px.colors.qualitative.Plotly
    for index, status in enumerate(s for s in statuses if s.cumulative):
        color = palette[index % len(palette)]  # a tenant's spend and budget share a color
        partial = {d for d, _ in status.provisional_days}
        complete = [(d, v) for d, v in status.cumulative if d not in partial]
        fig.add_scatter(
            x=[d for d, _ in complete],
            y=[float(v) for _, v in complete],
            name=f"{status.tenant} spent",
            line={"color": color},
        )
        if partial:  # from the last complete day on to today so far: dashed and lighter
            ahead = complete[-1:] + [(d, v) for d, v in status.cumulative if d in partial]
            fig.add_scatter(
                x=[d for d, _ in ahead],
                y=[float(v) for _, v in ahead],
                name=f"{status.tenant} spent, {label}",
                line={"color": color, "dash": "dash"},
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
    chart(lighten(fig), "budget-burn")


def _days(days: Decimal) -> str:
    """Metered days as read: 16.5, 1.58 (two decimals at most)."""
    return f"{days:.2f}".rstrip("0").rstrip(".")


def warm(ctx: Context) -> None:
    """The reads of a view of this page, widgets at their defaults (dashboard/warmup.py)."""
    ctx.views.budgets(ctx.viewer, ctx.filters, so_far=True)
    ctx.views.provisional_days(ctx.viewer, ctx.filters)


if __name__ == "__main__":  # run by st.navigation
    show(budgets)
