"""The fleet benchmark harness on a tiny fleet (CI): every step runs and reports, and bench.marts_equal tells
marts apart. The benchmark itself runs outside CI (bench/README.md)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench import fleet, marts_equal
from gpumeter.config import load_config
from gpumeter.ingest.row_order import in_gpu_order
from gpumeter.models.project import load_models
from gpumeter.storage.warehouse import Warehouse
from gpumeter_sim.promserver import binaries_available


@pytest.mark.slow
def test_harness_runs_every_step_on_a_tiny_fleet(tmp_path: Path) -> None:
    prom_gpus = "8" if binaries_available() else "0"
    argv = ["run", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out"), "--gpus", "8",
            "--month-gpus", "8", "--month-days", "2", "--fleet-month-days", "2",
            "--prom-gpus", prom_gpus]  # fmt: skip
    assert fleet.main(argv) == 0
    (report_file,) = (tmp_path / "out").glob("*.json")
    report = json.loads(report_file.read_text(encoding="utf-8"))
    steps = [m["step"] for m in report["measures"]]
    # The fleet's re-dated month (roll-up, dashboard) right after its day, then the metered month's.
    # Each generated day is stored as spans (the pull's way) before it is metered.
    expected = ["generate", "kube_spans", "single_pass", "sample_floor", "meter", "rollup", "dashboard",
                "generate", "kube_spans", "meter", "meter", "rollup", "dashboard"]  # fmt: skip
    if prom_gpus != "0":
        expected += ["promql", "prom_pull", "bare_http"]
    assert steps == expected
    for m in report["measures"]:
        assert m["wall_s"] > 0 and m["peak_rss_mib"] > 0, m
    raw_rows = {m["step"]: m["samples"] for m in report["measures"][:5]}
    # (a) reads the DCGM and kube rows of the day, (b) and (b′) the DCGM rows only: counted from the files.
    assert raw_rows["meter"] > raw_rows["single_pass"] == raw_rows["sample_floor"] > 0
    spans, single_pass, floor, meter = report["measures"][1:5]
    # Nearly constant kube series: far fewer spans than the samples they stand for.
    assert 0 < spans["extra"]["spans"] < spans["samples"]
    assert floor["extra"]["pods"] == single_pass["extra"]["pods"] > 0  # the same pods, each sample once
    # Where (a)'s time goes, from the same run: every model the run builds timed. The bench keeps the marts
    # only, so the per-sample tables with names (audits read them; no mart does) are not built.
    audit_only = {"int_device_samples", "int_device_categories", "int_device_holders"}
    assert set(meter["extra"]["model_seconds"]) == {m.name for m in load_models()} - audit_only
    meters = [m for m in report["measures"] if m["step"] == "meter"]
    assert {m["extra"]["day"] for m in meters} == {"2026-11-01", "2026-11-02"}
    fleet_rollup, fleet_dashboard = report["measures"][5:7]
    assert fleet_rollup["extra"] == {"days": 2, "ok": True, "replicated_month": True}
    assert fleet_dashboard["extra"]["replicated_month"] is True
    rollup = report["measures"][11]
    assert rollup["extra"] == {"days": 2, "ok": True}
    figures = (tmp_path / "out" / report_file.name.replace(".json", ".md")).read_text(encoding="utf-8")
    dashboard = report["measures"][12]
    assert set(dashboard["extra"]["pages"]) == set(fleet.dashboard_pages())
    assert dashboard["wall_s"] == max(dashboard["extra"]["pages"].values())
    for figure in (
        "slowest dashboard page",
        "a/b at 8 GPUs",
        "b′/b at 8 GPUs",
        "a/b′ at 8 GPUs",
        "(a) at 8 GPUs by model",
        "2 days / one day",
        "monthly roll-up, 2 days of 8 GPUs",
        "monthly roll-up, 2 days of 8 GPUs (the metered day's marts, re-dated)",
        "slowest dashboard page, 2 days of 8 GPUs (re-dated marts)",
        report["machine"]["cpu"],
    ):
        assert figure in figures
    if prom_gpus != "0":
        assert "e/bare HTTP at 8 GPUs" in figures
        pull, bare = report["measures"][-2:]
        assert bare["extra"]["requests"] == pull["extra"]["queries"]
        # The same requests in the same encoding: the same bodies, gzipped on the wire (Prometheus
        # compresses when asked), and Prometheus' CPU seconds read beside each step.
        assert pull["extra"]["encoding"] == bare["extra"]["encoding"] == "gzip"
        assert bare["extra"]["bytes"] == pull["extra"]["bytes"] > bare["extra"]["wire_bytes"] > 0
        assert 0 < pull["extra"]["wire_bytes"] < pull["extra"]["bytes"]
        assert pull["extra"]["prometheus_cpu_s"] >= 0 and bare["extra"]["prometheus_cpu_s"] >= 0
        assert "Prometheus CPU s" in figures
    # A step's peak RSS is its own, not its parent's: Linux keeps in wait4's ru_maxrss the high-water mark
    # of the image a child was before exec (the parent's), so a big parent made every small step look big.
    ballast = bytearray(800 * 2**20)
    ballast[::4096] = b"x" * len(ballast[::4096])  # touched: resident
    small = fleet.Workspace(tmp_path / "work" / "fleet-8", 8, 1)
    own = fleet.run_child("single_pass", small, "--day", small.start.isoformat())
    assert 0 < own.peak_rss_mib < 600, own
    del ballast


def test_marts_equal_finds_the_same_marts_over_either_row_order_and_names_a_changed_one(
    tmp_path: Path,
) -> None:
    """bench.marts_equal, what "marts identical" in bench/README.md rests on: one 8-GPU day metered from its raw
    files in GPU order (as generated) and from the same rows in time order is the same marts; a mart with one
    value changed by hand, or missing, is named."""
    ordered = fleet.Workspace(tmp_path / "ordered", gpus=8, days=1)
    fleet.step_generate(ordered)
    shutil.copytree(ordered.root, tmp_path / "by-time")
    by_time = replace(ordered, root=tmp_path / "by-time")
    for path in by_time.raw_files("raw_dcgm_samples", by_time.start):
        rows = pq.read_table(path)
        pq.write_table(rows.sort_by([("ts_ms", "ascending"), ("metric", "descending")]), path)
        assert not in_gpu_order(pq.read_table(path))
    for ws in (ordered, by_time):
        fleet.step_kube_spans(ws)
        fleet.step_meter(ws, ws.start)
    same = marts_equal.compare(ordered.root, by_time.root, ordered.start)
    assert same["identical"] and same["marts"]["device_seconds"]["rows"] > 0
    assert set(same["marts"]) == {m.table for m in load_models() if m.layer == "marts"}
    # One row's busy GPU-seconds changed by their last digit (10^-12 s), and one mart gone: both named.
    config = load_config(by_time.config_path)
    warehouse = Warehouse.of(config.warehouse)
    (stored,) = warehouse.day_files("marts", "device_seconds", config.clusters[0].name, by_time.start)
    rows = pq.read_table(stored)
    at = rows.schema.get_field_index("busy_gpu_seconds")
    busy = rows["busy_gpu_seconds"].to_pylist()
    busy[0] += Decimal("1e-12")
    pq.write_table(
        rows.set_column(at, "busy_gpu_seconds", pa.array(busy, rows.schema.field(at).type)), stored
    )
    for f in warehouse.day_files("marts", "queue_quota_usage", config.clusters[0].name, by_time.start):
        f.unlink()
    differ = marts_equal.compare(ordered.root, by_time.root, ordered.start)
    assert not differ["identical"]
    assert {t for t, m in differ["marts"].items() if not m["identical"]} == {
        "device_seconds",
        "queue_quota_usage",
    }
    assert differ["marts"]["queue_quota_usage"]["rows_against"] is None
    assert marts_equal.main(["--work", str(ordered.root), "--against", str(by_time.root),
                             "--day", ordered.start.isoformat()]) == 1  # fmt: skip
