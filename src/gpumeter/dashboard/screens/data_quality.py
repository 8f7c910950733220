"""The Data quality page: coverage, the days not metered and the namespaces no tenant rule matches.

A page script of st.navigation (dashboard/navigation.py): run as the page, it shows it for the session's viewer
and filters; imported, it hands the warm-up its reads (`warm`)."""

from __future__ import annotations

import streamlit as st

from gpumeter.config import UNALLOCATED
from gpumeter.dashboard.common import Context, show, table
from gpumeter.views import words
from gpumeter.views.quality import is_reported_figure


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
    # Whatever reported columns the marts have (the pipeline may add more): numeric ones as figures.
    for column in [c for c in quality.columns if is_reported_figure(c) and quality[c].dtype.is_numeric()]:
        label = column.replace("_", " ").capitalize().replace("gpu seconds", "GPU-hours")
        scale = 3600 if column.endswith("_seconds") else 1
        figures.append((label, f"{float(quality[column].sum()) / scale:,.{1 if scale > 1 else 0}f}"))
    per_row = 4  # a label of four words stays whole at 1280 px
    for start in range(0, len(figures), per_row):
        row = figures[start : start + per_row]
        for col, (label, value) in zip(st.columns(per_row), row, strict=False):
            col.metric(label, value)
    table(ctx, quality, "data_quality")
    gaps = ctx.views.coverage_gaps(ctx.viewer, ctx.filters)
    st.subheader(f"Days not metered: {gaps.height} (cluster-days)")
    st.caption(
        "Every day of the period that has ended, or comes before a metered day, and has no metered data."
    )
    table(ctx, gaps, "coverage_gaps")
    st.subheader(f"{words.HOLDER_WORDS[UNALLOCATED]}: namespaces no tenant rule matches")
    table(
        ctx, ctx.views.unmapped_namespaces(ctx.viewer, ctx.filters), "unmapped_namespaces", money=("amount",)
    )


def warm(ctx: Context) -> None:
    """The reads of a view of this page, widgets at their defaults (dashboard/warmup.py)."""
    ctx.views.data_quality(ctx.viewer, ctx.filters)
    ctx.views.coverage_gaps(ctx.viewer, ctx.filters)
    ctx.views.unmapped_namespaces(ctx.viewer, ctx.filters)


if __name__ == "__main__":  # run by st.navigation
    show(data_quality)
