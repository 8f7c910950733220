"""What every page shares: the viewer, the scoped reads, the filters, money formatting and CSV downloads.
Pages never filter rows themselves: every read goes through gpumeter/views/scoped.py with the viewer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from functools import partial

import polars as pl
import streamlit as st

from gpumeter.config import Config
from gpumeter.views import words
from gpumeter.views.csv import frame_csv
from gpumeter.views.filters import Filters
from gpumeter.views.identity import AccessDenied, Viewer
from gpumeter.views.scoped import Views


@dataclass(frozen=True)
class Context:
    config: Config  # as the viewer may read it (`Views.config_for`): a tenant's names no other tenant
    views: Views
    viewer: Viewer
    filters: Filters

    def money(self, amount: Decimal | float | int | None) -> str:
        """An amount in the pool's currency, rounded to its minor unit for display only (R12 rounds
        invoice lines; the figures behind a chart stay exact)."""
        if amount is None:
            return "—"
        value = Decimal(str(amount)) if not isinstance(amount, Decimal) else amount
        return f"{value:,.{self.config.minor_unit}f} {self.config.currency}"

    def money_column(self, frame: pl.DataFrame, *columns: str) -> pl.DataFrame:
        """The frame for display: money columns as text in the pool's currency, other floats to 4 places (a
        1e-12 residue of exact slice arithmetic reads as 0). Downloads keep the unrounded frame."""
        # Formatted in Python, not with a polars UDF: a UDF runs on polars' shared thread pool and needs the
        # GIL there, which deadlocks when page views of several sessions run at once.
        money = [
            pl.Series(c, [self.money(v) for v in frame[c].to_list()], dtype=pl.Utf8)
            for c in columns
            if c in frame.columns
        ]
        return frame.with_columns(pl.col(pl.Float64).round(4)).with_columns(money)


_CONTEXT_KEY = "gpumeter_context"


def remember(ctx: Context) -> None:
    """The app builds the context on every run; the page script it navigates to reads it back."""
    st.session_state[_CONTEXT_KEY] = ctx


def current() -> Context:
    ctx = st.session_state.get(_CONTEXT_KEY)
    if not isinstance(ctx, Context):
        st.error("Open the dashboard through its main page (streamlit run gpumeter/dashboard/app.py).")
        st.stop()
    return ctx


def show(page: Callable[[Context], None]) -> None:
    """Run a page for the session's viewer; a view the role may not read is one message, not a traceback."""
    try:
        page(current())
    except AccessDenied as exc:
        st.error(f"Not available to {current().viewer.label}: {exc}.")


def download(ctx: Context, frame: pl.DataFrame, name: str, key: str) -> None:
    """Every table is downloadable, exactly as scoped for the viewer, formula-neutralized. The CSV is made when
    the button is clicked, not on every run of the page."""
    st.download_button(
        f"Download {name} (CSV)",
        partial(frame_csv, frame),
        file_name=f"{name}_{ctx.filters.period}.csv",
        mime="text/csv",
        key=key,
        on_click="ignore",
    )


# Columns that say whose a row is; a table shows them first, then its money.
WHO_COLUMNS = ("period", "day", "invoice_id", "tenant", "cost_center", "namespace", "pod")


def table(
    ctx: Context,
    frame: pl.DataFrame,
    name: str,
    money: tuple[str, ...] = (),
    offer_download: bool = True,
    **kwargs: object,
) -> None:
    if frame.is_empty():
        st.info(f"No {name.replace('_', ' ')} for these filters.")
        return
    # As Arrow: Streamlit sends an Arrow table as it is, where a polars frame goes through pandas first.
    display = in_words(ctx.money_column(frame, *money)).with_columns(pl.col(pl.Utf8).fill_null(""))
    # Money right after the columns naming whose it is, so that it shows without scrolling at 1280 px.
    who = [c for c in display.columns if c in WHO_COLUMNS]
    amounts = [c for c in display.columns if c in money]
    display = display.select(
        who + amounts + [c for c in display.columns if c not in who and c not in amounts]
    )
    shown = display.to_arrow(compat_level=pl.CompatLevel.oldest())
    columns = {c: column_config(c, display.schema[c], c in money) for c in display.columns}
    st.dataframe(shown, hide_index=True, width="stretch", column_config=columns, **kwargs)  # type: ignore[arg-type]
    totals = [
        f"{words.column_words(c)} {ctx.money(sum((v for v in frame[c].to_list() if v is not None), Decimal(0)))}"
        for c in money
        if c in frame.columns and frame[c].dtype.is_decimal()
    ]
    if totals:
        st.caption(f"**Total** of the rows above: {'; '.join(totals)}")
    if offer_download:  # False where the page offers the same rows as the file they come from
        download(ctx, frame, name, key=f"dl-{name}")


def in_words(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame as a page shows it: buckets, capacity categories and charge types in finance's words
    (gpumeter.views.words). Downloads keep the names the invoice files use."""
    return frame.with_columns(
        pl.col(column).replace(names)
        for column, names in words.VALUE_WORDS.items()
        if column in frame.columns and frame.schema[column] == pl.Utf8
    )


def column_config(name: str, dtype: pl.DataType, money: bool = False) -> object:
    """How a table shows a column: its header in words (gpumeter.views.words), ratios as percentages, other
    numbers with thousands separators, times as dates."""
    label = words.column_words(name)
    if money or dtype == pl.Utf8:
        return st.column_config.TextColumn(label)
    if name in words.RATIO_COLUMNS and dtype.is_numeric():
        return st.column_config.NumberColumn(label, format="percent")
    if dtype.is_float() or dtype.is_decimal():
        return st.column_config.NumberColumn(label, format="accounting")
    if dtype.is_integer():
        return st.column_config.NumberColumn(label, format="localized")
    if dtype == pl.Date:
        return st.column_config.DateColumn(label, format="D MMM YYYY")
    if isinstance(dtype, pl.Datetime):
        return st.column_config.DatetimeColumn(label, format="D MMM YYYY, HH:mm")
    return st.column_config.Column(label)
