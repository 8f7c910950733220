"""Durable storage: Parquet files partitioned by cluster and day, DuckDB as the engine.

Layout (Hive-style, so DuckDB reads `cluster` and `day` back as columns):

    <root>/<zone>/<table>/cluster=<cluster>/day=<YYYY-MM-DD>/data.parquet     daily tables
    <root>/<zone>/<table>/period=<YYYY-MM>/data.parquet                       monthly tables

Why files and not one DuckDB database: a DuckDB file opened by the pipeline for writing cannot be
opened by the dashboard at the same time, and a reader holding it read-only blocks the writer. Parquet
files are replaced with an atomic rename, so a reader sees the old day or the new day, never half of one,
and a killed run leaves the previous file in place (R15).

Runs of one (cluster, day) are serialized by a lock file
(`<root>/.locks/cluster=<cluster>/day=<YYYY-MM-DD>.lock`, fcntl.flock): two runs of the same partition at once
never interleave their files, so a (cluster, day) is always one run's (R15), while runs of other clusters of
the same day, which write other folders, go ahead at once. The lock dies with its process, so a `kill -9`
never leaves a partition locked.
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

RAW = "raw"
MARTS = "marts"
INTERMEDIATE = "intermediate"
STAGING = "staging"

# How long a run waits for another run of the same day before it gives up (seconds).
LOCK_TIMEOUT_ENV = "GPUMETER_LOCK_TIMEOUT_SECONDS"
DEFAULT_LOCK_TIMEOUT_S = 6 * 3600.0
# A stored table's name becomes a DuckDB view name: only what gpumeter itself names tables.
_TABLE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class WarehouseError(RuntimeError):
    """A storage problem, with the path and what to do next."""


@dataclass(frozen=True)
class Warehouse:
    root: Path

    @classmethod
    def at(cls, root: str | os.PathLike[str]) -> Warehouse:
        return cls(Path(root).expanduser().resolve())

    # --- paths -------------------------------------------------------------------------------
    def table_dir(self, zone: str, table: str) -> Path:
        return self.root / zone / table

    def day_path(self, zone: str, table: str, cluster: str, day: date) -> Path:
        return self.table_dir(zone, table) / f"cluster={cluster}" / f"day={day.isoformat()}" / "data.parquet"

    def period_path(self, zone: str, table: str, period: str) -> Path:
        return self.table_dir(zone, table) / f"period={period}" / "data.parquet"

    def day_paths(
        self, zone: str, table: str, days: Iterable[date], cluster: str | None = None
    ) -> list[Path]:
        wanted = {d.isoformat() for d in days}
        base = self.table_dir(zone, table)
        if not base.exists():
            return []
        found = []
        for path in sorted(base.glob("cluster=*/day=*/data.parquet")):
            c = path.parent.parent.name.removeprefix("cluster=")
            d = path.parent.name.removeprefix("day=")
            if d in wanted and (cluster is None or c == cluster):
                found.append(path)
        return found

    def days(self, zone: str, table: str) -> list[tuple[str, date]]:
        base = self.table_dir(zone, table)
        out = []
        for path in sorted(base.glob("cluster=*/day=*/data.parquet")):
            out.append(
                (
                    path.parent.parent.name.removeprefix("cluster="),
                    date.fromisoformat(path.parent.name.removeprefix("day=")),
                )
            )
        return out

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
        return self.root / ".locks" / f"cluster={cluster}" / f"day={day.isoformat()}.lock"

    @contextmanager
    def day_lock(self, day: date, *, cluster: str, timeout_s: float | None = None) -> Iterator[None]:
        """Hold the (cluster, day)'s lock: another run of it waits (up to `timeout_s`, default from
        $GPUMETER_LOCK_TIMEOUT_SECONDS, else 6 h) and then fails with one message; it never writes beside us.
        `cluster` is required: a day-wide lock would not exclude the per-cluster ones."""
        if timeout_s is None:
            timeout_s = float(os.environ.get(LOCK_TIMEOUT_ENV, DEFAULT_LOCK_TIMEOUT_S))
        path = self.lock_path(cluster, day)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise WarehouseError(
                f"could not create the lock {path}: {exc.strerror or exc}. Nothing was written; "
                "check that the warehouse is writable (disk space, permissions, read-only mount), then re-run."
            ) from None
        try:
            deadline = time.monotonic() + max(0.0, timeout_s)
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another run"
                        raise WarehouseError(
                            f"cluster {cluster} day {day.isoformat()} is being written by {holder} (lock {path}); "
                            f"this run wrote nothing. Wait for it to finish and re-run, or raise {LOCK_TIMEOUT_ENV}."
                        ) from None
                    time.sleep(0.1)
            since = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} since {since}".encode(), 0)
            yield
        finally:
            os.close(fd)  # releases the lock

    # --- writes ------------------------------------------------------------------------------
    def write_day(self, zone: str, table: str, cluster: str, day: date, rows: pa.Table) -> Path:
        return atomic_write_parquet(self.day_path(zone, table, cluster, day), rows)

    def write_period(self, zone: str, table: str, period: str, rows: pa.Table) -> Path:
        return atomic_write_parquet(self.period_path(zone, table, period), rows)

    # --- reads -------------------------------------------------------------------------------
    def read_days(
        self, zone: str, table: str, days: Iterable[date], cluster: str | None = None
    ) -> pa.Table | None:
        paths = self.day_paths(zone, table, days, cluster)
        if not paths:
            return None
        # Every stored table carries its own cluster/day columns: read files without hive inference.
        return pa.concat_tables(
            [pq.read_table(p, partitioning=None) for p in paths], promote_options="default"
        )

    def connect(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB session with a view per stored table: reading never locks a writer.
        Stored tables carry their own cluster/day columns, so the Hive path is not read back."""
        con = duckdb.connect()
        for zone in (RAW, STAGING, INTERMEDIATE, MARTS):
            zone_dir = self.root / zone
            if not zone_dir.exists():
                continue
            for table_dir in sorted(p for p in zone_dir.iterdir() if p.is_dir()):
                # The directory name becomes an SQL identifier: anything gpumeter did not name is not a table.
                if not _TABLE_NAME.match(table_dir.name) or not any(table_dir.glob("**/data.parquet")):
                    continue
                pattern = str(table_dir / "**" / "data.parquet").replace(
                    "'", "''"
                )  # a view takes no parameters
                con.execute(
                    f'CREATE OR REPLACE VIEW "{table_dir.name}" AS '
                    f"SELECT * FROM read_parquet('{pattern}', hive_partitioning = false, union_by_name = true)"
                )
        return con


def atomic_write_parquet(path: Path, rows: pa.Table) -> Path:
    """Write `rows` to `path` so that the file is either the old one or the complete new one."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # The pid in the name lets a later write remove what a killed writer left (_sweep_stale_temps).
        fd, tmp_name = tempfile.mkstemp(
            prefix=f".{path.name}.{os.getpid()}.", suffix=f".{uuid.uuid4().hex[:8]}.tmp", dir=path.parent
        )
    except OSError as exc:
        raise WarehouseError(
            f"could not write {path}: {exc.strerror or exc}. Earlier results are untouched; "
            "free disk space or fix permissions on the warehouse, then re-run the day."
        ) from None
    os.close(fd)
    tmp = Path(tmp_name)
    _sweep_stale_temps(path)
    try:
        pq.write_table(rows, tmp, compression="zstd")
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise WarehouseError(
            f"could not write {path}: {exc.strerror or exc}. Earlier results are untouched; "
            "free disk space or fix permissions on the warehouse, then re-run the day."
        ) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _sweep_stale_temps(path: Path) -> None:
    """Remove temp files of `path` whose writer is dead (a run killed mid-write). Readers never see them
    (they read data.parquet only); this keeps the folder from filling up."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        pid_text = tmp.name.removeprefix(f".{path.name}.").split(".", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except PermissionError:  # alive, someone else's
            continue


def atomic_write_text(path: Path, text: str) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise WarehouseError(
            f"could not write {path}: {exc.strerror or exc}. Earlier results are untouched; "
            "free disk space or fix permissions, then re-run."
        ) from None
    _sweep_stale_temps(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, path)
    except OSError as exc:
        Path(tmp_name).unlink(missing_ok=True)
        raise WarehouseError(
            f"could not write {path}: {exc.strerror or exc}. Earlier results are untouched; "
            "free disk space or fix permissions, then re-run."
        ) from None
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return path
