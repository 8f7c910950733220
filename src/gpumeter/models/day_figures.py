"""The figures of a metered day that a re-run may not lower unnoticed (gpumeter.storage.replacement): the GPU
time observed, the GPU time held by tenants and what the tenants are billed, from the day's marts."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from decimal import Decimal
from fractions import Fraction

import pyarrow as pa
import pyarrow.compute as pc

from gpumeter.models.project import load_models
from gpumeter.storage.paths import MARTS
from gpumeter.storage.replacement import NO_ONES_BILL, Measure, tenants_bill
from gpumeter.storage.warehouse import Warehouse

POOL = "mart_pool_daily_cost"
HELD = "mart_device_seconds"
CHARGES = "mart_tenant_daily_cost"
# The columns each mart's figures read (a stored day is read for these only).
FIGURE_COLUMNS = {
    POOL: ["observed_gpu_seconds"],
    HELD: ["tenant", "gpu_seconds"],
    CHARGES: ["tenant", "amount_units", "units_per_currency"],
}


def _exact_sum(column: pa.ChunkedArray | pa.Array) -> Fraction:
    """Σ of a decimal column, exactly (Arrow sums decimals without rounding)."""
    total = pc.sum(column).as_py()
    return Fraction(Decimal(str(total))) if total is not None else Fraction(0)


def _tenants_only(rows: pa.Table) -> pa.Table:
    return rows.filter(pc.invert(pc.is_in(rows.column("tenant"), pa.array(sorted(NO_ONES_BILL)))))


def figures(marts: Mapping[str, pa.Table], currency: str) -> dict[str, tuple[Fraction, str]]:
    """GPU-hours observed, GPU-hours held by tenants and the tenants' bill of a day's marts (the money exact,
    from its units)."""
    return {
        "GPU-hours observed": (_exact_sum(marts[POOL].column("observed_gpu_seconds")) / 3600, ""),
        "GPU-hours held by tenants": (
            _exact_sum(_tenants_only(marts[HELD]).column("gpu_seconds")) / 3600,
            "",
        ),
        "billed to tenants": (tenants_bill(marts[CHARGES]), currency),
    }


def stored_marts(warehouse: Warehouse, cluster: str, day: date) -> dict[str, pa.Table] | None:
    """The stored columns FIGURE_COLUMNS of a (cluster, day)'s marts; None when the day has no stored bill."""
    tables = {m.name: m.table for m in load_models()}
    found = {}
    for name, columns in FIGURE_COLUMNS.items():
        rows = warehouse.read_days(MARTS, tables[name], [day], cluster, columns)
        if rows is None:
            return None
        found[name] = rows
    return found


def measures(stored: Mapping[str, pa.Table], new: Mapping[str, pa.Table], currency: str) -> list[Measure]:
    before, after = figures(stored, currency), figures(new, currency)
    return [Measure(what, before[what][0], after[what][0], unit) for what, (_, unit) in before.items()]
