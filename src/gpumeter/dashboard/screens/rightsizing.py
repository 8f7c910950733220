"""The Right-sizing page: whole GPUs that a smaller MIG profile would fit, and the monthly saving.

A page script of st.navigation (dashboard/navigation.py): run as the page, it shows it for the session's viewer
and filters; imported, it hands the warm-up its reads (`warm`)."""

from __future__ import annotations

from decimal import Decimal

import polars as pl
import streamlit as st

from gpumeter.dashboard.common import Context, show, table


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


def warm(ctx: Context) -> None:
    """The reads of a view of this page, widgets at their defaults (dashboard/warmup.py)."""
    ctx.views.rightsizing_advice(ctx.viewer, ctx.filters)


if __name__ == "__main__":  # run by st.navigation
    show(rightsizing)
