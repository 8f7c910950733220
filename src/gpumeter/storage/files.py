"""Writes that never leave half a file: atomic replacement of Parquet and text files (a temp file beside the
target, fsync, rename; one PUT on an object store), an append-only log, and the error every failed write
becomes."""

from __future__ import annotations

import io
import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from upath import UPath

# How every Parquet file of the warehouse is written. DuckDB reads a column in vectors of 2,048 rows, and a
# vector read from one data page of a dictionary-encoded column stays a dictionary vector (its strings are
# hashed once per dictionary, not once per row); one that spans two pages is copied out flat. Pages cut at
# multiples of 2,048 rows (pyarrow cuts a page only between write batches) keep every vector in one page.
PARQUET_WRITE_OPTIONS: dict[str, object] = {
    "compression": "zstd",
    "write_batch_size": 2048,
    "max_rows_per_page": 64 * 2048,
}


def parquet_write_options(schema: pa.Schema) -> dict[str, object]:
    """PARQUET_WRITE_OPTIONS for a table of `schema`. Labels and keys are dictionary-encoded; measured values
    (floats) and times (int64 ms) are written plain: they seldom repeat within a page, so a dictionary of
    them is built only to be dropped again (the larger part of a raw day's write), and where it is kept the
    file is larger and reads no faster."""
    labels = [f.name for f in schema if not (pa.types.is_floating(f.type) or pa.types.is_int64(f.type))]
    return {**PARQUET_WRITE_OPTIONS, "use_dictionary": labels}


class WarehouseError(RuntimeError):
    """A storage problem, with the path and what to do next."""


# What to do when the store cannot be reached, said once for every way it fails.


_STORE_HELP = (
    "check the bucket exists, the endpoint (warehouse.endpoint_url or $AWS_ENDPOINT_URL) is reachable and "
    "the credentials ($AWS_ACCESS_KEY_ID/$AWS_SECRET_ACCESS_KEY, or the pod's IAM role) may list and write it"
)


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


@contextmanager
def _replacing(path: Path) -> Iterator[Path]:
    """A temp file beside `path` to write into: fsynced and renamed over `path` when the block ends, removed when
    it fails, so that the file is either the old one or the complete new one."""
    tmp = _temp_beside(path)
    _sweep_stale_temps(path)
    try:
        yield tmp
        _install(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _write_error(path, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_parquet(path: Path, rows: pa.Table) -> Path:
    """Write `rows` to `path` so that the file is either the old one or the complete new one."""
    if not isinstance(path, Path):
        buffer = io.BytesIO()
        pq.write_table(rows, buffer, **parquet_write_options(rows.schema))
        return _put_object(path, buffer.getvalue())
    with _replacing(path) as tmp:
        pq.write_table(rows, tmp, **parquet_write_options(rows.schema))
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


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write `data` to `path` so that the file is either the old one or the complete new one (one PUT on an
    object store)."""
    if not isinstance(path, Path):
        return _put_object(path, data)
    with _replacing(path) as tmp:
        tmp.write_bytes(data)
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


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


def fsync_folder(folder: Path) -> None:
    """Make a folder's entries (a rename, a new file) durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def move(source: Path, target: Path) -> None:
    """Rename a file: atomic locally; on an object store a copy then a delete (the source stays whole
    until the copy is complete)."""
    if isinstance(source, Path):
        os.replace(source, target)
    else:
        source.fs.mv(source.path, target.path)


def read_parquet(path: Path | UPath, columns: list[str] | None = None) -> pa.Table:
    """A stored Parquet file (its `columns`, default all), local or on an object store (without Hive
    inference: tables carry their own cluster/day columns)."""
    if isinstance(path, Path):
        return pq.read_table(path, columns=columns, partitioning=None)
    with path.open("rb") as fh:
        return pq.read_table(fh, columns=columns, partitioning=None)
