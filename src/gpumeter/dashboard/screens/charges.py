"""The Charges page (a tenant's "What you owe"): what each tenant owes, per day and per stored month, today so
far apart.

A page script of st.navigation (dashboard/navigation.py): run as the page, it shows it for the session's viewer
and filters; imported, it hands the warm-up its reads (`warm`)."""

from __future__ import annotations

from decimal import Decimal

import plotly.express as px
import plotly.graph_objects as go
import polars as pl
import streamlit as st

from gpumeter.config import IDLE, UNALLOCATED
from gpumeter.dashboard.charts import COMPLETE, basis, chart, floats, lighten, provisional_note, tenant_colors
from gpumeter.dashboard.common import Context, show, table
from gpumeter.views import words
from gpumeter.views.charges import provisional_label


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
        provisional_note(label)
    complete = "complete_days_amount" if so_far else "amount"
    total = _sum(per_tenant[complete])
    billed = _sum(per_tenant.filter(~pl.col("tenant").is_in([IDLE, UNALLOCATED]))[complete])
    pool = ctx.viewer.sees_all_tenants  # a tenant's page speaks of its own charges only
    columns = iter(st.columns((3 if so_far else 2) if pool else (2 if so_far else 1)))
    next(columns).metric(
        "Total in scope" if pool else "Your charges",
        ctx.money(total),
        help=words.meaning("Total in scope") if pool else None,
    )
    if pool:
        next(columns).metric("Billed to tenants", ctx.money(billed), help=words.meaning("Billed to tenants"))
        _not_billed(ctx, per_tenant, complete, billed)
    if so_far:
        next(columns).metric(
            "Today so far",
            ctx.money(_sum(per_tenant["provisional_amount"])),
            help=f"Today {label}: not in the totals beside it, which are complete days.",
        )
        owed = floats(_tenants_only(per_tenant), "complete_days_amount", "provisional_amount")
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
            title=f"{'What each tenant owes' if pool else 'What you owe'}, month to date ({ctx.config.currency})",
            yaxis_title=ctx.config.currency,
        )
        chart(lighten(fig), "charges-bar")
    elif pool:  # a tenant's one bar would only repeat its total
        chart(
            px.bar(
                floats(_tenants_only(per_tenant), "amount"),
                x="tenant",
                y="amount",
                color="tenant",
                color_discrete_map=tenant_colors(ctx),
                title=f"What each tenant owes ({ctx.config.currency})",
                labels={"amount": ctx.config.currency, "tenant": ""},
            ).update_layout(showlegend=False),
            "charges-bar",
        )
    money = ("complete_days_amount", "provisional_amount", "amount") if so_far else ("amount",)
    table(ctx, per_tenant, "month_to_date" if so_far else "tenant_charges", money=money)
    _glossary(ctx)
    daily = ctx.views.daily_charges(ctx.viewer, ctx.filters, so_far=bool(so_far))
    daily = basis(daily, label) if so_far else daily
    if not daily.is_empty():
        fig = px.bar(
            floats(daily, "amount"),
            x="day",
            y="amount",
            color="tenant",
            color_discrete_map=tenant_colors(ctx),
            pattern_shape="basis" if so_far else None,
            pattern_shape_map={COMPLETE: "", f"today, {label}": "/"} if so_far else None,
            title=f"Charges per day ({ctx.config.currency})",
            labels={"amount": ctx.config.currency, "day": "", "basis": ""},
        )
        chart(lighten(fig), "charges-daily", daily=True)
    history = ctx.views.monthly_charges(ctx.viewer, ctx.filters)
    st.subheader("Over time (every stored period)")
    if not history.is_empty():
        chart(
            px.bar(
                floats(history, "amount"),
                x="period",
                y="amount",
                color="tenant",
                color_discrete_map=tenant_colors(ctx),
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


def _glossary(ctx: Context) -> None:
    """What the page's words mean (gpumeter.views.words, also docs/glossary.md). A tenant sees no bucket: the
    pool's idle capacity and unmapped workloads are no tenant's to read about."""
    with st.expander("What these words mean"):
        for term in words.GLOSSARY:
            if ctx.viewer.sees_all_tenants or term.shown_as not in (IDLE, UNALLOCATED):
                st.markdown(f"**{term.words}** (`{term.shown_as}`): {term.meaning}")


def _sum(values: pl.Series) -> Decimal:
    return sum((Decimal(v) for v in values.to_list()), Decimal(0))


def warm(ctx: Context) -> None:
    """The reads of a view of this page, widgets at their defaults (dashboard/warmup.py)."""
    so_far = ctx.views.provisional_days(ctx.viewer, ctx.filters)
    ctx.views.tenant_charges(ctx.viewer, ctx.filters, so_far=bool(so_far))
    ctx.views.daily_charges(ctx.viewer, ctx.filters, so_far=bool(so_far))
    ctx.views.monthly_charges(ctx.viewer, ctx.filters)


if __name__ == "__main__":  # run by st.navigation
    show(charges)
