"""A day is replaced whole or not at all (gpumeter.storage.day_commit), a killed run's scratch folders are
swept, and a disk that fills while DuckDB spills is a WarehouseError. Real files, real processes killed with
SIGKILL, a real S3 server for the object store."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from gpumeter.models.partition import meter_partition_day
from gpumeter.storage import day_commit, paths
from gpumeter.storage.files import WarehouseError, read_parquet
from gpumeter.storage.paths import MARTS, RAW
from gpumeter.storage.spill import spill_error
from gpumeter.storage.warehouse import Warehouse
from tests.builders import FactoryBuilder
from tests.s3_server import s3_server
from tests.test_rules import H100, P1, factory, make_config
from tests.whole_day_child import CLUSTER, DAY, TABLES, day_rows

REPO = Path(__file__).resolve().parent.parent
CHILD = REPO / "tests" / "whole_day_child.py"


def _old_day(root: Path | str) -> Warehouse:
    """A warehouse whose day has every table of the child's commit, each holding "old"."""
    warehouse = Warehouse.at(root)
    for table in TABLES:
        warehouse.write_day(MARTS, table, CLUSTER, DAY, day_rows(table, "old"))
    return warehouse


def _stored(warehouse: Warehouse) -> dict[str, str]:
    """Each table's stored value, read straight from its file (no reader's roll-forward)."""
    return {
        t: read_parquet(warehouse.day_path(MARTS, t, CLUSTER, DAY)).column("value")[0].as_py() for t in TABLES
    }


def _killed_child(root: Path | str, moment: str) -> None:
    done = subprocess.run(
        [sys.executable, str(CHILD), str(root), "new", moment], capture_output=True, text=True, cwd=REPO
    )
    assert done.returncode == -signal.SIGKILL, done.stderr


def _temps(root: Path) -> list[Path]:
    return sorted(root.rglob(".*.tmp"))


# --- kill -9 in the middle of a day's commit -----------------------------------------------------------


@pytest.mark.parametrize("reader", ["connect", "read_days", "day_paths", "day_lock"])
def test_a_commit_killed_after_its_second_rename_is_completed_before_anyone_reads_the_day(
    tmp_path: Path, reader: str
) -> None:
    """The child renames two of four tables and is SIGKILLed: on disk the day is half new. A reader (or the
    next holder of the day lock) completes the commit from its journal first, so it sees every table new."""
    warehouse = _old_day(tmp_path / "warehouse")
    _killed_child(warehouse.root, "after-rename:2")
    assert sorted(_stored(warehouse).values()) == ["new", "new", "old", "old"]  # the half day to be read
    journal = paths.journal_file(warehouse.root, CLUSTER, DAY)
    assert journal.exists() and day_commit.pending(warehouse.root) == [(CLUSTER, DAY)]

    if reader == "connect":
        con = warehouse.connect()
        seen = {t: con.execute(f"select value from {t}").fetchall() for t in TABLES}  # noqa: S608
        assert seen == {t: [("new",)] for t in TABLES}
    elif reader == "read_days":
        for table in TABLES:
            assert warehouse.read_days(MARTS, table, [DAY]).column("value").to_pylist() == ["new"]
    elif reader == "day_paths":
        assert [
            read_parquet(p)["value"][0].as_py() for t in TABLES for p in warehouse.day_paths(MARTS, t, [DAY])
        ] == ["new"] * len(TABLES)
    else:
        with warehouse.day_lock(DAY, cluster=CLUSTER):
            assert set(_stored(warehouse).values()) == {"new"}
            assert not journal.exists()
    assert set(_stored(warehouse).values()) == {"new"}
    assert not journal.exists() and day_commit.pending(warehouse.root) == []
    assert _temps(warehouse.root) == []  # every staged file was renamed into place


def test_a_commit_killed_after_its_last_rename_only_loses_its_journal(tmp_path: Path) -> None:
    """Killed between the last rename and the journal's removal: the roll-forward finds every staged file
    gone (installed) and only removes the journal."""
    warehouse = _old_day(tmp_path / "warehouse")
    _killed_child(warehouse.root, f"after-rename:{len(TABLES)}")
    assert set(_stored(warehouse).values()) == {"new"}
    assert day_commit.pending(warehouse.root) == [(CLUSTER, DAY)]
    with warehouse.day_lock(DAY, cluster=CLUSTER):
        pass
    assert day_commit.pending(warehouse.root) == [] and set(_stored(warehouse).values()) == {"new"}


def test_a_commit_killed_before_its_journal_changes_nothing_and_the_next_run_sweeps_its_temps(
    tmp_path: Path,
) -> None:
    warehouse = _old_day(tmp_path / "warehouse")
    before = {t: warehouse.day_path(MARTS, t, CLUSTER, DAY).read_bytes() for t in TABLES}
    _killed_child(warehouse.root, "before-journal")
    assert day_commit.pending(warehouse.root) == []
    assert len(_temps(warehouse.root)) == len(TABLES)  # every table staged, none installed
    con = warehouse.connect()
    assert {t: con.execute(f"select value from {t}").fetchone()[0] for t in TABLES} == dict.fromkeys(  # noqa: S608
        TABLES, "old"
    )
    assert {t: warehouse.day_path(MARTS, t, CLUSTER, DAY).read_bytes() for t in TABLES} == before

    # The next run of the day: its commit sweeps the dead run's temps beside each file it replaces.
    with warehouse.day_lock(DAY, cluster=CLUSTER), warehouse.day_commit(CLUSTER, DAY) as commit:
        for table in TABLES:
            commit.stage_table(warehouse.day_path(MARTS, table, CLUSTER, DAY), day_rows(table, "next"))
    assert set(_stored(warehouse).values()) == {"next"}
    assert _temps(warehouse.root) == []


# --- a real meter whose fourth mart cannot be written --------------------------------------------------


def _day(samples: int) -> FactoryBuilder:
    f = factory().gpu("n1", "GPU-1", H100).gpu("n2", "GPU-2", H100)
    for uuid in ("GPU-1", "GPU-2"):
        f.samples(uuid, range(samples), util=50, pod=P1)
    return f


def _store_raw(warehouse: Warehouse, f: FactoryBuilder) -> None:
    for name, table in f.build().tables().items():
        warehouse.write_day(RAW, name, f.cluster, f.day, table)


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.rglob("*.parquet")
    }


@pytest.fixture
def unwritable() -> Iterator[list[Path]]:
    """Folders made unwritable for real: chattr +i as root (root ignores modes), chmod 555 otherwise."""
    made: list[Path] = []
    yield made
    for folder in made:
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True, check=False)
        folder.chmod(0o755)


def _make_unwritable(folder: Path, made: list[Path]) -> None:
    made.append(folder)
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return
    done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot make a folder unwritable as root here: {done.stderr.strip()}")


def test_a_meter_whose_fourth_mart_cannot_be_written_leaves_every_mart_as_it_was(
    tmp_path: Path, unwritable: list[Path]
) -> None:
    config = make_config(warehouse={"path": str(tmp_path / "warehouse"), "persist_models": "marts"})
    warehouse = Warehouse.of(config.warehouse)
    _store_raw(warehouse, _day(30))
    _, results = meter_partition_day(config, warehouse, DAY)
    before = _digests(warehouse.root / MARTS)
    assert len(before) == len(results[CLUSTER]) >= 4

    _store_raw(warehouse, _day(60))  # a longer day: every mart would change
    fourth = list(results[CLUSTER])[3]
    table = fourth.removeprefix("mart_")
    folder = warehouse.day_dir(MARTS, table, CLUSTER, DAY)
    assert folder.is_dir(), fourth
    _make_unwritable(folder, unwritable)
    with pytest.raises(WarehouseError) as info:
        meter_partition_day(config, warehouse, DAY)
    message = str(info.value)
    assert (
        message.startswith(f"could not write {folder / paths.DATA_FILE}: ")
        and "Earlier results are untouched" in message
    )
    assert _digests(warehouse.root / MARTS) == before  # the three marts staged before it were not installed
    assert _temps(warehouse.root) == [] and day_commit.pending(warehouse.root) == []


# --- scratch folders of killed runs --------------------------------------------------------------------


def test_scratch_folders_of_dead_runs_are_swept_and_live_ones_kept(tmp_path: Path) -> None:
    warehouse = Warehouse.at(tmp_path / "warehouse")
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(ended.stdout)  # a process that has exited: its pid names no process now
    scratch = warehouse.root / paths.SCRATCH
    dead = scratch / f"duckdb-{CLUSTER}-{DAY.isoformat()}-{dead_pid}"
    live = scratch / f"duckdb-other-{DAY.isoformat()}-{os.getpid()}"  # this process, another of its days
    parent = scratch / f"kube-spans-{CLUSTER}-{DAY.isoformat()}-{os.getppid()}"  # another live process
    unnamed = scratch / "kept-by-hand"
    for folder in (dead, live, parent, unnamed):
        (folder / "session").mkdir(parents=True)
        (folder / "session" / "models.duckdb").write_bytes(b"x" * 1024)

    # A run: its raw day staged, which takes a scratch folder of its own.
    staged = warehouse.day_in_parts(RAW, CLUSTER, DAY, {})
    staged.discard()
    assert not dead.exists()
    assert live.exists() and parent.exists() and unnamed.exists()


# --- a disk that fills while DuckDB spills ------------------------------------------------------------


def test_a_disk_that_fills_while_duckdb_spills_is_one_warehouse_error_and_nothing_stored_changes(
    tmp_path: Path,
) -> None:
    """RLIMIT_FSIZE in a child (the kernel refuses a write past 64 KiB: EFBIG, as a full disk refuses it with
    ENOSPC) while the day is metered with a 16 MB memory_limit into its spill folder. The first write that
    fails there is a Python model's session file (DuckDB's own spill file failing is the next test)."""
    root = tmp_path / "warehouse"
    config = make_config(warehouse={"path": str(root), "persist_models": "marts"})
    warehouse = Warehouse.of(config.warehouse)
    _store_raw(warehouse, _day(30))
    meter_partition_day(config, warehouse, DAY)
    before = _digests(root / MARTS)
    code = textwrap.dedent(
        f"""
        import resource, signal, sys
        from gpumeter.models.partition import meter_partition_day
        from gpumeter.storage.files import WarehouseError
        from gpumeter.storage.warehouse import Warehouse
        from tests.test_whole_day import _day, _store_raw
        from tests.test_rules import make_config
        from tests.whole_day_child import DAY
        config = make_config(warehouse={{"path": {str(root)!r}, "persist_models": "marts", "memory_limit": "16MB"}})
        warehouse = Warehouse.of(config.warehouse)
        _store_raw(warehouse, _day(1440))  # a whole day of samples
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
        try:
            meter_partition_day(config, warehouse, DAY)
        except WarehouseError as exc:
            print(exc)
            sys.exit(3)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 3, done.stderr[-3000:]
    message = done.stdout.strip()
    spill = root / paths.SCRATCH
    assert (
        "\n" not in message
        and f"DuckDB could not spill to {spill}/duckdb-{CLUSTER}-{DAY.isoformat()}-" in message
    )
    assert "File too large" in message and "free disk space under" in message
    assert "warehouse.memory_limit" in message and message.endswith("nothing stored changed.")
    assert _digests(root / MARTS) == before
    assert not any(spill.iterdir()), "the run's spill folder is removed"


# --- on an object store ---------------------------------------------------------------------------------


BUCKET = "gpumeter-whole-day"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """A real S3 API server on 127.0.0.1 (tests/s3_server.py)."""
    with s3_server(BUCKET) as endpoint:
        yield endpoint


def _objects(warehouse: Warehouse) -> list[str]:
    fs = warehouse.root.fs
    fs.invalidate_cache()
    return sorted(p.removeprefix(warehouse.root.path + "/") for p in fs.find(warehouse.root.path))


def test_a_whole_day_commit_on_an_object_store(s3_endpoint: str) -> None:
    warehouse = _old_day(f"s3://{BUCKET}/commit")
    with warehouse.day_lock(DAY, cluster=CLUSTER), warehouse.day_commit(CLUSTER, DAY) as commit:
        for table in TABLES:
            commit.stage_table(warehouse.day_path(MARTS, table, CLUSTER, DAY), day_rows(table, "new"))
        staged = [name for name in _objects(warehouse) if name.endswith(".tmp")]
        assert len(staged) == len(TABLES) and set(_stored(warehouse).values()) == {"old"}
    assert set(_stored(warehouse).values()) == {"new"}
    left = _objects(warehouse)
    assert not [name for name in left if name.endswith(".tmp") or paths.JOURNALS in name], left
    con = warehouse.connect()  # readers' globs never matched the staged objects
    assert {t: con.execute(f"select count(*) from {t}").fetchone()[0] for t in TABLES} == dict.fromkeys(
        TABLES, 1
    )  # noqa: S608


def test_a_killed_commit_on_an_object_store_is_rolled_forward(s3_endpoint: str) -> None:
    """The child (reaching the same S3 server) copies two of four staged objects over their targets and is
    SIGKILLed; a reader rolls the journal forward: every table new, no staged object or journal left."""
    warehouse = _old_day(f"s3://{BUCKET}/killed")
    _killed_child(f"s3://{BUCKET}/killed", "after-rename:2")
    assert sorted(_stored(warehouse).values()) == ["new", "new", "old", "old"]
    # The killed run's lock object stays on a store (docs/deploy.md): removed by hand, as its error says.
    lock = warehouse.lock_path(CLUSTER, DAY)
    assert lock.exists()
    lock.fs.rm_file(lock.path)
    assert day_commit.pending(warehouse.root) == [(CLUSTER, DAY)]
    for table in TABLES:
        assert warehouse.read_days(MARTS, table, [DAY]).column("value").to_pylist() == ["new"]
    left = _objects(warehouse)
    assert not [name for name in left if name.endswith(".tmp") or paths.JOURNALS in name], left
    assert day_commit.pending(warehouse.root) == []


def test_duckdbs_own_spill_file_failing_is_translated_to_one_line(tmp_path: Path) -> None:
    """A real duckdb.IOException: DuckDB (16 MB, one thread) spills a table to its temp folder in a child whose
    file size limit is 64 KiB; spill_error makes it the one-line WarehouseError naming the folder."""
    folder = tmp_path / "spill"
    folder.mkdir()
    code = textwrap.dedent(
        f"""
        import resource, signal, sys
        import duckdb
        from pathlib import Path
        from gpumeter.storage.spill import spill_error
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
        con = duckdb.connect()
        con.execute("set threads = 1")
        con.execute("set memory_limit = '16MB'")
        con.execute("set temp_directory = ?", [{str(folder)!r}])
        try:
            con.execute("create table t as select range as a, md5(range::varchar) as b from range(2000000)")
        except duckdb.IOException as exc:
            print(spill_error(exc, Path({str(folder)!r})))
            sys.exit(3)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 3, done.stderr[-3000:]
    message = done.stdout.strip()
    assert message.startswith(f"DuckDB could not spill to {folder} (IO Error: Could not write file ")
    assert (
        "File too large" in message and f"free disk space under {folder}" in message and "\n" not in message
    )


def test_a_duckdb_error_not_about_the_disk_stays_the_models(tmp_path: Path) -> None:
    """A model's own DuckDB error (bad SQL, an OOM that names no temp folder) is not made a warehouse error."""
    with pytest.raises(duckdb.Error) as info:
        duckdb.connect().execute("select * from no_such_table")
    assert spill_error(info.value, tmp_path) is None
    oom = duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block of size 256.0 KiB")
    assert spill_error(oom, tmp_path) is None
