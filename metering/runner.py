"""Storage-facing steps of a run, shared by the Dagster assets (and only them: the CLI runs the Dagster
job, one code path). Each step reads what it needs from the warehouse and replaces its own files."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from metering import periods
from metering.accounting import LAYERS, Model, RawFiles, load_models, lookback_ms, meter_day
from metering.config import Config, ConfigError
from metering.invoices import INVOICE_SCHEMA, Period, Reconciliation, reconcile
from metering.periods import exports_dir, invoice_lines_path  # noqa: F401 - their home before periods.py
from metering.schema import RAW_TABLES
from metering.sources import PartedRawSource, RawSource
from metering.warehouse import INTERMEDIATE, MARTS, RAW, STAGING, StagedDay, Warehouse, atomic_write_text

ZONES = dict(zip(LAYERS, (STAGING, INTERMEDIATE, MARTS), strict=True))
Log = Callable[[str], None]


class RunFailed(RuntimeError):
    """A Dagster run of a gpumeter job failed; the message is the domain error that stopped it."""


def _quiet(_: str) -> None:
    return None


def select_clusters(config: Config, clusters: Iterable[str] | None) -> list[str]:
    """The named clusters of the config (default: all of them), in config order; an unknown name is an error."""
    known = [c.name for c in config.clusters]
    if clusters is None:
        return known
    wanted = list(dict.fromkeys(clusters))
    unknown = [c for c in wanted if c not in known]
    if unknown:
        raise ConfigError(
            "clusters", [("", f"{', '.join(unknown)} not in the config (its clusters: {', '.join(known)})")]
        )
    return [c for c in known if c in wanted]


def pull_raw_day(
    config: Config,
    warehouse: Warehouse,
    day: date,
    source_for: Callable[[str], RawSource],
    log: Log = _quiet,
    clusters: Iterable[str] | None = None,
) -> dict[str, int]:
    """Fetch the day (with its lookback) of the given clusters (default: every cluster of the config; the
    assets pass their partition's one) from their sources into the raw zone. A source that hands the day
    over in parts (PartedRawSource) is written part by part, so a fleet's day never has to fit in memory."""
    names = select_clusters(config, clusters)
    counts: dict[str, int] = dict.fromkeys(RAW_TABLES, 0)
    sources = {name: source_for(name) for name in names}
    staged: dict[str, StagedDay] = {}
    try:
        # Fetch every cluster before storing any: a source that fails leaves every stored day untouched.
        lookback = lookback_ms(config)
        for name in names:
            source = sources[name]
            if isinstance(source, PartedRawSource):
                parts = source.fetch_day_parts(name, day, lookback)
            else:
                parts = iter([source.fetch_day(name, day, lookback)])
            staged[name] = warehouse.stage_day(RAW, name, day, dict(RAW_TABLES))
            for part in parts:
                for table, rows in part.tables().items():
                    if rows.num_rows:
                        staged[name].write(table, rows)
        # R15: one run of a (cluster, day) writes at a time, and never while it is being metered.
        with warehouse.day_locks(day, names):
            for cluster_name, day_tables in staged.items():
                for table, rows in day_tables.commit().items():
                    counts[table] += rows
                snapshot = getattr(sources[cluster_name], "last_k8s_snapshot", None)
                if snapshot:  # keep the claims as read: template claims vanish with their pods
                    folder = warehouse.day_dir(RAW, "k8s", cluster_name, day)
                    for kind in ("resourceclaims", "resourceslices"):
                        if snapshot.get(kind) is not None:  # read at an unknown time (files, API now)
                            atomic_write_text(
                                folder / f"{kind}.json", json.dumps(snapshot[kind], sort_keys=True)
                            )
                    # Timed snapshots (k8s_snapshots_dir) keep their time-named files; each is copied with
                    # its own day (the day before's come with that day), beside the day's raw rows.
                    for kept in map(Path, snapshot.get("snapshot_files", ())):
                        if kept.parent.name == f"day={day.isoformat()}":
                            atomic_write_text(folder / kept.name, kept.read_text(encoding="utf-8"))
                log(
                    f"{cluster_name} {day}: {day_tables.rows['raw_dcgm_samples']:,} DCGM and "
                    f"{day_tables.rows['raw_kube_samples']:,} kube samples"
                )
    finally:
        for day_tables in staged.values():
            day_tables.discard()
    return counts


def read_raw_day(warehouse: Warehouse, cluster: str, day: date) -> RawFiles:
    """The stored raw files of a (cluster, day): every Parquet file of its day folder (a fleet's day is
    written in parts), read in place by DuckDB."""
    return RawFiles({name: warehouse.day_files(RAW, name, cluster, day) for name in RAW_TABLES})


def meter_partition_day(
    config: Config,
    warehouse: Warehouse,
    day: date,
    log: Log = _quiet,
    clusters: Iterable[str] | None = None,
    on_model: Callable[[Model], None] | None = None,
) -> tuple[dict[str, int], dict[str, dict[str, pa.Table]]]:
    """Meter the day of the given clusters (default: every cluster of the config; the assets pass their
    partition's one) from the raw zone; compute them all, then write (R15). Returns row counts per model
    and the tables per cluster (for the asset checks). With `warehouse.persist_models: marts` staging and
    intermediate models stay inside DuckDB. `on_model` is called as each model is done (the benchmark
    times them)."""
    names = select_clusters(config, clusters)
    keep = LAYERS if config.warehouse.persist_models == "all" else ("marts",)
    results: dict[str, dict[str, pa.Table]] = {}
    counts: dict[str, int] = {}
    # R15: a (cluster, day)'s raw files cannot change while they are read, and its models are one run's.
    with warehouse.day_locks(day, names):
        for name in names:
            spill = warehouse.scratch_dir(f"duckdb-{name}-{day.isoformat()}-{os.getpid()}")
            try:
                results[name] = meter_day(
                    read_raw_day(warehouse, name, day),
                    config,
                    name,
                    day,
                    keep_layers=keep,
                    temp_directory=spill,
                    on_model=on_model,
                )
            finally:
                shutil.rmtree(spill, ignore_errors=True)
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
    closed: bool = False  # R16: a closed period is left untouched
    adjustment_count: int = 0


def _pool(warehouse: Warehouse, days: list[date]) -> pa.Table:
    pool = read_mart(warehouse, "pool_daily_cost", days)
    if pool is None:
        return pa.table({"day": pa.array([], pa.date32()), "pool_cost": pa.array([], pa.decimal128(38, 12))})
    return pool


def roll_up_month(
    config: Config, warehouse: Warehouse, period_key: str, *, write_exports: bool = True
) -> MonthSummary:
    """Invoice lines of the month from its stored days (R2: the month is the sum of its days), plus the
    adjustments it carries for closed periods (R16). A closed month is not rolled up again: its lines and
    files stay as closed, and the summary says so."""
    period = Period.parse(period_key[:7])
    key = str(period)
    days = period.days()
    daily = read_mart(warehouse, "tenant_daily_cost", days)
    day_count = len(set(daily.column("day").to_pylist())) if daily is not None else 0
    if periods.is_closed(warehouse, key):
        lines = periods.stored_lines(warehouse, key)
        assert lines is not None  # a closed period always has its closed copy
        adjustments = [r for r in lines.to_pylist() if r["corrects_period"]]
        # Against its own days as closed: Σ closed lines = manifest total (late data goes elsewhere).
        manifest = periods.read_manifest(warehouse, key) or {}
        closed_total = Decimal(manifest.get("total_unrounded", "0"))
        pool = pa.table(
            {
                "day": pa.array([period.start], pa.date32()),
                "pool_cost": pa.array([closed_total], pa.decimal128(38, 12)),
            }
        )
        return MonthSummary(
            key,
            lines.num_rows,
            day_count,
            reconcile(lines, pool, period, config.minor_unit),
            [],
            closed=True,
            adjustment_count=len(adjustments),
        )
    lines, found = periods.roll_up(config, warehouse, period, lambda t, d: read_mart(warehouse, t, d))
    warehouse.write_period(MARTS, "invoice_lines", key, lines)
    exports = export_month(config, warehouse, key, "all") if write_exports else []
    delta = sum((c.pool_delta for c in found), Decimal(0))
    return MonthSummary(
        key,
        lines.num_rows,
        day_count,
        reconcile(lines, _pool(warehouse, days), period, config.minor_unit, corrections=delta),
        exports,
        adjustment_count=sum(len(c.lines) for c in found),
    )


EXPORT_KINDS = ("csv", "focus", "documents")


def export_month(config: Config, warehouse: Warehouse, period_key: str, kind: str) -> list[Path]:
    """Write one kind of export (`csv`, `focus`, `documents` or `all`) of the month's stored lines. A closed
    month's exports were written when it closed and are never written again (R16): returns []."""
    period = Period.parse(period_key[:7])
    key = str(period)
    if periods.is_closed(warehouse, key):
        return []
    lines = periods.stored_lines(warehouse, key)
    if lines is None:
        lines = INVOICE_SCHEMA.empty_table()
    out = exports_dir(warehouse, key)
    status = periods.status_of(warehouse, key, lines, config.minor_unit)
    writers = {
        "csv": lambda: periods.write_csv_exports(lines, config, period, out),
        "focus": lambda: periods.write_focus_export(lines, config, period, out),
        "documents": lambda: periods.write_documents(lines, config, period, out, status),
    }
    if kind == "all":
        return [path for name in EXPORT_KINDS for path in writers[name]()]
    return writers[kind]()
