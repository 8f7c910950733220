"""A (cluster, day)'s files replaced together: the stored day is the old one or the new one, never half of each.

A commit (DayCommit) goes in four steps:

1. every new file is written whole and fsynced beside its target: a temp file `.data.parquet.<pid>.<hex>.tmp`
   locally, an object of that name on an object store (readers read `data.parquet` and `*.parquet` only);
2. a journal (gpumeter.storage.paths.journal_file, JSON, written atomically) lists every staged → target pair;
3. each staged file is renamed over its target (on an object store: a copy, then a delete);
4. the journal is removed.

A run killed before step 2 changed nothing stored; its temp files are swept by the next commit or write of
those files (by pid locally; on an object store every staged object beside a target is a dead run's, since
commits run under the day lock). A run killed after step 2 leaves the journal: the next holder of the
(cluster, day) lock completes the renames before it does anything else (roll_forward, from
Warehouse.day_lock), and so does a reader (Warehouse.connect, day_paths, days) that finds the journal and
takes the lock, which it can only when the writer is dead.

What a reader can still see: a reader that lists the files while a live writer is between steps 3 and 4 (a
few renames: milliseconds locally, a few server-side copies on an object store), or whose wait for the lock
timed out, may see some tables new and some old. A DuckDB view globs its files at each query, so one query
that reads two tables of the day while they are being renamed can mix them; files already opened stay the
old ones (locally the renamed-over file lives on through its open handle). A reader without write access
(a read-only mount) cannot roll a dead writer's journal forward and reads what is stored.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import date
from pathlib import Path
from types import TracebackType

import pyarrow as pa
import pyarrow.parquet as pq
from upath import UPath

from gpumeter.storage import paths
from gpumeter.storage.files import (
    _STORE_HELP,
    WarehouseError,
    _sweep_stale_temps,
    _temp_beside,
    _write_error,
    atomic_write_text,
    fsync_folder,
    move,
    parquet_write_options,
)

AnyPath = Path | UPath


class DayCommit:
    """New files of one (cluster, day), installed together by `install` (or by the block's end when used as a
    context manager; a failure in the block discards them). The caller holds the (cluster, day) lock. With
    `root` None (a DayInParts built without a warehouse) the files are installed with no journal."""

    def __init__(self, root: AnyPath | None, cluster: str, day: date) -> None:
        self.root = root
        self.cluster = cluster
        self.day = day
        self._staged: dict[str, tuple[AnyPath, AnyPath]] = {}  # target text -> (staged, target)
        self._journaled = False

    @property
    def journal(self) -> AnyPath | None:
        return None if self.root is None else paths.journal_file(self.root, self.cluster, self.day)

    def stage_table(self, target: AnyPath, rows: pa.Table) -> None:
        """Write `rows` whole beside `target` (its Parquet file)."""
        try:
            staged = self._staged_path(target)
        except WarehouseError:
            self.discard()
            raise
        try:
            if isinstance(staged, Path):
                pq.write_table(rows, staged, **parquet_write_options(rows.schema))
                _fsync(staged)
            else:
                with staged.fs.open(staged.path, "wb") as fh:
                    pq.write_table(rows, fh, **parquet_write_options(rows.schema))
        except OSError as exc:
            self.discard()
            raise _write_error(target, exc) from None

    def stage_file(self, target: AnyPath, complete: Path) -> None:
        """A complete local file as `target`'s new one: locally a temp file already beside it (from
        files._temp_beside), on an object store uploaded beside it; `complete` is then this commit's."""
        try:
            if isinstance(target, Path):
                if complete.parent != target.parent:
                    raise ValueError(f"{complete} is not beside {target}: it could not be renamed atomically")
                _sweep_stale_temps(target)
                _fsync(complete)
                self._staged[str(target)] = (complete, target)
                return
            staged = self._staged_path(target)
            staged.fs.put_file(str(complete), staged.path)
        except OSError as exc:
            complete.unlink(missing_ok=True)
            self.discard()
            raise _write_error(target, exc) from None
        complete.unlink(missing_ok=True)

    def install(self) -> None:
        """Journal the staged files, rename each over its target, remove the journal. A failure before the
        journal is written leaves every stored file as it was; one after it leaves the journal, which the next
        holder of the day lock completes."""
        if not self._staged:
            return
        pairs = list(self._staged.values())
        journal = self.journal
        if journal is not None:
            doc = {
                "cluster": self.cluster,
                "day": self.day.isoformat(),
                "pid": os.getpid(),
                "files": [[_relative(self.root, s), _relative(self.root, t)] for s, t in pairs],
            }
            try:
                atomic_write_text(journal, json.dumps(doc, indent=1))
            except WarehouseError:
                self.discard()
                raise
            self._journaled = True
            if isinstance(journal, Path):
                fsync_folder(journal.parent)  # the journal is durable before the first rename
        _rename_all(pairs, journal)
        self._staged.clear()
        self._journaled = False
        if journal is not None:
            _remove(journal)

    def discard(self) -> None:
        """Remove the staged files, unless the journal names them (a roll-forward needs them)."""
        if self._journaled:
            return
        for staged, _ in self._staged.values():
            try:
                if isinstance(staged, Path):
                    staged.unlink(missing_ok=True)
                else:
                    staged.fs.rm_file(staged.path)
            except OSError:
                continue  # swept by the next commit of the file
        self._staged.clear()

    def __enter__(self) -> DayCommit:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is None:
            self.install()
        else:
            self.discard()

    def _staged_path(self, target: AnyPath) -> AnyPath:
        """A new staged file beside `target`, this commit's; the dead writers' ones beside it swept."""
        if isinstance(target, Path):
            staged = _temp_beside(target)
            _sweep_stale_temps(target)
        else:
            _sweep_staged_objects(target)
            staged = target.parent / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        self._staged[str(target)] = (staged, target)
        return staged


def pending(root: AnyPath) -> list[tuple[str, date]]:
    """(cluster, day) of every journal under `root`: one folder listing, nothing when there are none."""
    folder = root / paths.JOURNALS
    try:
        if isinstance(folder, Path):
            names = os.listdir(folder)
        else:
            folder.fs.invalidate_cache(folder.path)  # another process's journal, not this one's listing
            names = [str(n).rstrip("/").rsplit("/", 1)[-1] for n in folder.fs.ls(folder.path, detail=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(found for name in names if (found := paths.journal_day(name)) is not None)


def roll_forward(root: AnyPath, cluster: str, day: date) -> bool:
    """Complete a killed run's commit of (cluster, day) from its journal; whether there was one. The caller
    holds the day lock. Idempotent: a pair whose staged file is gone was installed already."""
    journal = paths.journal_file(root, cluster, day)
    try:
        text = journal.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise WarehouseError(f"could not read the journal {journal}: {exc}; {_STORE_HELP}") from None
    try:
        pairs = [(root / staged, root / target) for staged, target in json.loads(text)["files"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise WarehouseError(
            f"the journal {journal} of an unfinished commit is damaged ({exc}); the day may be half replaced: "
            "remove the journal and re-run the day"
        ) from None
    _rename_all(pairs, journal)
    _remove(journal)
    return True


def _rename_all(pairs: list[tuple[AnyPath, AnyPath]], journal: AnyPath | None) -> None:
    """Rename each staged file over its target (one already renamed is skipped), then make the renames
    durable before the journal goes."""
    for staged, target in pairs:
        try:
            try:
                move(staged, target)  # type: ignore[arg-type]
            except FileNotFoundError:
                if _exists(staged):
                    raise
                continue  # installed by the run that wrote the journal, or an earlier roll-forward
        except OSError as exc:
            raise _unfinished(journal, target, exc) from None
    try:
        for folder in {target.parent for _, target in pairs if isinstance(target, Path)}:
            fsync_folder(folder)
    except OSError as exc:
        raise _unfinished(journal, pairs[-1][1], exc) from None


def _unfinished(journal: AnyPath | None, target: AnyPath, exc: OSError) -> WarehouseError:
    if journal is None:
        return _write_error(target, exc)  # type: ignore[arg-type]
    return WarehouseError(
        f"could not write {target}: {exc}. The day's new files are staged and listed in {journal}: the next run "
        "of the day (or a read) completes the replacement; fix the warehouse (disk space, permissions, the "
        "store's reachability) and re-run the day."
    )


def _sweep_staged_objects(target: UPath) -> None:
    """Staged objects beside `target` left by killed runs. Commits run under the day lock and a pending
    journal is rolled forward when the lock is taken, so any staged object found here is a dead run's."""
    prefix = f".{target.name}."
    folder = target.parent
    try:
        folder.fs.invalidate_cache(folder.path)
        names = folder.fs.ls(folder.path, detail=False)
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        leaf = str(name).rstrip("/").rsplit("/", 1)[-1]
        if leaf.startswith(prefix) and leaf.endswith(".tmp"):
            folder.fs.rm_file(str(name))


def _relative(root: AnyPath | None, path: AnyPath) -> str:
    base = str(root).rstrip("/") + "/"
    if not str(path).startswith(base):
        raise ValueError(f"{path} is not under {root}")
    return str(path)[len(base) :]


def _exists(path: AnyPath) -> bool:
    if isinstance(path, Path):
        return path.exists()
    path.fs.invalidate_cache(path.path)
    return path.fs.exists(path.path)


def _remove(journal: AnyPath) -> None:
    """Remove a done commit's journal. Left behind (a failed delete), it is harmless: its files are all
    installed, and the next holder of the day lock removes it."""
    try:
        if isinstance(journal, Path):
            journal.unlink(missing_ok=True)
        else:
            journal.fs.rm_file(journal.path)
    except OSError:
        return


def _fsync(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())
