"""What several pages draw with: the colours of tenants, buckets and capacity categories, bars and charts,
frames made ready to draw, and today's provisional figures drawn apart from complete days'."""

from __future__ import annotations

import plotly.express as px
import plotly.graph_objects as go
import polars as pl
import streamlit as st

from gpumeter.config import IDLE, UNALLOCATED
from gpumeter.dashboard.common import Context, in_words
from gpumeter.views import words

# Keyed by what a page shows (gpumeter.views.words), since the frames drawn are in words.
CATEGORY_COLORS = {
    words.CATEGORY_WORDS[category]: color
    for category, color in (
        ("allocated_active", "#2e7d32"),
        ("allocated_idle", "#f9a825"),
        ("free", "#90a4ae"),
        ("mig_unpartitioned", "#8e24aa"),
        ("unschedulable", "#6d4c41"),
        ("unhealthy", "#c62828"),
    )
}
# No tenant's: greys, whoever reads.
BUCKET_COLORS = {words.HOLDER_WORDS[UNALLOCATED]: "#b0bec5", words.HOLDER_WORDS[IDLE]: "#cfd8dc"}


def tenant_colors(ctx: Context) -> dict[str, str]:
    """One colour per tenant on every page: by its place in the config, the buckets grey."""
    palette = px.colors.qualitative.Plotly
    names = [t.name for t in ctx.config.tenants]
    return {name: palette[i % len(palette)] for i, name in enumerate(names)} | BUCKET_COLORS


def bars(
    frame: pl.DataFrame,
    category: str,
    value: str,
    *,
    color: str | None = None,
    colors: dict[str, str] | None = None,
    horizontal: bool = False,
    title: str = "",
    value_title: str = "",
) -> go.Figure:
    """Bars of `value` per `category`, one trace per value of `color` (in order of first appearance), stacked:
    what plotly express draws, built from graph objects because express spends a tenth of a second or more
    per chart, which many viewers at once wait for."""
    palette = px.colors.qualitative.Plotly
    groups = frame.partition_by(color, as_dict=True, maintain_order=True) if color else {("",): frame}
    fig = go.Figure()
    for index, (key, part) in enumerate(groups.items()):
        name = str(key[0])
        categories, values = part[category].to_list(), part[value].cast(pl.Float64).to_numpy()
        fig.add_bar(
            x=values if horizontal else categories,
            y=categories if horizontal else values,
            orientation="h" if horizontal else "v",
            name=name,
            showlegend=bool(color),
            marker_color=(colors or {}).get(name, palette[index % len(palette)]),
        )
    axis = {"xaxis_title": value_title} if horizontal else {"yaxis_title": value_title}
    return fig.update_layout(title=title, barmode="relative", legend_title_text="", **axis)


def floats(frame: pl.DataFrame, *columns: str) -> pl.DataFrame:
    """A frame to draw: decimals as floats (the tables and downloads keep them exact), names in words."""
    return in_words(frame.with_columns(pl.col(c).cast(pl.Float64) for c in columns if c in frame.columns))


def chart(fig: go.Figure, key: str, daily: bool = False) -> None:
    fig.update_layout(margin={"l": 10, "r": 10, "t": 40, "b": 10}, legend_title_text="")
    if daily:  # one tick per UTC day, not the hours plotly would invent between two days
        fig.update_xaxes(dtick=86_400_000, tickformat="%b %d")
    st.plotly_chart(fig, key=key)


# --- today so far: provisional figures, shown apart --------------------------------------------------
PROVISIONAL_OPACITY = 0.4  # provisional bars and points are drawn lighter than complete days'
COMPLETE = "complete days"


def provisional_note(label: str) -> None:
    st.caption(
        f"Includes today {label}: metered up to the last full hour and drawn lighter. These figures change "
        "until the day is metered in full after midnight, and no invoice includes them."
    )


def basis(frame: pl.DataFrame, label: str) -> pl.DataFrame:
    """A `basis` column naming what each row is: complete days, or today so far (provisional)."""
    return frame.with_columns(
        pl.when(pl.col("provisional"))
        .then(pl.lit(f"today, {label}"))
        .otherwise(pl.lit(COMPLETE))
        .alias("basis")
    )


def lighten(fig: go.Figure) -> go.Figure:
    """Draw the traces of provisional figures lighter (their names hold the word)."""
    return fig.for_each_trace(
        lambda trace: (
            trace.update(opacity=PROVISIONAL_OPACITY) if "provisional" in (trace.name or "") else None
        )
    )
