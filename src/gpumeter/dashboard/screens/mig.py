"""The MIG layout page: the compute slices of each MIG GPU, held and busy, held but idle, free, unpartitioned.

A page script of st.navigation (dashboard/navigation.py): run as the page, it shows it for the session's viewer
and filters; imported, it hands the warm-up its reads (`warm`)."""

from __future__ import annotations

import polars as pl
import streamlit as st

from gpumeter.dashboard.charts import bars, chart
from gpumeter.dashboard.common import Context, show, table


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
    chart(
        bars(
            long,
            "gpu",
            "slices",
            color="state",
            horizontal=True,
            title="Compute slices per MIG GPU (average)",
            colors={
                "held, busy": "#2e7d32",
                "held, idle": "#f9a825",
                "free": "#90a4ae",
                "unpartitioned": "#8e24aa",
            },
            value_title="slices of 7",
        ).update_xaxes(range=[0, 7]),
        "mig-layout",
    )
    table(ctx, layout, "mig_layout")


def warm(ctx: Context) -> None:
    """The reads of a view of this page, widgets at their defaults (dashboard/warmup.py)."""
    ctx.views.mig_layout(ctx.viewer, ctx.filters)


if __name__ == "__main__":  # run by st.navigation
    show(mig)
