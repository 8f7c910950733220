"""What a check of the metered days or of an invoiced month found, without Dagster: passed or not, how
grave a failure is, and the figures that say why (plain JSON-able values). gpumeter.pipelines.checks turns a
finding into the asset check result Dagster shows."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

import pyarrow as pa

Severity = Literal["ERROR", "WARN"]


@dataclass(frozen=True)
class Finding:
    passed: bool
    severity: Severity
    figures: dict[str, Any] = field(default_factory=dict)


def column_total(table: pa.Table, column: str) -> Decimal:
    """The exact sum of a money (or units) column; nulls count as nothing."""
    total = Decimal(0)
    for value in table.column(column).to_pylist():
        if value is not None:
            total += Decimal(value)
    return total
