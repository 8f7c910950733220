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
from gpumeter.dashboard.common import Context, download, in_words, table
from gpumeter.storage import paths
from gpumeter.views import capacity as capacity_reads
from gpumeter.views import words
from gpumeter.views.charges import provisional_label
from gpumeter.views.quality import is_reported_figure

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


def _tenant_colors(ctx: Context) -> dict[str, str]:
    """One colour per tenant on every page: by its place in the config, the buckets grey."""
    palette = px.colors.qualitative.Plotly
    names = [t.name for t in ctx.config.tenants]
    return {name: palette[i % len(palette)] for i, name in enumerate(names)} | BUCKET_COLORS


def _bars(
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


def _floats(frame: pl.DataFrame, *columns: str) -> pl.DataFrame:
    """A frame to draw: decimals as floats (the tables and downloads keep them exact), names in words."""
    return in_words(frame.with_columns(pl.col(c).cast(pl.Float64) for c in columns if c in frame.columns))


def _glossary(ctx: Context) -> None:
    """What the page's words mean (gpumeter.views.words, also docs/glossary.md). A tenant sees no bucket: the
    pool's idle capacity and unmapped workloads are no tenant's to read about."""
    with st.expander("What these words mean"):
        for term in words.GLOSSARY:
            if ctx.viewer.sees_all_tenants or term.shown_as not in (IDLE, UNALLOCATED):
                st.markdown(f"**{term.words}** (`{term.shown_as}`): {term.meaning}")


def _chart(fig: go.Figure, key: str, daily: bool = False) -> None:
    fig.update_layout(margin={"l": 10, "r": 10, "t": 40, "b": 10}, legend_title_text="")
    if daily:  # one tick per UTC day, not the hours plotly would invent between two days
        fig.update_xaxes(dtick=86_400_000, tickformat="%b %d")
    st.plotly_chart(fig, key=key)


# --- today so far: provisional figures, shown apart --------------------------------------------------
PROVISIONAL_OPACITY = 0.4  # provisional bars and points are drawn lighter than complete days'
COMPLETE = "complete days"


def _provisional_note(label: str) -> None:
    st.caption(
        f"Includes today {label}: metered up to the last full hour and drawn lighter. These figures change "
        "until the day is metered in full after midnight, and no invoice includes them."
    )


def _basis(frame: pl.DataFrame, label: str) -> pl.DataFrame:
    """A `basis` column naming what each row is: complete days, or today so far (provisional)."""
    return frame.with_columns(
        pl.when(pl.col("provisional"))
        .then(pl.lit(f"today, {label}"))
        .otherwise(pl.lit(COMPLETE))
        .alias("basis")
    )


def _lighten(fig: go.Figure) -> go.Figure:
    """Draw the traces of provisional figures lighter (their names hold the word)."""
    return fig.for_each_trace(
        lambda trace: (
            trace.update(opacity=PROVISIONAL_OPACITY) if "provisional" in (trace.name or "") else None
        )
    )


def _days(days: Decimal) -> str:
    """Metered days as read: 16.5, 1.58 (two decimals at most)."""
    return f"{days:.2f}".rstrip("0").rstrip(".")


def _sum(values: pl.Series) -> Decimal:
    return sum((Decimal(v) for v in values.to_list()), Decimal(0))


# --- finance ---------------------------------------------------------------------------------------
def charges(ctx: Context) -> None:
    st.title(f"{'Charges' if ctx.viewer.sees_all_tenants else 'What you owe'} — {ctx.filters.period}")
    so_far = ctx.views.provisional_days(ctx.viewer, ctx.filters)
    label = provisional_label(so_far)
    # With today's provisional figures: the month to date, the complete days' part apart from today's.
    per_tenant = ctx.views.tenant_charges(ctx.viewer, ctx.filters, so_far=bool(so_far))
    if per_tenant.is_empty():
        st.info("No charges metered for these filters.")
        return
    st.caption(f"Figures {ctx.views.data_through(ctx.filters)}.")
    if so_far:
        _provisional_note(label)
    complete = "complete_days_amount" if so_far else "amount"
    total = _sum(per_tenant[complete])
    billed = _sum(per_tenant.filter(~pl.col("tenant").is_in([IDLE, UNALLOCATED]))[complete])
    columns = st.columns(3 if so_far else 2)
    columns[0].metric(
        "Total in scope" if ctx.viewer.sees_all_tenants else "Your charges",
        ctx.money(total),
        help=words.meaning("Total in scope") if ctx.viewer.sees_all_tenants else None,
    )
    columns[1].metric("Billed to tenants", ctx.money(billed), help=words.meaning("Billed to tenants"))
    _not_billed(ctx, per_tenant, complete, billed)
    if so_far:
        columns[2].metric(
            "Today so far",
            ctx.money(_sum(per_tenant["provisional_amount"])),
            help=f"Today {label}: not in the totals beside it, which are complete days.",
        )
        owed = _floats(_tenants_only(per_tenant), "complete_days_amount", "provisional_amount")
        fig = go.Figure()
        fig.add_bar(x=owed["tenant"], y=owed["complete_days_amount"], name=COMPLETE)
        fig.add_bar(
            x=owed["tenant"],
            y=owed["provisional_amount"],
            name=f"today, {label}",
            marker={"pattern": {"shape": "/"}},
        )
        fig.update_layout(
            barmode="stack",
            title=f"What each tenant owes, month to date ({ctx.config.currency})",
            yaxis_title=ctx.config.currency,
        )
        _chart(_lighten(fig), "charges-bar")
    else:
        _chart(
            px.bar(
                _floats(_tenants_only(per_tenant), "amount"),
                x="tenant",
                y="amount",
                color="tenant",
                color_discrete_map=_tenant_colors(ctx),
                title=f"What each tenant owes ({ctx.config.currency})",
                labels={"amount": ctx.config.currency, "tenant": ""},
            ).update_layout(showlegend=False),
            "charges-bar",
        )
    money = ("complete_days_amount", "provisional_amount", "amount") if so_far else ("amount",)
    table(ctx, per_tenant, "month_to_date" if so_far else "tenant_charges", money=money)
    _glossary(ctx)
    daily = (
        _basis(ctx.views.daily_charges(ctx.viewer, ctx.filters, so_far=True), label)
        if so_far
        else ctx.views.daily_charges(ctx.viewer, ctx.filters)
    )
    if not daily.is_empty():
        fig = px.bar(
            _floats(daily, "amount"),
            x="day",
            y="amount",
            color="tenant",
            color_discrete_map=_tenant_colors(ctx),
            pattern_shape="basis" if so_far else None,
            pattern_shape_map={COMPLETE: "", f"today, {label}": "/"} if so_far else None,
            title=f"Charges per day ({ctx.config.currency})",
            labels={"amount": ctx.config.currency, "day": "", "basis": ""},
        )
        _chart(_lighten(fig), "charges-daily", daily=True)
    history = ctx.views.monthly_charges(ctx.viewer, ctx.filters)
    st.subheader("Over time (every stored period)")
    if not history.is_empty():
        _chart(
            px.bar(
                _floats(history, "amount"),
                x="period",
                y="amount",
                color="tenant",
                color_discrete_map=_tenant_colors(ctx),
                labels={"amount": ctx.config.currency, "period": ""},
            ).update_xaxes(type="category"),  # months as months, not instants
            "charges-history",
        )
    table(ctx, history, "monthly_charges", money=("amount",))


def _tenants_only(frame: pl.DataFrame) -> pl.DataFrame:
    """What tenants owe: the buckets are on no tenant's invoice, so a chart of what each tenant owes has none."""
    return frame.filter(~pl.col("tenant").is_in([IDLE, UNALLOCATED]))


def _not_billed(ctx: Context, per_tenant: pl.DataFrame, amount: str, billed: Decimal) -> None:
    """Total in scope against Billed to tenants, explained where both are shown."""
    buckets = [
        f"{words.HOLDER_WORDS[bucket]} {ctx.money(_sum(part[amount]))}"
        for bucket in (UNALLOCATED, IDLE)
        if not (part := per_tenant.filter(pl.col("tenant") == bucket)).is_empty()
    ]
    if buckets and ctx.viewer.sees_all_tenants:
        st.caption(
            f"Total in scope = billed to tenants {ctx.money(billed)} + {' + '.join(buckets)}: neither is on a "
            "tenant's invoice, and each invoice line is rounded once, so the parts add up to the cent."
        )


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
        _provisional_note(label)
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
    _chart(_lighten(fig), "budget-burn")


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


# --- usage (every role; a tenant sees its own) -----------------------------------------------------
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
        _provisional_note(label)
        st.caption("The figures above are complete days; today so far is in the charts below only.")
        daily = _basis(ctx.views.daily_charges(ctx.viewer, ctx.filters, so_far=True), label)
    else:
        daily = ctx.views.daily_charges(ctx.viewer, ctx.filters)
    daily = daily.filter(pl.col("tenant") != IDLE).with_columns(
        (pl.col("used_gpu_hours") / pl.col("gpu_hours")).cast(pl.Float64).alias("efficiency")
    )
    # Today so far is its own trace per tenant (a lighter open marker): a part of a day is no day's total.
    shape = (
        {"symbol": "basis", "symbol_map": {COMPLETE: "circle", f"today, {label}": "circle-open"}}
        if so_far
        else {}
    )
    _chart(
        _lighten(
            px.line(
                _floats(daily, "gpu_hours", "used_gpu_hours"),
                x="day",
                y="gpu_hours",
                color="tenant",
                color_discrete_map=_tenant_colors(ctx),
                markers=True,
                title="GPU-hours held per day",
                labels={"gpu_hours": "GPU-hours", "day": "", "basis": ""},
                **shape,
            ).update_yaxes(rangemode="tozero")
        ),
        "usage-daily",
        daily=True,
    )
    _chart(
        _lighten(
            px.line(
                daily,
                x="day",
                y="efficiency",
                color="tenant",
                color_discrete_map=_tenant_colors(ctx),
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


# --- platform ops ----------------------------------------------------------------------------------
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
    _chart(fig, key)


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
        _chart(
            _bars(
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
        _chart(
            _bars(
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
        _bars(
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
        _bars(
            top,
            "holder",
            "idle_cost",
            color="tenant",
            colors=_tenant_colors(ctx),
            horizontal=True,
            title=f"Top allocated-idle cost ({ctx.config.currency})",
            value_title=ctx.config.currency,
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
    advice = ctx.views.rightsizing_advice(ctx.viewer, ctx.filters)
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
