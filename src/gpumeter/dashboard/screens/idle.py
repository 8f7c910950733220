"""The Allocated idle page: holders ranked by what their allocated-idle time cost.

A page script of st.navigation (dashboard/navigation.py): run as the page, it shows it for the session's viewer
and filters; imported, it hands the warm-up its reads (`warm`)."""

from __future__ import annotations

import polars as pl
import streamlit as st

from gpumeter.dashboard.charts import bars, chart, floats, tenant_colors
from gpumeter.dashboard.common import Context, show, table


def idle(ctx: Context) -> None:
    st.title(f"Allocated but idle — {ctx.filters.period}")
    st.caption(
        f"Holders ranked by what their allocated-idle samples cost (held while busy below {ctx.config.idle_threshold:.0%})."
    )
    holders = ctx.views.idle_holders(ctx.viewer, ctx.filters)
    if holders.is_empty():
        st.info("No allocated-idle time for these filters.")
        return
    top = floats(holders.head(15), "idle_cost").with_columns(
        (pl.col("namespace") + "/" + pl.col("pod")).alias("holder")
    )
    chart(
        bars(
            top,
            "holder",
            "idle_cost",
            color="tenant",
            colors=tenant_colors(ctx),
            horizontal=True,
            title=f"Top allocated-idle cost ({ctx.config.currency})",
            value_title=ctx.config.currency,
        ).update_yaxes(autorange="reversed"),
        "idle-top",
    )
    table(ctx, holders, "idle_holders", money=("idle_cost",))


def warm(ctx: Context) -> None:
    """The reads of a view of this page, widgets at their defaults (dashboard/warmup.py)."""
    ctx.views.idle_holders(ctx.viewer, ctx.filters)


if __name__ == "__main__":  # run by st.navigation
    show(idle)
