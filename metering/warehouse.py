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

The root may be an object store (`s3://bucket/prefix`; `gs://`, `az://` where the fsspec driver is
installed). Paths are then universal_pathlib paths over fsspec, with the same API as pathlib, so every
read, listing and write below goes through them. An object store has no rename: a file is written in one
PUT, which is atomic (readers see the old or the new object). The (cluster, day) lock is then a lock object
created with a conditional PUT (If-None-Match: *): only one run can create it; it is deleted when the run
ends, and one left by a killed run is named in the error of the next run (docs/deploy.md). DuckDB reads the
store in place through the same fsspec filesystem (`duckdb_paths`).
"""

from __future__ import annotations

import fcntl
import io
import os
import re
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from upath import UPath

from metering.config import OBJECT_STORE_DRIVERS

if TYPE_CHECKING:
    from metering import config

RAW = "raw"
MARTS = "marts"
INTERMEDIATE = "intermediate"
STAGING = "staging"
PERIODS = "periods"  # the invoice lifecycle of each period (metering/periods.py)
EXPORTS = "exports"

# How long a run waits for another run of the same day before it gives up (seconds).
LOCK_TIMEOUT_ENV = "GPUMETER_LOCK_TIMEOUT_SECONDS"
DEFAULT_LOCK_TIMEOUT_S = 6 * 3600.0
# A stored table's name becomes a DuckDB view name: only what gpumeter itself names tables.
_TABLE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class WarehouseError(RuntimeError):
    """A storage problem, with the path and what to do next."""


# What to do when the store cannot be reached, said once for every way it fails.
_STORE_HELP = (
    "check the bucket exists, the endpoint (warehouse.endpoint_url or $AWS_ENDPOINT_URL) is reachable and "
    "the credentials ($AWS_ACCESS_KEY_ID/$AWS_SECRET_ACCESS_KEY, or the pod's IAM role) may list and write it"
)


def is_object_store_uri(location: str) -> bool:
    return urlparse(location).scheme.lower() in OBJECT_STORE_DRIVERS


def local_path_of(location: str) -> str:
    """A local path or `file://` URI as a path (`file:///srv/wh` -> `/srv/wh`)."""
    parsed = urlparse(location)
    if parsed.scheme.lower() != "file":
        return location
    if parsed.netloc not in ("", "localhost"):
        raise WarehouseError(
            f"warehouse {location}: a file:// URI names a local path (file:///srv/warehouse), not host "
            f"{parsed.netloc!r}; use an object-store URI (s3://bucket/prefix) for remote storage"
        )
    return unquote(parsed.path)


def store_options(
    location: str, endpoint_url: str | None = None, region: str | None = None
) -> dict[str, Any]:
    """fsspec options of an object store: only endpoint and region come from the config; credentials come
    from the driver's usual chain (environment, IAM role), never from the config file."""
    if urlparse(location).scheme.lower() not in ("s3", "s3a"):
        return {}
    client: dict[str, Any] = {}
    if region:
        client["region_name"] = region
    options: dict[str, Any] = {
        # Fail in seconds, not minutes, when the endpoint is down; botocore still retries throttling.
        "config_kwargs": {"connect_timeout": 10, "retries": {"max_attempts": 3, "mode": "standard"}},
    }
    if client:
        options["client_kwargs"] = client
    if endpoint_url:
        options["endpoint_url"] = endpoint_url
    return options


@dataclass(frozen=True)
class Warehouse:
    # A pathlib.Path for a local warehouse, a UPath (fsspec) for an object store: the same API.
    root: Path | UPath

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
        """The warehouse of a config's `warehouse:` section (metering.config.Warehouse)."""
        return cls.at(settings.path, endpoint_url=settings.endpoint_url, region=settings.region)

    @property
    def is_object_store(self) -> bool:
        return not isinstance(self.root, Path)

    # --- paths -------------------------------------------------------------------------------
    def table_dir(self, zone: str, table: str) -> Path:
        return self.root / zone / table

    def day_path(self, zone: str, table: str, cluster: str, day: date) -> Path:
        return self.table_dir(zone, table) / f"cluster={cluster}" / f"day={day.isoformat()}" / "data.parquet"

    def day_dir(self, zone: str, table: str, cluster: str, day: date) -> Path:
        return self.day_path(zone, table, cluster, day).parent

    def day_files(self, zone: str, table: str, cluster: str, day: date) -> list[Path]:
        """Every Parquet file of a (cluster, day) folder: a fleet's raw day is written in parts."""
        folder = self.day_dir(zone, table, cluster, day)
        return sorted(folder.glob("*.parquet"), key=str) if folder.is_dir() else []

    def period_path(self, zone: str, table: str, period: str) -> Path:
        return self.table_dir(zone, table) / f"period={period}" / "data.parquet"

    def exports_dir(self, period: str) -> Path:
        return self.root / EXPORTS / period

    def periods_dir(self) -> Path:
        return self.root / PERIODS

    def scratch_dir(self, name: str) -> Path:
        """A local directory for DuckDB to spill to: under the root when it is local, else under the
        system temp directory (on Kubernetes an emptyDir; docs/deploy.md)."""
        base = Path(tempfile.gettempdir()) / "gpumeter" if self.is_object_store else self.root
        return base / ".tmp" / name

    def day_paths(
        self, zone: str, table: str, days: Iterable[date], cluster: str | None = None
    ) -> list[Path]:
        wanted = {d.isoformat() for d in days}
        base = self.table_dir(zone, table)
        if not base.exists():
            return []
        found = []
        for path in sorted(base.glob("cluster=*/day=*/data.parquet"), key=str):
            c = path.parent.parent.name.removeprefix("cluster=")
            d = path.parent.name.removeprefix("day=")
            if d in wanted and (cluster is None or c == cluster):
                found.append(path)
        return found

    def days(self, zone: str, table: str) -> list[tuple[str, date]]:
        base = self.table_dir(zone, table)
        out = []
        for path in sorted(base.glob("cluster=*/day=*/data.parquet"), key=str):
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
        if self.is_object_store:
            with _object_lock(path, f"cluster {cluster} day {day.isoformat()}", timeout_s):
                yield
            return
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

    def stage_day(self, zone: str, cluster: str, day: date, schemas: dict[str, pa.Schema]) -> StagedDay:
        """A writer of a (cluster, day)'s tables part by part, replacing the stored files only at commit."""
        return StagedDay(self, zone, cluster, day, schemas)

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
        return pa.concat_tables([read_parquet(p) for p in paths], promote_options="default")

    def connect(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB session with a view per stored table: reading never locks a writer.
        Stored tables carry their own cluster/day columns, so the Hive path is not read back."""
        con = duckdb.connect()
        for zone in (RAW, STAGING, INTERMEDIATE, MARTS):
            zone_dir = self.root / zone
            if not zone_dir.exists():
                continue
            for table_dir in sorted((p for p in zone_dir.iterdir() if p.is_dir()), key=str):
                # The directory name becomes an SQL identifier: anything gpumeter did not name is not a table.
                if not _TABLE_NAME.match(table_dir.name) or not any(table_dir.glob("**/data.parquet")):
                    continue
                (pattern,) = duckdb_paths(con, [table_dir / "**" / "data.parquet"])
                pattern = pattern.replace("'", "''")  # a view takes no parameters
                con.execute(
                    f'CREATE OR REPLACE VIEW "{table_dir.name}" AS '
                    f"SELECT * FROM read_parquet('{pattern}', hive_partitioning = false, union_by_name = true)"
                )
        return con


def _object_store_root(location: str, endpoint_url: str | None, region: str | None) -> UPath:
    try:
        root = UPath(location, **store_options(location, endpoint_url, region))
    except (ImportError, ValueError) as exc:
        driver = OBJECT_STORE_DRIVERS[urlparse(location).scheme.lower()]
        raise WarehouseError(
            f"warehouse {location}: {exc}. Install the fsspec driver {driver} (pip install {driver}) "
            "or set warehouse.path to a local directory"
        ) from None
    if not root.path.strip("/"):
        raise WarehouseError(f"warehouse {location}: the URI names no bucket; use s3://bucket/prefix")
    _check_reachable(root)
    return root


_REACHED: set[str] = set()  # object-store roots already checked by this process


def _check_reachable(root: UPath) -> None:
    key = f"{root} {sorted(root.storage_options.items())}"
    if key in _REACHED:
        return
    bucket, _, prefix = root.path.strip("/").partition("/")
    try:
        if hasattr(root.fs, "call_s3"):  # list the prefix only: IAM often grants ListBucket on it alone
            root.fs.call_s3(
                "list_objects_v2", Bucket=bucket, Prefix=f"{prefix}/" if prefix else "", MaxKeys=1
            )
        else:
            root.fs.ls(bucket, detail=False)
    except Exception as exc:  # noqa: BLE001 - every driver has its own errors; all mean the same here
        raise WarehouseError(
            f"warehouse {root} cannot be used ({type(exc).__name__}: {exc}); {_STORE_HELP}"
        ) from None
    _REACHED.add(key)


def duckdb_paths(con: duckdb.DuckDBPyConnection, paths: Iterable[Path | UPath]) -> list[str]:
    """The strings DuckDB reads `paths` by: an object-store path gets its fsspec filesystem registered
    with `con` (DuckDB's own httpfs is not needed), so DuckDB reads the objects where they lie."""
    out = []
    for path in paths:
        if not isinstance(path, Path):
            fs = path.fs
            if not con.filesystem_is_registered(
                fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
            ):
                con.register_filesystem(fs)
        out.append(str(path))
    return out


def read_parquet(path: Path | UPath) -> pa.Table:
    """A stored Parquet file, local or on an object store (without Hive inference: tables carry their
    own cluster/day columns)."""
    if isinstance(path, Path):
        return pq.read_table(path, partitioning=None)
    with path.open("rb") as fh:
        return pq.read_table(fh, partitioning=None)


@contextmanager
def _object_lock(path: UPath, what: str, timeout_s: float) -> Iterator[None]:
    """A lock object created only if absent (conditional PUT): the run that creates it holds `what`."""
    since = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    holder = f"pid {os.getpid()} on {socket.gethostname()} since {since}"
    deadline = time.monotonic() + max(0.0, timeout_s)
    while True:
        try:
            path.fs.pipe_file(path.path, holder.encode(), mode="create")
            break
        except FileExistsError:
            if time.monotonic() >= deadline:
                try:
                    held_by = path.read_text(encoding="utf-8").strip() or "another run"
                except OSError:
                    held_by = "another run"
                raise WarehouseError(
                    f"{what} is being written by {held_by} (lock {path}); this run wrote nothing. Wait for it "
                    f"to finish and re-run, or raise {LOCK_TIMEOUT_ENV}. If that run is dead (pod killed), "
                    f"delete the lock object {path} and re-run."
                ) from None
            time.sleep(0.5)
        except OSError as exc:
            if "conflict" in str(exc).lower():  # S3's 409 ConditionalRequestConflict: a racing create; retry
                time.sleep(0.5)
                continue
            raise WarehouseError(
                f"could not create the lock {path}: {exc}. Nothing was written; {_STORE_HELP}"
            ) from None
    try:
        yield
    finally:
        path.fs.rm_file(path.path)


class StagedDay:
    """A (cluster, day)'s tables written part by part into temp files, so that a day larger than memory can be
    stored (a 10,000-GPU raw day). Nothing stored changes until `commit`, which replaces each table's file
    the way `write_day` does (atomic rename locally, one upload on an object store); `discard` (or a failure
    before commit) leaves the stored day as it was."""

    def __init__(
        self, warehouse: Warehouse, zone: str, cluster: str, day: date, schemas: dict[str, pa.Schema]
    ) -> None:
        self.targets = {table: warehouse.day_path(zone, table, cluster, day) for table in schemas}
        self.schemas = schemas
        self.rows = dict.fromkeys(schemas, 0)
        self._scratch = warehouse.scratch_dir(f"stage-{cluster}-{day.isoformat()}-{os.getpid()}")
        self._temps: dict[str, Path] = {}
        self._writers: dict[str, pq.ParquetWriter] = {}

    def _temp_for(self, table: str) -> Path:
        target = self.targets[table]
        if isinstance(target, Path):  # beside the target: the rename is atomic; a dead writer's is swept
            return _temp_beside(target)
        # An object store: a local file, uploaded whole at commit.
        return _temp_beside(self._scratch / f"{table}.parquet")

    def write(self, table: str, rows: pa.Table) -> None:
        if table not in self._writers:
            self._temps[table] = self._temp_for(table)
            self._writers[table] = pq.ParquetWriter(
                self._temps[table], self.schemas[table], compression="zstd"
            )
        try:
            self._writers[table].write_table(rows.cast(self.schemas[table]))
        except OSError as exc:
            self.discard()
            raise _write_error(self.targets[table], exc) from None
        self.rows[table] += rows.num_rows

    def commit(self) -> dict[str, int]:
        """Replace every table's stored file (a table no part had is stored empty); rows per table."""
        try:
            for table, target in self.targets.items():
                if table not in self._writers:
                    self.write(table, self.schemas[table].empty_table())
                temp = self._temps.pop(table)
                try:
                    self._writers.pop(table).close()
                    if isinstance(target, Path):
                        _sweep_stale_temps(target)
                        _install(temp, target)
                    else:
                        target.fs.put_file(str(temp), target.path)
                except OSError as exc:
                    temp.unlink(missing_ok=True)
                    raise _write_error(target, exc) from None
                temp.unlink(missing_ok=True)
        finally:
            self.discard()
        return dict(self.rows)

    def discard(self) -> None:
        for writer in self._writers.values():
            with suppress(OSError):
                writer.close()
        self._writers.clear()
        for temp in self._temps.values():
            temp.unlink(missing_ok=True)
        self._temps.clear()
        shutil.rmtree(self._scratch, ignore_errors=True)


def _write_error(path: Path | UPath, exc: OSError) -> WarehouseError:
    if not isinstance(path, Path):
        return WarehouseError(f"could not write {path}: {exc}. Earlier results are untouched; {_STORE_HELP}")
    return WarehouseError(
        f"could not write {path}: {exc.strerror or exc}. Earlier results are untouched; "
        "free disk space or fix permissions on the warehouse, then re-run the day."
    )


def _temp_beside(path: Path) -> Path:
    """An empty temp file in `path`'s folder, for a write that ends with `_install`. The pid in the name lets a
    later write remove what a killed writer left (_sweep_stale_temps); readers never see it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(
            prefix=f".{path.name}.{os.getpid()}.", suffix=f".{uuid.uuid4().hex[:8]}.tmp", dir=path.parent
        )
    except OSError as exc:
        raise _write_error(path, exc) from None
    os.close(fd)
    return Path(tmp_name)


def _install(tmp: Path, path: Path) -> None:
    """Make a complete temp file the file at `path`: fsynced, then renamed over the old one (atomic)."""
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def atomic_write_parquet(path: Path, rows: pa.Table) -> Path:
    """Write `rows` to `path` so that the file is either the old one or the complete new one."""
    if not isinstance(path, Path):
        buffer = io.BytesIO()
        pq.write_table(rows, buffer, compression="zstd")
        return _put_object(path, buffer.getvalue())
    tmp = _temp_beside(path)
    _sweep_stale_temps(path)
    try:
        pq.write_table(rows, tmp, compression="zstd")
        _install(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _write_error(path, exc) from exc
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


def _put_object(path: UPath, data: bytes) -> UPath:
    """An object-store write: one PUT of the whole object, which readers see whole or not at all."""
    try:
        path.fs.pipe_file(path.path, data)
    except OSError as exc:
        raise _write_error(path, exc) from None
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    if not isinstance(path, Path):
        return _put_object(path, text.encode("utf-8"))
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


def append_line(path: Path, line: str) -> None:
    """Append one line to a log that is never rewritten. Locally: O_APPEND and fsync (the file, and its
    directory entry when new). An object has no append: the log is read and put back whole in one PUT
    (period close/reopen are rare and run one at a time, docs/deploy.md)."""
    if not isinstance(path, Path):
        before = path.read_bytes() if path.exists() else b""
        _put_object(path, before + line.encode("utf-8"))
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:  # the new directory entry must survive a crash too
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def move(source: Path, target: Path) -> None:
    """Rename a file: atomic locally; on an object store a copy then a delete (the source stays whole
    until the copy is complete)."""
    if isinstance(source, Path):
        os.replace(source, target)
    else:
        source.fs.mv(source.path, target.path)
