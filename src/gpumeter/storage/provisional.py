"""Provisional figures: a (cluster, day) metered before it ended, up to its last full hour (`through`).

They live in a zone of their own, `<root>/provisional/`, laid out as the warehouse is (`raw/`, `marts/`, each
`<table>/cluster=<c>/day=<d>/data.parquet`), so that nothing that reads the warehouse's zones ever sees them:
the month roll-up, invoices and closed periods read `marts/` only. Each provisional mart file carries a
`through` column (UTC): the figures and the moment they stand for are replaced together, atomically.

The nightly run of the complete day removes a day's provisional files once its final marts are written,
under the (cluster, day) lock. Readers never count a provisional (cluster, day) that has final marts, so a
reader that lists the folders in between sees the final figures only.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from datetime import date, datetime
from pathlib import Path

import pyarrow as pa
from upath import UPath

from gpumeter.storage import paths
from gpumeter.storage.files import read_parquet
from gpumeter.storage.warehouse import Warehouse

THROUGH = "through"  # the column of a provisional mart: the end (exclusive) of what it metered
THROUGH_TYPE = pa.timestamp("ms", tz="UTC")


def zone(warehouse: Warehouse) -> Warehouse:
    """The provisional zone as a warehouse of the same layout, whose (cluster, day) locks and commit journals
    are the warehouse's own: a provisional run takes the lock the nightly run holds."""
    return Warehouse(paths.provisional_root(warehouse.root), lock_root=warehouse.lock_base)


def with_through(rows: pa.Table, through: datetime) -> pa.Table:
    """A mart's rows as the provisional zone stores them: with the `through` they were metered up to."""
    return rows.append_column(THROUGH, pa.array([through] * rows.num_rows, THROUGH_TYPE))


def has_final(warehouse: Warehouse, cluster: str, day: date, tables: Iterable[str]) -> bool:
    """Whether the (cluster, day) has a final file of any of the mart `tables`."""
    return any(warehouse.day_path(paths.MARTS, table, cluster, day).exists() for table in tables)


def day_files(warehouse: Warehouse, table: str, days: Iterable[date]) -> list[tuple[str, date, Path]]:
    """(cluster, day, file) of the provisional files of a mart table on `days`, leaving out every (cluster,
    day) that has the table's final file: those are the nightly run's, whatever is left beside them."""
    wanted = set(days)
    return [
        (cluster, day, path)
        for path in zone(warehouse).day_paths(paths.MARTS, table, wanted)
        for cluster, day in [paths.partition_of(path)]
        if not has_final(warehouse, cluster, day, [table])
    ]


def read_days(warehouse: Warehouse, table: str, days: Iterable[date]) -> pa.Table | None:
    """The provisional rows of a mart table on `days` (with their `through`), of the (cluster, day)s that have
    no final figures; None when there are none."""
    found = [read_parquet(path) for _, _, path in day_files(warehouse, table, days)]
    return pa.concat_tables(found, promote_options="default") if found else None


def days(warehouse: Warehouse, table: str) -> list[tuple[str, date]]:
    """Every provisional (cluster, day) of a mart table that has no final figures."""
    base = zone(warehouse)
    return [
        (cluster, day)
        for cluster, day in base.days(paths.MARTS, table)
        if not has_final(warehouse, cluster, day, [table])
    ]


def remove_day(warehouse: Warehouse, cluster: str, day: date) -> list[Path]:
    """Remove every provisional file of the (cluster, day), in every zone and table; the folders removed. The
    caller holds the (cluster, day) lock."""
    root = paths.provisional_root(warehouse.root)
    if not root.exists():
        return []
    removed = []
    for zone_dir in sorted((p for p in root.iterdir() if p.is_dir()), key=str):
        for table_dir in sorted((p for p in zone_dir.iterdir() if p.is_dir()), key=str):
            folder = paths.partition_dir(table_dir, cluster, day)
            if not folder.exists():
                continue
            if isinstance(folder, UPath):
                folder.fs.rm(folder.path, recursive=True)
            else:
                shutil.rmtree(folder)
            removed.append(folder)
    return removed
