"""What an export says about its lines: a closed period's (immutable, with the hash of record) or a draft's."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pyarrow as pa

from gpumeter.billing.invoices import invoice_csv


@dataclass(frozen=True)
class Status:
    """What an export says about its lines: closed (immutable, with the hash of record) or draft."""

    period: str
    closed: bool
    content_hash: str
    closed_at: str | None = None
    closed_by: str | None = None


def content_hash(lines: pa.Table, minor_unit: int) -> str:
    """sha256 of the canonical all-tenants invoice-lines CSV (R16)."""
    return hashlib.sha256(invoice_csv(lines, minor_unit).encode("utf-8")).hexdigest()
