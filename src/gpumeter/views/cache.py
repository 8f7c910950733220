"""What the dashboard keeps in memory between page views: read results, and the DuckDB session they run in.

Read results are kept per key, and the key always holds the viewer's scope (role and tenant), the read and its
arguments (filters included), a fingerprint of the config, and the data version of every stored file the read
depends on (`files_version`). So a result is only ever handed to a viewer of the same scope, for the same
question, over the same files: a day re-metered (its Parquet file replaced by an atomic rename) changes the
version, and the next read misses and reads the new file. Nothing has to be told to forget anything; old
entries age out (least recently used first) under a memory bound.

The DuckDB session (an in-memory database with a view per stored table, `Warehouse.connect()`) is kept per
warehouse and set of stored tables: its views glob their files at query time, so new days are read without
a new session; a table that appears or goes away makes a new one. Each page view reads through its own
cursor of it (DuckDB connections are not shared between threads).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import polars as pl
import pyarrow as pa
from upath import UPath

from gpumeter.storage import paths
from gpumeter.storage.warehouse import _TABLE_NAME, Warehouse

T = TypeVar("T")

CACHE_ENV = "GPUMETER_DASHBOARD_CACHE_MB"
DEFAULT_CACHE_MB = 512
# Zones whose tables get a view, in Warehouse.connect()'s order.
ZONES = (paths.RAW, paths.STAGING, paths.INTERMEDIATE, paths.MARTS)


def cache_bytes_from_env() -> int:
    """The memory bound of the read cache: GPUMETER_DASHBOARD_CACHE_MB (0 turns the cache off)."""
    text = os.environ.get(CACHE_ENV, "").strip()
    try:
        return max(0, int(float(text) * 2**20)) if text else DEFAULT_CACHE_MB * 2**20
    except ValueError:
        raise ValueError(
            f"{CACHE_ENV}={text!r}: give a number of megabytes (0 turns the cache off)"
        ) from None


# --- data versions --------------------------------------------------------------------------------
def files_version(folders: Iterable[Path | UPath]) -> str:
    """A digest of every file under `folders`: its path, size and modification stamp, and on a local disk its
    inode (an atomic rename always brings a new one, even where size and time happen to repeat). On an object
    store one listing per folder, with each object's ETag where the store gives one."""
    entries: list[tuple[object, ...]] = []
    for folder in folders:
        if isinstance(folder, Path):
            entries.extend(_local_entries(folder))
        else:
            entries.extend(_store_entries(folder))
    entries.sort(key=repr)
    return hashlib.sha256(repr(entries).encode()).hexdigest()


def _local_entries(folder: Path) -> list[tuple[object, ...]]:
    found: list[tuple[object, ...]] = []
    _scan(str(folder), found)
    return found or [(str(folder), folder.exists())]


def _scan(folder: str, found: list[tuple[object, ...]]) -> None:
    try:
        entries = os.scandir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return
    with entries:
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    _scan(entry.path, found)
                    continue
                stat = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # replaced between the listing and the stat: the next read sees it
                continue
            found.append((entry.path, stat.st_size, stat.st_mtime_ns, stat.st_ino))


def _store_entries(folder: UPath) -> list[tuple[object, ...]]:
    fs, path = folder.fs, folder.path
    fs.invalidate_cache(path)  # fsspec keeps listings: a version must come from the store itself
    try:
        listing = fs.find(path, detail=True)
    except FileNotFoundError:
        listing = {}
    found: list[tuple[object, ...]] = [
        (
            name,
            info.get("size"),
            info.get("ETag") or info.get("etag"),
            str(info.get("LastModified") or info.get("mtime")),
        )
        for name, info in listing.items()
    ]
    return found or [(path, False)]


# --- the DuckDB session ---------------------------------------------------------------------------
def stored_tables(warehouse: Warehouse) -> dict[str, Path | UPath]:
    """Every stored table with data, by the view name Warehouse.connect() gives it, and its folder."""
    tables: dict[str, Path | UPath] = {}
    for zone in ZONES:
        zone_dir = warehouse.root / zone
        if not zone_dir.exists():
            continue
        for table_dir in sorted((p for p in zone_dir.iterdir() if p.is_dir()), key=str):
            if _TABLE_NAME.match(table_dir.name) and any(table_dir.glob(f"**/{paths.DATA_FILE}")):
                tables[table_dir.name] = table_dir
    return tables


@dataclass
class _Sessions:
    """DuckDB databases set up for a warehouse and its set of tables, the most recent few."""

    keep: int = 4
    lock: threading.Lock = field(default_factory=threading.Lock)
    databases: OrderedDict[Hashable, duckdb.DuckDBPyConnection] = field(default_factory=OrderedDict)

    def cursor(self, warehouse: Warehouse, tables: dict[str, Path | UPath]) -> duckdb.DuckDBPyConnection:
        key = (str(warehouse.root), tuple((name, str(folder)) for name, folder in tables.items()))
        with self.lock:
            database = self.databases.get(key)
            if database is None:
                database = warehouse.connect()
                self.databases[key] = database
                while len(self.databases) > self.keep:
                    # Not closed: a page view still reading through one of its cursors keeps it alive.
                    self.databases.popitem(last=False)
            self.databases.move_to_end(key)
            return database.cursor()


SESSIONS = _Sessions()


# --- the read cache -------------------------------------------------------------------------------
@dataclass
class _Flight:
    """One read of a key in progress: others asking for the same key wait for it instead of reading too."""

    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    failed: bool = False


class ReadCache:
    """A thread-safe LRU of read results under a memory bound. Concurrent misses of one key read once."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._flights: dict[Hashable, _Flight] = {}

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def used_bytes(self) -> int:
        """The memory the kept results take, roughly (`_size`)."""
        return self._bytes

    def list_keys(self) -> list[Hashable]:
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def get(self, key: Hashable, read: Callable[[], T]) -> T:
        if self.max_bytes <= 0:
            return read()
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self.hits += 1
                return self._entries[key][0]
            flight = self._flights.get(key)
            owner = flight is None
            if flight is None:
                flight = self._flights[key] = _Flight()
            self.misses += 1
        if not owner:
            flight.done.wait()
            if not flight.failed:
                return flight.value
            return read()  # the other read failed: this one reports its own error, or succeeds
        try:
            value = read()
        except BaseException:
            flight.failed = True
            raise
        else:
            flight.value = value
            self._store(key, value)
            return value
        finally:
            with self._lock:
                self._flights.pop(key, None)
            flight.done.set()

    def _store(self, key: Hashable, value: Any) -> None:
        size = _size(value)
        if size > self.max_bytes:
            return
        with self._lock:
            if key in self._entries:
                self._bytes -= self._entries.pop(key)[1]
            self._entries[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes and self._entries:
                self._bytes -= self._entries.popitem(last=False)[1][1]


def _size(value: Any) -> int:
    """A result's memory, roughly: frames and tables exactly, anything else by its parts."""
    if isinstance(value, pl.DataFrame):
        return int(value.estimated_size()) + 256
    if isinstance(value, pa.Table):
        return int(value.nbytes) + 256
    if isinstance(value, list | tuple):
        return 256 + sum(_size(v) for v in value)
    if hasattr(value, "__dataclass_fields__"):
        return 256 + sum(_size(getattr(value, name)) for name in value.__dataclass_fields__)
    return 64


READS = ReadCache(cache_bytes_from_env())
