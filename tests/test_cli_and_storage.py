"""The CLI a person uses, and the storage guarantees (atomic days, readers never block the writer)."""

import json
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpumeter.cli.main import main
from gpumeter.config import load_config
from gpumeter.storage.files import WarehouseError, atomic_write_parquet
from gpumeter.storage.warehouse import Warehouse


def test_demo_prints_reconciled_invoices_and_writes_csvs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--out", str(tmp_path), "--days", "1"]) == 0
    printed = capsys.readouterr().out
    assert "Conservation: charged" in printed and "exact" in printed
    assert "reconciled" in printed
    for name in (
        "Idle capacity (not billed to a tenant)",
        "Unmapped workloads",
        "ml-training",
        "Free on a cordoned or full node",
        "MIG space not partitioned",
    ):
        assert name in printed
    # A failed (warning) check is reported with the (cluster, day) partitions it failed on.
    assert "unmapped_namespaces (WARN) on 1 (cluster, day) partition(s): demo 2026-11-01" in printed
    all_csv = tmp_path / "invoices" / "invoice_lines_2026-11_all.csv"
    header = all_csv.read_text().splitlines()[0]
    assert header.startswith("invoice_id,tenant,cost_center,period_start,period_end,charge_type")
    assert (tmp_path / "invoices" / "invoice_lines_2026-11_serving.csv").exists()


def test_invoices_command_writes_the_period(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--out", str(tmp_path / "d"), "--days", "1"]) == 0
    out = tmp_path / "out"
    assert (
        main(
            [
                "invoices",
                "--config",
                str(tmp_path / "d" / "config.yaml"),
                "--period",
                "2026-11",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert sorted(p.name for p in out.iterdir())[0] == "invoice_lines_2026-11_all.csv"
    assert "Invoice files 2026-11" in capsys.readouterr().out


def test_run_with_a_malformed_config_names_the_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "clusters:\n  - name: a\n    source: {kind: parquet, path: x}\ntenants:\n  - name: t\n    namespaces: [Bad_NS]\n"
    )
    assert main(["run", "--config", str(bad), "--start", "2026-11-01", "--end", "2026-11-01"]) == 2
    err = capsys.readouterr().err
    assert "tenants[0].namespaces" in err and "line 6" in err


def test_run_rejects_an_end_before_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--out", str(tmp_path), "--days", "1"]) == 0
    capsys.readouterr()
    assert (
        main(
            ["run", "--config", str(tmp_path / "config.yaml"), "--start", "2026-11-02", "--end", "2026-11-01"]
        )
        == 2
    )
    assert "before --start" in capsys.readouterr().err


def test_run_rejects_a_cluster_the_config_does_not_have(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpumeter.cli.demo import write_demo_config

    config = write_demo_config(tmp_path)
    argv = ["run", "--config", str(config), "--start", "2026-11-01", "--end", "2026-11-01"]
    assert main([*argv, "--cluster", "demo", "--cluster", "nope"]) == 2
    err = capsys.readouterr().err
    assert "nope not in the config" in err and "demo" in err
    assert not (tmp_path / "warehouse").exists()  # refused before any run


def test_config_schema_is_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert {"clusters", "tenants", "rate_card", "idle_policy"} <= set(schema["properties"])


def test_failed_write_keeps_the_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "t" / "data.parquet"
    atomic_write_parquet(path, pa.table({"x": [1, 2]}))
    with pytest.raises(Exception):  # noqa: B017 - any failure inside the writer
        atomic_write_parquet(path, "not a table")  # type: ignore[arg-type]
    assert pq.read_table(path).column("x").to_pylist() == [1, 2]
    assert [p.name for p in path.parent.iterdir()] == ["data.parquet"]  # no temp file left


def test_unwritable_warehouse_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises((WarehouseError, OSError)):
        atomic_write_parquet(blocker / "sub" / "data.parquet", pa.table({"x": [1]}))


def test_a_reader_does_not_block_a_run(tmp_path: Path) -> None:
    """The dashboard's reading session stays open while the pipeline re-writes the same day."""
    assert main(["demo", "--out", str(tmp_path), "--days", "1"]) == 0
    config = load_config(tmp_path / "config.yaml")
    reader = Warehouse.at(config.warehouse.path).connect()
    before = reader.execute("select sum(pool_cost) from pool_daily_cost").fetchone()[0]
    assert (
        main(
            ["run", "--config", str(tmp_path / "config.yaml"), "--start", "2026-11-01", "--end", "2026-11-01"]
        )
        == 0
    )
    assert reader.execute("select sum(pool_cost) from pool_daily_cost").fetchone()[0] == before
    reader.close()
    assert Warehouse.at(config.warehouse.path).days("marts", "pool_daily_cost") == [
        ("demo", date(2026, 11, 1))
    ]
