"""A table as the dashboard's CSV download."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import polars as pl

from gpumeter.billing.invoices import csv_text, neutralize


def frame_csv(frame: pl.DataFrame) -> str:
    """A table as CSV, every text cell neutralized against spreadsheet formula injection."""
    return csv_text(
        [neutralize(c) for c in frame.columns], ([_cell(v) for v in row] for row in frame.iter_rows())
    )


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):  # hours and ratios, never money: 9 places, without binary residue
        return repr(round(value, 9) + 0.0)
    if isinstance(value, int | bool | date):
        return str(value)
    return neutralize(str(value))
