"""The figures of a metered day that a re-run may not lower unnoticed (gpumeter.storage.replacement): the GPU
time observed, the GPU time held by tenants and what the tenants are billed, from the day's marts."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from decimal import Decimal
from fractions import Fraction

import pyarrow as pa

from gpumeter.models.project import load_models
from gpumeter.storage.paths import MARTS
from gpumeter.storage.replacement import NO_ONES_BILL, Measure, tenants_bill
from gpumeter.storage.warehouse import Warehouse

POOL = "mart_pool_daily_cost"
HELD = "mart_device_seconds"
CHARGES = "mart_tenant_daily_cost"
FIGURE_MARTS = (POOL, HELD, CHARGES)


def _sum(values: list[object]) -> Fraction:
    return sum((Fraction(Decimal(str(v))) for v in values if v is not None), Fraction(0))


def _tenants(rows: pa.Table) -> list[bool]:
    return [tenant not in NO_ONES_BILL for tenant in rows.column("tenant").to_pylist()]


def figures(marts: Mapping[str, pa.Table], currency: str) -> dict[str, tuple[Fraction, str]]:
    """GPU-hours observed, GPU-hours held by tenants and the tenants' bill of a day's marts (the money exact,
    from its units)."""
    pool, held, charges = (marts[name] for name in FIGURE_MARTS)
    tenants = _tenants(held)
    held_seconds = _sum(
        [v for v, t in zip(held.column("gpu_seconds").to_pylist(), tenants, strict=True) if t]
    )
    return {
        "GPU-hours observed": (_sum(pool.column("observed_gpu_seconds").to_pylist()) / 3600, ""),
        "GPU-hours held by tenants": (held_seconds / 3600, ""),
        "billed to tenants": (tenants_bill(charges), currency),
    }


def stored_marts(warehouse: Warehouse, cluster: str, day: date) -> dict[str, pa.Table] | None:
    """The stored marts FIGURE_MARTS reads of a (cluster, day); None when the day has no stored bill."""
    tables = {m.name: m.table for m in load_models()}
    found = {}
    for name in FIGURE_MARTS:
        rows = warehouse.read_days(MARTS, tables[name], [day], cluster)
        if rows is None:
            return None
        found[name] = rows
    return found


def measures(stored: Mapping[str, pa.Table], new: Mapping[str, pa.Table], currency: str) -> list[Measure]:
    before, after = figures(stored, currency), figures(new, currency)
    return [Measure(what, before[what][0], after[what][0], unit) for what, (_, unit) in before.items()]
