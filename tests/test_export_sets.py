"""A month's exports are one set: CSV, FOCUS, HTML and PDF are written together and replace the previous set
together; files of tenants no longer billed are removed from the set (docs/billing.md, "Exports").

Real local Parquet warehouses with the hand-made daily marts of tests/test_periods.py. A tenant dropped from
the config is re-metered as the metering would bill it: its hours go to __unallocated__ (pool unchanged)."""

import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from test_invoices import CONFIG, config
from test_periods import D_NOV, NOV_ROWS, _store

from gpumeter.billing import exports, periods
from gpumeter.billing.exports import EXPORTS, sweep_leftovers, write_exports
from gpumeter.billing.invoices import Period
from gpumeter.billing.month import roll_up_month
from gpumeter.cli.main import main
from gpumeter.config import parse_config
from gpumeter.storage.warehouse import Warehouse
from tests.s3_server import s3_server

PERIOD = "2026-11"
NOV = Period.parse(PERIOD)
# serving no longer billed: its hour goes to __unallocated__, the pool cost stays the same.
WITHOUT_SERVING = [
    ("ml-training", "reserved", "H100-80GB", None, "3600", "3600", "4"),
    ("__unallocated__", "reserved", "H100-80GB", None, "1800", "1800", "2"),
    ("__idle__", "idle", "H100-80GB", None, "0", "3600", "4"),
]
CONFIG_WITHOUT_SERVING = CONFIG.replace(
    "  - {{name: serving, cost_center: CC-2, namespaces: [inference]}}\n", ""
)


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _leftovers(wh: Warehouse) -> list[str]:
    """What a write of the month left beside its folder: staged or renamed-away folders."""
    return sorted(p.name for p in (wh.root / "exports").iterdir() if p.is_dir() and p.name != PERIOD)


def _write_config(path: Path, wh: Warehouse, text: str = CONFIG) -> Path:
    path.write_text(text.format(currency="USD") + f"warehouse: {{path: {json.dumps(str(wh.root))}}}\n")
    return path


def _dies_in_the_documents_writer(warehouse: str) -> str:
    """A child's program: roll the month up (without serving) into `warehouse` (a Python expression), and
    kill -9 itself inside the documents writer, after its first file of the new figures is written."""
    return textwrap.dedent(
        f"""
        import dataclasses, os, signal
        from gpumeter.billing import exports, month
        from gpumeter.config import parse_config
        from gpumeter.storage.files import atomic_write_text
        from gpumeter.storage.warehouse import Warehouse

        def dies(lines, config, period, out_dir, status):
            atomic_write_text(out_dir / "tenant_invoice_{PERIOD}_ml-training.html", "half a set")
            os.kill(os.getpid(), signal.SIGKILL)

        exports.EXPORTS["documents"] = dataclasses.replace(exports.EXPORTS["documents"], write=dies)
        cfg = parse_config({CONFIG_WITHOUT_SERVING.format(currency="USD")!r})
        month.roll_up_month(cfg, {warehouse}, {PERIOD!r})
        """
    )


@pytest.fixture
def wh(tmp_path: Path) -> Warehouse:
    warehouse = Warehouse.at(tmp_path / "wh")
    _store(warehouse, D_NOV, NOV_ROWS)
    return warehouse


def test_a_tenant_no_longer_billed_has_no_file_left_in_the_set_or_out(wh: Warehouse, tmp_path: Path) -> None:
    config_path = _write_config(tmp_path / "config.yaml", wh)
    first = tmp_path / "out1"
    assert main(["invoices", "--config", str(config_path), "--period", PERIOD, "--out", str(first)]) == 0
    serving = {
        f"invoice_lines_{PERIOD}_serving.csv",
        f"tenant_invoice_{PERIOD}_serving.html",
        f"tenant_invoice_{PERIOD}_serving.pdf",
    }
    assert serving <= set(_digests(periods.exports_dir(wh, PERIOD)))
    assert serving <= {p.name for p in first.iterdir()}

    _write_config(config_path, wh, CONFIG_WITHOUT_SERVING)
    _store(wh, D_NOV, WITHOUT_SERVING)
    second = tmp_path / "out2"
    assert main(["invoices", "--config", str(config_path), "--period", PERIOD, "--out", str(second)]) == 0
    names = set(_digests(periods.exports_dir(wh, PERIOD)))
    assert not names & serving
    assert not {p.name for p in second.iterdir()} & serving
    # the whole set, of this run only: every kind, the all-tenants files and ml-training's
    assert {
        f"invoice_lines_{PERIOD}_all.csv",
        f"invoice_lines_{PERIOD}_all.focus.csv",
        f"invoice_lines_{PERIOD}_ml-training.csv",
        f"tenant_invoice_{PERIOD}_ml-training.html",
        f"tenant_invoice_{PERIOD}_ml-training.pdf",
    } == names
    assert {p.name for p in second.iterdir()} == names
    assert _leftovers(wh) == []


def test_a_run_killed_while_writing_leaves_the_previous_set_whole_and_the_next_sweeps(wh: Warehouse) -> None:
    """kill -9 of a process inside the documents writer, after its first file of the new figures is written."""
    roll_up_month(config(), wh, PERIOD)
    out = periods.exports_dir(wh, PERIOD)
    before = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    _store(wh, D_NOV, WITHOUT_SERVING)
    child = _dies_in_the_documents_writer(f"Warehouse.at({str(wh.root)!r})")
    run = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert run.returncode == -signal.SIGKILL, run.stderr
    assert {p.name: p.read_bytes() for p in sorted(out.iterdir())} == before  # byte for byte
    assert [n.rsplit("-", 2)[0] for n in _leftovers(wh)] == [f".{PERIOD}.staged"]

    cfg = parse_config(CONFIG_WITHOUT_SERVING.format(currency="USD"))
    roll_up_month(cfg, wh, PERIOD)
    assert _leftovers(wh) == []
    after = set(_digests(out))
    assert f"tenant_invoice_{PERIOD}_ml-training.html" in after
    assert not any("serving" in name for name in after)
    assert (out / f"tenant_invoice_{PERIOD}_ml-training.html").read_text() != "half a set"


def test_a_writer_that_fails_midway_leaves_the_previous_set_unchanged(
    wh: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    roll_up_month(config(), wh, PERIOD)
    out = periods.exports_dir(wh, PERIOD)
    before = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    real = EXPORTS["focus"].write

    def fails(*args: object) -> list[Path]:
        real(*args)  # its file is written (into the staged set), then it dies
        raise RuntimeError("killed")

    monkeypatch.setitem(exports.EXPORTS, "focus", dataclasses.replace(EXPORTS["focus"], write=fails))
    _store(wh, D_NOV, WITHOUT_SERVING)
    with pytest.raises(RuntimeError, match="killed"):
        roll_up_month(parse_config(CONFIG_WITHOUT_SERVING.format(currency="USD")), wh, PERIOD)
    assert {p.name: p.read_bytes() for p in sorted(out.iterdir())} == before
    assert _leftovers(wh) == []


def test_a_swap_killed_between_its_two_renames_is_undone_by_the_next_write(wh: Warehouse) -> None:
    """The old set renamed away, the new one staged but not renamed in: the month has no folder until the
    next write puts the old one back (then replaces it as a whole)."""
    roll_up_month(config(), wh, PERIOD)
    out = periods.exports_dir(wh, PERIOD)
    before = _digests(out)
    os.rename(out, out.parent / f".{PERIOD}.old-999999-deadbeef")
    (out.parent / f".{PERIOD}.staged-999999-cafef00d").mkdir()
    (out.parent / f".{PERIOD}.staged-999999-cafef00d" / f"invoice_lines_{PERIOD}_all.csv").write_text("new")
    sweep_leftovers(out)
    assert _digests(out) == before and _leftovers(wh) == []


def test_steps_of_one_run_complete_the_set_and_new_figures_never_sit_beside_old(tmp_path: Path) -> None:
    """The invoice assets write one kind per step: a step of the same figures keeps the set's other kinds, a
    step of new figures replaces the set by its own kind (the others follow in their steps)."""
    wh = Warehouse.at(tmp_path / "wh")
    _store(wh, D_NOV, NOV_ROWS)
    roll_up_month(config(), wh, PERIOD)
    out = periods.exports_dir(wh, PERIOD)
    lines = periods.stored_lines(wh, PERIOD)
    status = periods.status_of(wh, PERIOD, lines, 2)
    whole = _digests(out)
    written = write_exports(lines, config(), NOV, out, status, kinds=("focus",))
    assert [p.name for p in written] == [f"invoice_lines_{PERIOD}_all.focus.csv"]
    assert _digests(out) == whole  # same figures: the set stays whole

    _store(wh, D_NOV, WITHOUT_SERVING)
    cfg = parse_config(CONFIG_WITHOUT_SERVING.format(currency="USD"))
    roll_up_month(cfg, wh, PERIOD, with_exports=False)
    lines = periods.stored_lines(wh, PERIOD)
    status = periods.status_of(wh, PERIOD, lines, 2)
    write_exports(lines, cfg, NOV, out, status, kinds=("csv",))
    assert all(name.endswith(".csv") and not name.endswith(".focus.csv") for name in _digests(out))
    write_exports(lines, cfg, NOV, out, status, kinds=("documents",))
    write_exports(lines, cfg, NOV, out, status, kinds=("focus",))
    assert set(_digests(out)) == {
        f"invoice_lines_{PERIOD}_all.csv",
        f"invoice_lines_{PERIOD}_all.focus.csv",
        f"invoice_lines_{PERIOD}_ml-training.csv",
        f"tenant_invoice_{PERIOD}_ml-training.html",
        f"tenant_invoice_{PERIOD}_ml-training.pdf",
    }
    assert not any("serving" in name for name in _digests(out))
    assert _leftovers(wh) == []


def test_a_failed_step_keeps_the_record_so_the_next_step_of_the_run_keeps_the_set_whole(
    wh: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """documents fails; focus of the same run (same figures) still keeps the CSV and documents of the set."""
    roll_up_month(config(), wh, PERIOD)
    out = periods.exports_dir(wh, PERIOD)
    whole = _digests(out)
    lines = periods.stored_lines(wh, PERIOD)
    status = periods.status_of(wh, PERIOD, lines, 2)

    def fails(*_: object) -> list[Path]:
        raise RuntimeError("renderer down")

    monkeypatch.setitem(exports.EXPORTS, "documents", dataclasses.replace(EXPORTS["documents"], write=fails))
    with pytest.raises(RuntimeError):
        write_exports(lines, config(), NOV, out, status, kinds=("documents",))
    monkeypatch.undo()
    write_exports(lines, config(), NOV, out, status, kinds=("focus",))
    assert _digests(out) == whole


# --- on an object store -------------------------------------------------------------------------------

BUCKET = "gpumeter-export-sets"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with s3_server(BUCKET) as endpoint:
        yield endpoint


def _s3_month(s3_endpoint: str, name: str) -> tuple[Warehouse, Path]:
    warehouse = Warehouse.at(f"s3://{BUCKET}/{name}", endpoint_url=s3_endpoint)
    _store(warehouse, D_NOV, NOV_ROWS)
    roll_up_month(config(), warehouse, PERIOD)
    return warehouse, periods.published_exports(warehouse, PERIOD)


def _s3_digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir(), key=str)}


def test_on_an_object_store_a_set_replaces_the_previous_one_at_once(s3_endpoint: str, tmp_path: Path) -> None:
    """Each set is a folder of its own; the set's record (one PUT) switches readers to it, then the previous
    set is deleted: a tenant no longer billed has no file left, and nothing else is left in the month."""
    wh, first = _s3_month(s3_endpoint, "switch")
    assert f"tenant_invoice_{PERIOD}_serving.pdf" in _s3_digests(first)
    _store(wh, D_NOV, WITHOUT_SERVING)
    roll_up_month(parse_config(CONFIG_WITHOUT_SERVING.format(currency="USD")), wh, PERIOD)
    second = periods.published_exports(wh, PERIOD)
    assert second != first and not first.exists()
    assert set(_s3_digests(second)) == {
        f"invoice_lines_{PERIOD}_all.csv",
        f"invoice_lines_{PERIOD}_all.focus.csv",
        f"invoice_lines_{PERIOD}_ml-training.csv",
        f"tenant_invoice_{PERIOD}_ml-training.html",
        f"tenant_invoice_{PERIOD}_ml-training.pdf",
    }
    month = periods.exports_dir(wh, PERIOD)
    assert [p.name for p in month.iterdir()] == [second.name]  # only the current set
    # `gpumeter invoices --out` delivers the current set, and only it
    config_path = tmp_path / "config.yaml"
    config_path.write_text(
        CONFIG_WITHOUT_SERVING.format(currency="USD")
        + f"warehouse: {{path: {json.dumps(str(wh.root))}, endpoint_url: {json.dumps(s3_endpoint)}}}\n"
    )
    out = tmp_path / "out"
    assert main(["invoices", "--config", str(config_path), "--period", PERIOD, "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} == set(_s3_digests(periods.published_exports(wh, PERIOD)))


def test_on_an_object_store_a_killed_run_leaves_the_previous_set_whole(s3_endpoint: str) -> None:
    """kill -9 inside the documents writer, its first file of the new figures written: readers still get the
    previous set, byte for byte; the next write deletes the killed run's set folder."""
    wh, first = _s3_month(s3_endpoint, "killed")
    before = _s3_digests(first)
    _store(wh, D_NOV, WITHOUT_SERVING)
    child = _dies_in_the_documents_writer(f"Warehouse.at({str(wh.root)!r}, endpoint_url={s3_endpoint!r})")
    run = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert run.returncode == -signal.SIGKILL, run.stderr
    assert periods.published_exports(wh, PERIOD) == first
    assert _s3_digests(first) == before  # byte for byte
    month = periods.exports_dir(wh, PERIOD)
    month.fs.invalidate_cache()  # the child wrote to the store: this process's listings are stale
    assert len(list(month.iterdir())) == 2  # the current set and the killed run's, which no record names

    # the killed run's lock object stays (an object store's lock does not die with its holder): remove it
    # as its error says, then the next write replaces the set and deletes the killed run's folder
    for lock in month.parent.glob(".*.lock"):
        lock.unlink()
    roll_up_month(parse_config(CONFIG_WITHOUT_SERVING.format(currency="USD")), wh, PERIOD)
    current = periods.published_exports(wh, PERIOD)
    assert [p.name for p in month.iterdir()] == [current.name]
    assert (current / f"tenant_invoice_{PERIOD}_ml-training.html").read_text() != "half a set"
    assert not any("serving" in name for name in _s3_digests(current))


def test_an_export_added_once_to_the_registry_is_written_by_the_month_job_and_the_cli(
    wh: Warehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/architecture.md, "An export": one entry in the registry (a writer and its asset's name) makes the
    monthly job's asset, which writes the file into the month's set, and `gpumeter invoices` hands it out."""
    from gpumeter.pipelines.launch import invoice_month
    from gpumeter.storage.files import atomic_write_text

    def write_total(lines, config, period, out_dir, status):  # noqa: ANN001, ANN202 - a Writer
        total = sum(lines.column("amount").to_pylist())
        return [atomic_write_text(out_dir / f"total_{period}.txt", f"{total}\n")]

    added = exports.Export("total", write_total, "invoice_total", "The month's total.", ("txt",))
    monkeypatch.setitem(exports.EXPORTS, "total", added)
    config_path = _write_config(tmp_path / "config.yaml", wh)
    run = invoice_month(str(config_path), PERIOD)
    assert "invoice_total" in run.materialized
    # By hand: NOV_ROWS bill 4 + 2 + 4 = 10.00 USD on three lines.
    assert Decimal((periods.exports_dir(wh, PERIOD) / f"total_{PERIOD}.txt").read_text()) == Decimal(10)
    out = tmp_path / "out"
    assert main(["invoices", "--config", str(config_path), "--period", PERIOD, "--out", str(out)]) == 0
    assert Decimal((out / f"total_{PERIOD}.txt").read_text()) == Decimal(10)
