"""The warehouse: Parquet files partitioned by cluster and day (gpumeter.storage.paths has the layout),
DuckDB as the engine.

Why files and not one DuckDB database: a DuckDB file opened by the pipeline for writing cannot be opened by
the dashboard at the same time, and a reader holding it read-only blocks the writer. Parquet files are
replaced with an atomic rename (gpumeter.storage.files), so a reader sees the old day or the new day, never
half of one, and a killed run leaves the previous file in place (R15). Runs of one (cluster, day) are
serialized by its lock (gpumeter.storage.locks), while runs of other clusters of the same day, which write
other folders, go ahead at once.

The root may be an object store (`s3://bucket/prefix`; `gs://`, `az://` where the fsspec driver is installed):
paths are then universal_pathlib paths over fsspec, with the same API as pathlib, and DuckDB reads the store
in place through the same filesystem (gpumeter.storage.objectstore).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
from upath import UPath

from gpumeter.storage import day_commit, locks, paths
from gpumeter.storage.day_commit import DayCommit
from gpumeter.storage.day_parts import DayInParts
from gpumeter.storage.files import WarehouseError, atomic_write_parquet, read_parquet
from gpumeter.storage.objectstore import (
    _object_store_root,
    duckdb_paths,
    is_object_store_uri,
    local_path_of,
    sql_path_list,
)
from gpumeter.storage.spill import sweep_dead_scratch

if TYPE_CHECKING:
    from gpumeter import config

# A stored table's name becomes a DuckDB view name: only what gpumeter itself names tables.
_TABLE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

# How long a reader waits for a live writer to finish a commit it found under way (one takes milliseconds).
READER_WAIT_S = 5.0


@dataclass(frozen=True)
class Warehouse:
    # A pathlib.Path for a local warehouse, a UPath (fsspec) for an object store: the same API.
    root: Path | UPath
    # Where the (cluster, day) locks and commit journals live when not under `root` (the provisional zone:
    # the warehouse's own, which its runs hold).
    lock_root: Path | UPath | None = None

    @classmethod
    def at(
        cls, root: str | os.PathLike[str], *, endpoint_url: str | None = None, region: str | None = None
    ) -> Warehouse:
        """The warehouse at a local path, a `file://` URI or an object-store URI (`s3://bucket/prefix`).
        An object store is checked once per process: a missing bucket or an unreachable endpoint is one
        error naming the URI here, not a stack trace in the middle of a run."""
        location = os.fspath(root)
        if not is_object_store_uri(location):
            return cls(Path(local_path_of(location)).expanduser().resolve())
        return cls(_object_store_root(location.rstrip("/"), endpoint_url, region))

    @classmethod
    def of(cls, settings: config.Warehouse) -> Warehouse:
        """The warehouse of a config's `warehouse:` section (gpumeter.config.Warehouse)."""
        return cls.at(settings.path, endpoint_url=settings.endpoint_url, region=settings.region)

    @property
    def is_object_store(self) -> bool:
        return not isinstance(self.root, Path)

    # --- paths -------------------------------------------------------------------------------
    def table_dir(self, zone: str, table: str) -> Path:
        return self.root / zone / table

    def day_path(self, zone: str, table: str, cluster: str, day: date) -> Path:
        return paths.partition_dir(self.table_dir(zone, table), cluster, day) / paths.DATA_FILE

    def day_dir(self, zone: str, table: str, cluster: str, day: date) -> Path:
        return self.day_path(zone, table, cluster, day).parent

    def day_files(self, zone: str, table: str, cluster: str, day: date) -> list[Path]:
        """Every Parquet file of a (cluster, day) folder: a fleet's raw day is written in parts."""
        folder = self.day_dir(zone, table, cluster, day)
        return sorted(folder.glob("*.parquet"), key=str) if folder.is_dir() else []

    def period_path(self, zone: str, table: str, period: str) -> Path:
        return paths.period_dir(self.table_dir(zone, table), period) / paths.DATA_FILE

    def exports_dir(self, period: str) -> Path:
        return self.root / paths.EXPORTS / period

    def periods_dir(self) -> Path:
        return self.root / paths.PERIODS

    def scratch_dir(self, name: str) -> Path:
        """A local directory for DuckDB to spill to: under the root when it is local, else under the
        system temp directory (on Kubernetes an emptyDir; docs/deploy.md)."""
        base = Path(tempfile.gettempdir()) / "gpumeter" if self.is_object_store else self.root
        sweep_dead_scratch(base / paths.SCRATCH)  # a killed run's folders: nothing else removes them
        return base / paths.SCRATCH / name

    def day_paths(
        self, zone: str, table: str, days: Iterable[date], cluster: str | None = None
    ) -> list[Path]:
        wanted = {d.isoformat() for d in days}
        self.finish_commits()
        base = self.table_dir(zone, table)
        if not base.exists():
            return []
        found = []
        for path in sorted(base.glob(paths.DAY_FILES_GLOB), key=str):
            c, d = paths.partition_of(path)
            if d.isoformat() in wanted and (cluster is None or c == cluster):
                found.append(path)
        return found

    def days(self, zone: str, table: str) -> list[tuple[str, date]]:
        self.finish_commits()
        base = self.table_dir(zone, table)
        return [paths.partition_of(path) for path in sorted(base.glob(paths.DAY_FILES_GLOB), key=str)]

    @contextmanager
    def day_locks(self, day: date, clusters: Iterable[str]) -> Iterator[None]:
        """Hold the locks of several clusters of the day, taken in name order so that two runs over
        overlapping clusters never wait on each other in a cycle."""
        with ExitStack() as stack:
            for cluster in sorted(set(clusters)):
                stack.enter_context(self.day_lock(day, cluster=cluster))
            yield

    # --- the per-(cluster, day) lock ---------------------------------------------------------
    def lock_path(self, cluster: str, day: date) -> Path:
        return paths.lock_file(self.lock_base, cluster, day)

    @property
    def lock_base(self) -> Path | UPath:
        return self.root if self.lock_root is None else self.lock_root

    @contextmanager
    def day_lock(self, day: date, *, cluster: str, timeout_s: float | None = None) -> Iterator[None]:
        """Hold the (cluster, day)'s lock (gpumeter.storage.locks). `cluster` is required: a day-wide lock
        would not exclude the per-cluster ones. A commit of the day that a killed run left half done is
        completed first (gpumeter.storage.day_commit), so the holder starts from a whole day."""
        with locks.hold(self.lock_path(cluster, day), f"cluster {cluster} day {day.isoformat()}", timeout_s):
            day_commit.roll_forward(self.lock_base, cluster, day)
            yield

    def finish_commits(self) -> None:
        """Before a read: complete every commit a killed run left half done (its journal pending and its day
        lock free). One folder listing when there is none. A commit whose writer is alive is waited for up to
        READER_WAIT_S; past that (or without write access) the reader reads what is stored, which may be half
        a day (gpumeter.storage.day_commit says what a reader can see)."""
        base = self.lock_base
        for cluster, day in day_commit.pending(base):
            deadline = time.monotonic() + READER_WAIT_S
            while True:
                try:
                    with self.day_lock(day, cluster=cluster, timeout_s=0):
                        break  # day_lock rolled it forward
                except locks.LockBusy:
                    if time.monotonic() >= deadline or (cluster, day) not in day_commit.pending(base):
                        break
                    time.sleep(0.05)
                except WarehouseError:
                    break  # a read-only reader: it cannot finish the commit, and reads what is stored

    # --- writes ------------------------------------------------------------------------------
    def write_day(self, zone: str, table: str, cluster: str, day: date, rows: pa.Table) -> Path:
        """One table's file of the day; a day's several tables are replaced together with `day_commit`."""
        return atomic_write_parquet(self.day_path(zone, table, cluster, day), rows)

    def day_commit(self, cluster: str, day: date) -> DayCommit:
        """New files of a (cluster, day), installed together (gpumeter.storage.day_commit); the caller holds
        the day lock."""
        return DayCommit(self.lock_base, cluster, day)

    def day_in_parts(self, zone: str, cluster: str, day: date, schemas: dict[str, pa.Schema]) -> DayInParts:
        """A writer of a (cluster, day)'s tables part by part, replacing the stored files only at commit."""
        return DayInParts(
            {table: self.day_path(zone, table, cluster, day) for table in schemas},
            schemas,
            self.scratch_dir(f"stage-{cluster}-{day.isoformat()}-{os.getpid()}"),
            commit=self.day_commit(cluster, day),
        )

    def write_period(self, zone: str, table: str, period: str, rows: pa.Table) -> Path:
        return atomic_write_parquet(self.period_path(zone, table, period), rows)

    # --- reads -------------------------------------------------------------------------------
    def read_days(
        self,
        zone: str,
        table: str,
        days: Iterable[date],
        cluster: str | None = None,
        columns: list[str] | None = None,
    ) -> pa.Table | None:
        paths = self.day_paths(zone, table, days, cluster)
        if not paths:
            return None
        # Every stored table carries its own cluster/day columns: read files without hive inference.
        return pa.concat_tables([read_parquet(p, columns) for p in paths], promote_options="default")

    def connect(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB session with a view per stored table: reading never locks a writer.
        Stored tables carry their own cluster/day columns, so the Hive path is not read back. A commit a
        killed run left half done is completed first (finish_commits); the views glob their files at each
        query."""
        self.finish_commits()
        con = duckdb.connect()
        for zone in (paths.RAW, paths.STAGING, paths.INTERMEDIATE, paths.MARTS):
            zone_dir = self.root / zone
            if not zone_dir.exists():
                continue
            for table_dir in sorted((p for p in zone_dir.iterdir() if p.is_dir()), key=str):
                # The directory name becomes an SQL identifier: anything gpumeter did not name is not a table.
                if not _TABLE_NAME.match(table_dir.name) or not any(table_dir.glob(f"**/{paths.DATA_FILE}")):
                    continue
                pattern = sql_path_list(duckdb_paths(con, [table_dir / "**" / paths.DATA_FILE]))
                con.execute(
                    f'CREATE OR REPLACE VIEW "{table_dir.name}" AS '
                    f"SELECT * FROM read_parquet({pattern}, hive_partitioning = false, union_by_name = true)"
                )
        return con
