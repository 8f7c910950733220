"""A (cluster, day) partition metered from the warehouse's raw zone into its model zones (R15: computed
whole, then written)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from datetime import date

import pyarrow as pa

from gpumeter.config import Config, select_clusters
from gpumeter.ingest.contract import RawFiles
from gpumeter.ingest.schema import RAW_TABLES
from gpumeter.models import day_figures
from gpumeter.models.project import LAYERS, Model, load_models
from gpumeter.models.runner import meter_day
from gpumeter.storage import provisional
from gpumeter.storage.paths import INTERMEDIATE, MARTS, RAW, STAGING
from gpumeter.storage.replacement import Acceptance, guard, kept_bill, tenants_bill
from gpumeter.storage.warehouse import Warehouse

ZONES = dict(zip(LAYERS, (STAGING, INTERMEDIATE, MARTS), strict=True))
Log = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


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
    acceptance: Acceptance | None = None,
) -> tuple[dict[str, int], dict[str, dict[str, pa.Table]]]:
    """Meter the day of the given clusters (default: every cluster of the config; the assets pass their
    partition's one) from the raw zone; compute them all, then write (R15). Returns row counts per model
    and the tables per cluster (for the asset checks). With `warehouse.persist_models: marts` staging and
    intermediate models stay inside DuckDB. `on_model` is called as each model is done (to time
    them). A stored day is replaced only by one that bills as much (gpumeter.storage.replacement),
    unless `acceptance` says otherwise."""
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
        for name, tables in results.items():
            _refuse_less(config, warehouse, name, day, tables, acceptance, log)
        models = {m.name: m for m in load_models()}
        for cluster_name, tables in results.items():
            # A (cluster, day)'s models of every zone replace the stored ones together, never one by one.
            with warehouse.day_commit(cluster_name, day) as commit:
                for name, table in tables.items():
                    model = models[name]
                    target = warehouse.day_path(ZONES[model.layer], model.table, cluster_name, day)
                    commit.stage_table(target, table)
                    counts[name] = counts.get(name, 0) + table.num_rows
            log(f"{cluster_name} {day}: metered, {tables['mart_device_seconds'].num_rows} device-holder rows")
            _drop_provisional(warehouse, cluster_name, day, log)
    return counts, results


def _refuse_less(
    config: Config,
    warehouse: Warehouse,
    cluster: str,
    day: date,
    tables: dict[str, pa.Table],
    acceptance: Acceptance | None,
    log: Log,
) -> None:
    """Keep the stored day when the re-run observes, attributes or bills less of it."""
    stored = day_figures.stored_marts(warehouse, cluster, day)
    if stored is None or any(name not in tables for name in day_figures.FIGURE_COLUMNS):
        return
    guard(
        warehouse,
        cluster,
        day,
        "its bill",
        day_figures.measures(stored, tables, config.currency),
        acceptance,
        kept=kept_bill(tenants_bill(stored[day_figures.CHARGES]), config.currency, config.minor_unit),
        log=log,
    )


def _drop_provisional(warehouse: Warehouse, cluster: str, day: date, log: Log) -> None:
    """The day's final marts are written: its provisional figures (gpumeter.models.provisional) are done.
    A failure to remove them never fails the day: readers skip provisional days that have final marts."""
    try:
        removed = provisional.remove_day(warehouse, cluster, day)
    except OSError as exc:
        log(f"{cluster} {day}: could not remove its provisional figures ({exc}); they are ignored")
        return
    if removed:
        log(f"{cluster} {day}: provisional figures replaced by the day's final ones")
