"""Storage-facing steps of a run, shared by the Dagster assets (and only them: the CLI runs the Dagster
job, one code path). Each step reads what it needs from the warehouse and replaces its own files."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pyarrow as pa

from metering.accounting import LAYERS, RawDay, load_models, lookback_ms, meter_day
from metering.config import Config
from metering.invoices import Period, Reconciliation, build_invoice_lines, reconcile, write_invoice_csvs
from metering.schema import RAW_TABLES
from metering.sources import RawSource
from metering.warehouse import INTERMEDIATE, MARTS, RAW, STAGING, Warehouse, atomic_write_text

ZONES = dict(zip(LAYERS, (STAGING, INTERMEDIATE, MARTS), strict=True))
Log = Callable[[str], None]


class RunFailed(RuntimeError):
    """A Dagster run of a gpumeter job failed; the message is the domain error that stopped it."""


def _quiet(_: str) -> None:
    return None


def pull_raw_day(
    config: Config,
    warehouse: Warehouse,
    day: date,
    source_for: Callable[[str], RawSource],
    log: Log = _quiet,
) -> dict[str, int]:
    """Fetch the day (with its lookback) from every cluster's source into the raw zone."""
    counts: dict[str, int] = dict.fromkeys(RAW_TABLES, 0)
    fetched: dict[str, RawDay] = {}
    sources = {cluster.name: source_for(cluster.name) for cluster in config.clusters}
    # Fetch every cluster before writing any: a source that fails leaves the stored day untouched.
    for cluster in config.clusters:
        fetched[cluster.name] = sources[cluster.name].fetch_day(cluster.name, day, lookback_ms(config))
    for cluster_name, raw in fetched.items():
        for name, table in raw.tables().items():
            warehouse.write_day(RAW, name, cluster_name, day, table)
            counts[name] += table.num_rows
        snapshot = getattr(sources[cluster_name], "last_k8s_snapshot", None)
        if snapshot:  # keep the claims as read: template claims vanish with their pods
            folder = warehouse.root / RAW / "k8s" / f"cluster={cluster_name}" / f"day={day.isoformat()}"
            for kind in ("resourceclaims", "resourceslices"):
                if snapshot.get(kind) is not None:
                    atomic_write_text(folder / f"{kind}.json", json.dumps(snapshot[kind], sort_keys=True))
        log(f"{cluster_name} {day}: {raw.dcgm.num_rows:,} DCGM and {raw.kube.num_rows:,} kube samples")
    return counts


def read_raw_day(warehouse: Warehouse, cluster: str, day: date) -> RawDay:
    tables = {}
    for name, schema in RAW_TABLES.items():
        path = warehouse.day_path(RAW, name, cluster, day)
        stored = warehouse.read_days(RAW, name, [day], cluster) if path.exists() else None
        tables[name] = schema.empty_table() if stored is None else stored.select(schema.names).cast(schema)
    return RawDay(
        tables["raw_dcgm_samples"],
        tables["raw_kube_samples"],
        tables["raw_dra_allocations"],
        tables["raw_dra_devices"],
    )


def meter_partition_day(
    config: Config, warehouse: Warehouse, day: date, log: Log = _quiet
) -> tuple[dict[str, int], dict[str, dict[str, pa.Table]]]:
    """Meter every cluster of the day from the raw zone; compute all clusters, then write (R15).
    Returns row counts per model and the tables per cluster (for the asset checks)."""
    results: dict[str, dict[str, pa.Table]] = {}
    for cluster in config.clusters:
        results[cluster.name] = meter_day(
            read_raw_day(warehouse, cluster.name, day), config, cluster.name, day
        )
    counts: dict[str, int] = {}
    models = {m.name: m for m in load_models()}
    for cluster_name, tables in results.items():
        for name, table in tables.items():
            model = models[name]
            warehouse.write_day(ZONES[model.layer], model.table, cluster_name, day, table)
            counts[name] = counts.get(name, 0) + table.num_rows
        log(f"{cluster_name} {day}: metered, {tables['mart_device_seconds'].num_rows} device-holder rows")
    return counts, results


def read_mart(warehouse: Warehouse, table: str, days: list[date]) -> pa.Table | None:
    return warehouse.read_days(MARTS, table, days)


@dataclass(frozen=True)
class MonthSummary:
    period: str
    line_count: int
    day_count: int
    reconciliation: Reconciliation
    exports: list[Path]


def invoice_lines_path(warehouse: Warehouse, period: str) -> Path:
    return warehouse.period_path(MARTS, "invoice_lines", period)


def exports_dir(warehouse: Warehouse, period: str) -> Path:
    return warehouse.root / "exports" / period


def roll_up_month(config: Config, warehouse: Warehouse, period_key: str) -> MonthSummary:
    """Invoice lines of the month from its stored days (R2: the month is the sum of its days)."""
    period = Period.parse(period_key[:7])
    days = period.days()
    daily = read_mart(warehouse, "tenant_daily_cost", days)
    pool = read_mart(warehouse, "pool_daily_cost", days)
    if daily is None or pool is None:
        from metering.invoices import INVOICE_SCHEMA

        lines = INVOICE_SCHEMA.empty_table()
        day_count = 0
        pool = pa.table({"day": pa.array([], pa.date32()), "pool_cost": pa.array([], pa.decimal128(38, 12))})
    else:
        lines = build_invoice_lines(daily, config, period)
        day_count = len(set(daily.column("day").to_pylist()))
    warehouse.write_period(MARTS, "invoice_lines", str(period), lines)
    exports = write_invoice_csvs(lines, config, period, exports_dir(warehouse, str(period)))
    return MonthSummary(
        str(period), lines.num_rows, day_count, reconcile(lines, pool, period, config.minor_unit), exports
    )
