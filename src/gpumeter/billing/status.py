"""What an export says about its lines: a closed period's (immutable, with the hash of record) or a draft's."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

import pyarrow as pa

from gpumeter.billing.invoices import Period, invoice_csv


@dataclass(frozen=True)
class Status:
    """What an export says about its lines: closed (immutable, with the hash of record) or draft."""

    period: str
    closed: bool
    content_hash: str
    closed_at: str | None = None
    closed_by: str | None = None
    metered_days: tuple[date, ...] | None = None  # the period's days with stored charges; None: not known


def day_words(day: date) -> str:
    """A day as finance writes it: 7 Nov 2026."""
    return f"{day.day} {day:%b %Y}"


def data_through(period: Period, metered: Sequence[date]) -> str:
    """How far a period's figures go, in words: "through 7 Nov 2026, 7 of 30 days metered" (and how many
    days before that are missing), "all 30 days metered", or "no day metered yet"."""
    days = sorted(set(metered) & set(period.days()))
    total = len(period.days())
    if not days:
        return "no day metered yet"
    if len(days) == total:
        return f"all {total} days metered"
    missing = sum(1 for d in period.days() if d < days[-1] and d not in days)
    gaps = f", {missing} day{'s' if missing != 1 else ''} before it not metered" if missing else ""
    return f"through {day_words(days[-1])}, {len(days)} of {total} days metered{gaps}"


def content_hash(lines: pa.Table, minor_unit: int) -> str:
    """sha256 of the canonical all-tenants invoice-lines CSV (R16)."""
    return hashlib.sha256(invoice_csv(lines, minor_unit).encode("utf-8")).hexdigest()
