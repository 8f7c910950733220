"""The lock of a (cluster, day): runs of one partition never interleave their writes (R15).

Locally an fcntl lock on a file, which dies with its process (a `kill -9` never leaves a partition locked); on
an object store a lock object created only if absent (conditional PUT, If-None-Match: *), deleted when the run
ends, and named in the error of the next run when a killed run left it (docs/deploy.md).
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from upath import UPath

from gpumeter.storage.files import _STORE_HELP, WarehouseError

# How long a run waits for another run of the same day before it gives up (seconds).
LOCK_TIMEOUT_ENV = "GPUMETER_LOCK_TIMEOUT_SECONDS"
DEFAULT_LOCK_TIMEOUT_S = 6 * 3600.0


class LockBusy(WarehouseError):
    """Another run held the lock for longer than this run would wait (with no wait: at all)."""


@contextmanager
def hold(path: Path | UPath, what: str, timeout_s: float | None = None) -> Iterator[None]:
    """Hold the lock at `path` for `what` (a partition, named in errors): another holder waits (up to
    `timeout_s`, default from $GPUMETER_LOCK_TIMEOUT_SECONDS, else 6 h) and then fails with one message; it
    never writes beside us."""
    if timeout_s is None:
        timeout_s = float(os.environ.get(LOCK_TIMEOUT_ENV, DEFAULT_LOCK_TIMEOUT_S))
    if not isinstance(path, Path):
        with _object_lock(path, what, timeout_s):
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
                    raise LockBusy(
                        f"{what} is being written by {holder} (lock {path}); "
                        f"this run wrote nothing. Wait for it to finish and re-run, or raise {LOCK_TIMEOUT_ENV}."
                    ) from None
                time.sleep(0.1)
        since = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {since}".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


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
                raise LockBusy(
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
