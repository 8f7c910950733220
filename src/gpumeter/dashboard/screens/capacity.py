"""The Capacity page: the hourly heatmap of each GPU, or of each group of GPUs in a fleet, and where
capacity went.

A page script of st.navigation (dashboard/navigation.py): run as the page, it shows it for the session's viewer
and filters; imported, it hands the warm-up its reads (`warm`)."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
import streamlit as st

from gpumeter.dashboard.charts import CATEGORY_COLORS, bars, chart
from gpumeter.dashboard.common import Context, download, in_words, show, table
from gpumeter.views import capacity as capacity_reads
from gpumeter.views import words

GROUP_LABELS = {"node": "node", "node_pool": "node pool", "gpu_model": "GPU model", "cluster": "cluster"}


def capacity(ctx: Context) -> None:
    st.title(f"Capacity — {ctx.filters.period}")
    measure = st.radio("Heatmap of", ["allocated", "busy"], horizontal=True, key="heat-measure")
    _capacity_heatmap(ctx, measure)
    _stranded(ctx)


def _capacity_heatmap(ctx: Context, measure: str) -> None:
    """One row per GPU up to HEATMAP_GPU_ROWS GPUs; above, one row per group (node by default) with a
    drill-down to the GPUs of one node. Every heatmap has the download of exactly what it draws."""
    gpus = ctx.views.heatmap_gpus(ctx.viewer, ctx.filters)
    if not gpus:
        st.info("No GPU samples for these filters.")
        return
    if gpus <= capacity_reads.HEATMAP_GPU_ROWS:  # read at each run: the one place the threshold is set
        heat = ctx.views.gpu_hourly_heatmap(ctx.viewer, ctx.filters)
        _heatmap(
            _gpu_rows(heat),
            measure,
            f"{measure.capitalize()} share per GPU and hour (UTC)",
            "capacity-heatmap",
        )
        download(ctx, heat, "gpu_hourly_heatmap", key="dl-gpu_hourly_heatmap")
        return
    st.caption(
        f"{gpus:,} GPUs in scope: too many for one row each, so each row is a group of GPUs (its held and busy "
        "GPU-seconds over its observed ones). Choose a node below to see its GPUs one by one."
    )
    groupings = ctx.views.heatmap_groupings(ctx.viewer)
    by = st.selectbox(
        "One row per", groupings, format_func=lambda g: GROUP_LABELS.get(g, g), key="heat-group"
    )
    grouped = ctx.views.grouped_hourly_heatmap(ctx.viewer, ctx.filters, by or "node")
    columns = [
        c for c in grouped.columns if c not in ("hour", "gpus", "allocated", "busy", "observed_gpu_hours")
    ]
    rows = grouped.with_columns(_label(grouped, columns).alias("row"))
    label = GROUP_LABELS.get(by or "node", "group")
    _heatmap(rows, measure, f"{measure.capitalize()} share per {label} and hour (UTC)", "capacity-heatmap")
    download(ctx, grouped, f"hourly_heatmap_by_{by}", key="dl-hourly_heatmap_grouped")
    nodes = ctx.views.heatmap_nodes(ctx.viewer, ctx.filters)
    several = len({cluster for cluster, _ in nodes}) > 1
    choices = {(f"{cluster} / {node}" if several else node): (cluster, node) for cluster, node in nodes}
    st.subheader("GPUs of one node")
    picked = st.selectbox(
        "Node", list(choices), index=None, placeholder="Choose a node to see its GPUs", key="heat-node"
    )
    if picked is None or picked not in choices:
        return
    node_heat = ctx.views.gpu_hourly_heatmap(ctx.viewer, ctx.filters, choices[picked])
    _heatmap(
        _gpu_rows(node_heat),
        measure,
        f"{measure.capitalize()} share per GPU of {picked} and hour (UTC)",
        "capacity-node-heatmap",
    )
    download(ctx, node_heat, "gpu_hourly_heatmap_of_node", key="dl-gpu_hourly_heatmap_node")


def _gpu_rows(heat: pl.DataFrame) -> pl.DataFrame:
    return heat.with_columns((pl.col("node") + " · " + pl.col("uuid").str.slice(0, 12)).alias("row"))


def _label(frame: pl.DataFrame, columns: list[str]) -> pl.Expr:
    """A group's row label: its columns joined, the cluster left out where there is only one."""
    shown = [
        c for c in columns if not (c == "cluster" and len(columns) > 1 and frame["cluster"].n_unique() == 1)
    ]
    return pl.concat_str([pl.col(c).fill_null("(none)") for c in shown], separator=" / ")


def _heatmap(rows: pl.DataFrame, measure: str, title: str, key: str) -> None:
    """A heatmap of `measure` with one row per distinct `row` label and one column per hour."""
    pivot = rows.pivot(on="hour", index="row", values=measure, sort_columns=True)
    labels = pivot["row"].to_list()
    fig = go.Figure(
        go.Heatmap(
            z=pivot.drop("row").to_numpy(),
            x=pivot.columns[1:],
            y=labels,
            zmin=0,
            zmax=1,
            colorscale="Viridis",
            colorbar={"title": measure, "tickformat": ".0%"},
        )
    )
    # Rows stay legible up to a few dozen; past that they get thinner rather than the chart endless.
    row_px = 18 if len(labels) <= 60 else 8
    fig.update_layout(
        title=title, height=max(320, row_px * len(labels) + 120), yaxis={"autorange": "reversed"}
    )
    chart(fig, key)


def _stranded(ctx: Context) -> None:
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
        help=f"Everything but {words.CATEGORY_WORDS['allocated_active'].lower()}: "
        + words.meaning("stranded"),
    )
    drawn = in_words(stranded)
    by_category = drawn.group_by("category").agg(pl.col("gpu_hours").sum()).sort("gpu_hours", descending=True)
    left, right = st.columns(2)
    with left:
        chart(
            bars(
                by_category,
                "category",
                "gpu_hours",
                color="category",
                colors=CATEGORY_COLORS,
                title="GPU-hours by category",
                value_title="GPU-hours",
            ).update_layout(showlegend=False),
            "stranded-category",
        )
    with right:
        chart(
            bars(
                drawn.filter(pl.col("is_stranded")),
                "node",
                "gpu_hours",
                color="category",
                colors=CATEGORY_COLORS,
                title="Stranded GPU-hours by node",
                value_title="GPU-hours",
            ),
            "stranded-node",
        )
    # Capacity, held or not: not the "GPU-hours held" of the charges.
    table(ctx, stranded.rename({"gpu_hours": "capacity_gpu_hours"}), "stranded_capacity")


def warm(ctx: Context) -> None:
    """The reads of a view of this page, widgets at their defaults (dashboard/warmup.py)."""
    gpus = ctx.views.heatmap_gpus(ctx.viewer, ctx.filters)
    if gpus and gpus <= capacity_reads.HEATMAP_GPU_ROWS:
        ctx.views.gpu_hourly_heatmap(ctx.viewer, ctx.filters)
    elif gpus:  # grouped by the first grouping, the one the page opens on
        groupings = ctx.views.heatmap_groupings(ctx.viewer)
        ctx.views.grouped_hourly_heatmap(ctx.viewer, ctx.filters, groupings[0] if groupings else "node")
        ctx.views.heatmap_nodes(ctx.viewer, ctx.filters)
    ctx.views.stranded_capacity(ctx.viewer, ctx.filters)


if __name__ == "__main__":  # run by st.navigation
    show(capacity)
