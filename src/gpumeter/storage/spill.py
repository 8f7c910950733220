"""The scratch folders DuckDB spills to (Warehouse.scratch_dir): those of killed runs swept, and a disk that
fills while DuckDB spills told as a warehouse problem."""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

import duckdb

from gpumeter.storage.files import WarehouseError

# A scratch folder's name ends with its run's pid (`duckdb-<cluster>-<day>-<pid>`, `stage-…-<pid>`).
_OWNER = re.compile(r"-(?P<pid>\d+)$")

# What DuckDB says when a write to its temp folder or database file fails for lack of room.
_DISK_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}
_DISK_WORDS = (
    "no space left",
    "file too large",
    "disk quota",
    "temp_directory",
    "temporary directory",
    ".wal",
)


def is_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host (another user's counts: PermissionError)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_dead_scratch(folder: Path) -> list[Path]:
    """Remove the scratch folders in `folder` whose run is dead (killed: its `finally` never ran); the removed.
    A live run's folder, this run's, and any name without a pid at its end are kept."""
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    for entry in entries:
        owner = _OWNER.search(entry.name)
        if owner is None or not entry.is_dir(follow_symlinks=False):
            continue
        pid = int(owner["pid"])
        if pid <= 1 or pid == os.getpid() or is_alive(pid):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def spill_error(exc: BaseException | None, folder: Path | None) -> WarehouseError | None:
    """The WarehouseError of a DuckDB error that is its temp folder or database file failing to grow (a full
    disk while it spills), or of an OSError of a full disk (a Python model's session files, kept there), else
    None: that error is the model's."""
    if folder is None:
        return None
    text = str(exc)
    lowered = text.lower()
    if isinstance(exc, OSError):
        full = exc.errno in _DISK_ERRNOS or any(word in lowered for word in _DISK_WORDS[:3])
    else:
        about_disk = str(folder) in text or any(word in lowered for word in _DISK_WORDS)
        full = isinstance(exc, duckdb.IOException | duckdb.OutOfMemoryException) and about_disk
    if not full:
        return None
    cause = " ".join(text.split())
    return WarehouseError(
        f"DuckDB could not spill to {folder} ({cause}): free disk space under {folder}, or raise "
        "warehouse.memory_limit so that less is spilled (an object store's runs spill under $TMPDIR), then "
        "re-run the day; nothing stored changed."
    )
