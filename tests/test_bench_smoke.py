"""The fleet benchmark harness on a tiny fleet (CI): every step runs and reports; the pandas comparison
computes what its rules say, by hand. The benchmark itself runs outside CI (bench/README.md)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from datetime import date
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from bench import cores, fleet, marts_equal, sorted_pivot, streaming_floor
from bench.pandas_meter import cost_by_namespace
from gpumeter.config import load_config
from gpumeter.ingest.contract import day_bounds_ms, lookback_ms
from gpumeter.ingest.row_order import in_gpu_order
from gpumeter.ingest.schema import DCGM_TEMP
from gpumeter.models.project import load_models
from gpumeter.storage.warehouse import Warehouse
from gpumeter_sim import FactorySpec, write_parquet
from gpumeter_sim.promserver import binaries_available
from tests.builders import FactoryBuilder

DAY = date(2026, 11, 1)
H100 = "NVIDIA H100 80GB HBM3"


def test_pandas_comparison_applies_r1_r3_r6_r8_by_hand(tmp_path: Path) -> None:
    b = FactoryBuilder("c1", DAY).gpu("n1", "GPU-a", H100).gpu("n1", "GPU-b", H100)
    b.samples("GPU-a", [0, 1, 2], gr=0.5, pod=("ns-a", "p1", "c"))  # R1: 3 samples x 30 s, whole GPU
    b.sample("GPU-b", 0, gr=0.2, pod=("ns-b", "p2", "c"), gpu_i_id="1", profile="3g.40gb")  # R3: 3/7
    b.sample("GPU-b", 0, gr=0.9, gpu_i_id="2", profile="4g.40gb")  # unheld: nobody pays it here
    b.sample("GPU-a", 3, gr=0.5, pod=("ns-a", "p1", "c"), vgpu="0")  # R6: two holders share one sample
    b.sample("GPU-a", 3, gr=0.5, pod=("ns-b", "p3", "c"), vgpu="1")
    b.sample("GPU-a", 2880, gr=0.5, pod=("ns-a", "p1", "c"))  # the next day's midnight: not this day (R2)
    path = tmp_path / "dcgm.parquet"
    pq.write_table(b.build().dcgm, path)
    start_ms, end_ms = day_bounds_ms(DAY)
    got = cost_by_namespace([path], start_ms, end_ms, 30.0, {H100: 3.60})
    by_ns = {row.namespace: (row.gpu_seconds, row.cost) for row in got.itertuples()}
    # ns-a: 3 x 30 s + 30 s / 2 = 105 GPU-s; ns-b: 30 x 3/7 + 30 / 2 = 27.857142... GPU-s; $3.60/h = $0.001/s.
    assert by_ns["ns-a"] == pytest.approx((105.0, 0.105))
    assert by_ns["ns-b"] == pytest.approx((30 * 3 / 7 + 15.0, (30 * 3 / 7 + 15.0) * 0.001))
    assert set(by_ns) == {"ns-a", "ns-b"}


def test_the_sorted_pivot_makes_one_row_per_series_sample_with_its_readings(tmp_path: Path) -> None:
    """bench/sorted_pivot.py (a measured building block, not the product): 7 raw rows of 2 series make 4
    series samples; two readings of one metric at one sample are one, the larger; GPU_TEMP has no code."""
    b = FactoryBuilder("c1", DAY).gpu("n1", "GPU-a", H100).gpu("n1", "GPU-b", H100)
    b.samples("GPU-a", [0, 1], gr=0.5, util=40)  # 2 samples x 2 rows
    b.sample("GPU-a", 2, gr=0.25).sample("GPU-a", 2, gr=0.75)  # a copy of one reading: the larger is kept
    b.dcgm_row(b.ts(0), DCGM_TEMP, 40.0, hostname="n1", uuid="GPU-b", model_name=H100)  # a field never read
    raw = tmp_path / "dcgm.parquet"
    pq.write_table(b.build().dcgm, raw)
    out = tmp_path / "sorted.parquet"
    con = duckdb.connect()
    assert sorted_pivot.write_sorted(con, [str(raw)], out) == 7
    keys = [row[0] for row in con.execute(f"select key from '{out}'").fetchall()]
    assert keys == sorted(keys)
    assert sorted_pivot.duckdb_pivot(con, out) == 4
    gr, util = (
        f"m{sorted_pivot.PIVOTED.index(m) + 1}"
        for m in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL")
    )
    got = con.execute(f"select {gr}, {util}, read_values from pivoted order by key").fetchall()
    # GPU-a's series sorts before or after GPU-b's by its hash: compare as a multiset.
    assert sorted(got, key=repr) == sorted(
        [(0.5, 40.0, 2), (0.5, 40.0, 2), (0.75, None, 2), (None, None, 0)], key=repr
    )
    _, _, polars_keys = sorted_pivot.polars_pivot(out)
    assert polars_keys == 4


@pytest.mark.slow
def test_harness_runs_every_step_on_a_tiny_fleet(tmp_path: Path) -> None:
    prom_gpus = "8" if binaries_available() else "0"
    argv = ["run", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out"), "--gpus", "8",
            "--pandas-gpus", "8", "--month-gpus", "8", "--month-days", "2", "--fleet-month-days", "2",
            "--prom-gpus", prom_gpus]  # fmt: skip
    assert fleet.main(argv) == 0
    (report_file,) = (tmp_path / "out").glob("*.json")
    report = json.loads(report_file.read_text(encoding="utf-8"))
    steps = [m["step"] for m in report["measures"]]
    # The fleet's re-dated month (roll-up, dashboard) right after its day, then the metered month's.
    # Each generated day is stored as spans (the pull's way) before it is metered.
    expected = ["generate", "kube_spans", "single_pass", "sample_floor", "meter", "rollup", "dashboard",
                "pandas", "generate", "kube_spans", "meter", "meter", "rollup", "dashboard"]  # fmt: skip
    if prom_gpus != "0":
        expected += ["promql", "prom_pull", "bare_http", "remote_read", "remote_read"]
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
    rollup = report["measures"][12]
    assert rollup["extra"] == {"days": 2, "ok": True}
    figures = (tmp_path / "out" / report_file.name.replace(".json", ".md")).read_text(encoding="utf-8")
    dashboard = report["measures"][13]
    assert set(dashboard["extra"]["pages"]) == set(fleet.DASHBOARD_PAGES)
    assert dashboard["wall_s"] == max(dashboard["extra"]["pages"].values())
    for figure in (
        "slowest dashboard page",
        "a/b at 8 GPUs",
        "b′/b at 8 GPUs",
        "a/b′ at 8 GPUs",
        "(a) at 8 GPUs by model",
        "c/a at 8 GPUs",
        "2 days / one day",
        "monthly roll-up, 2 days of 8 GPUs",
        "monthly roll-up, 2 days of 8 GPUs (the metered day's marts, re-dated)",
        "slowest dashboard page, 2 days of 8 GPUs (re-dated marts)",
        report["machine"]["cpu"],
    ):
        assert figure in figures
    if prom_gpus != "0":
        assert "e/bare HTTP at 8 GPUs" in figures
        pull, bare, samples, chunks = report["measures"][-4:]
        assert bare["extra"]["requests"] == pull["extra"]["queries"]
        # The same requests in the same encoding: the same bodies, gzipped on the wire (Prometheus
        # compresses when asked), and Prometheus' CPU seconds read beside each step.
        assert pull["extra"]["encoding"] == bare["extra"]["encoding"] == "gzip"
        assert bare["extra"]["bytes"] == pull["extra"]["bytes"] > bare["extra"]["wire_bytes"] > 0
        assert 0 < pull["extra"]["wire_bytes"] < pull["extra"]["bytes"]
        assert pull["extra"]["prometheus_cpu_s"] >= 0 and bare["extra"]["prometheus_cpu_s"] >= 0
        assert "Prometheus CPU s" in figures
        # Remote read of the same samples: each answer's samples counted (protobuf, XOR chunk headers) equal the
        # JSON answer's, counted apart; the XID query has no remote-read form and is fetched as the pull does.
        assert (samples["extra"]["response"], chunks["extra"]["response"]) == ("samples", "chunks")
        for read in (samples, chunks):
            assert read["extra"]["samples_match"] is True
            assert read["extra"]["requests"] == bare["extra"]["requests"] > read["extra"]["remote_reads"] > 0
            assert read["samples"] > 0 and read["extra"]["wire_bytes"] > 0
            assert read["extra"]["prometheus_cpu_s"] >= 0
        assert samples["extra"]["decode_cpu_s"] > 0
        assert samples["samples"] == chunks["samples"]
        assert "remote read (samples)" in figures and "remote read (chunks)" in figures
    # A step's peak RSS is its own, not its parent's: Linux keeps in wait4's ru_maxrss the high-water mark
    # of the image a child was before exec (the parent's), so a big parent made every small step look big.
    ballast = bytearray(800 * 2**20)
    ballast[::4096] = b"x" * len(ballast[::4096])  # touched: resident
    small = fleet.Workspace(tmp_path / "work" / "fleet-8", 8, 1)
    own = fleet.run_child("single_pass", small, "--day", small.start.isoformat())
    assert 0 < own.peak_rss_mib < 600, own
    del ballast


def test_the_streaming_pass_agrees_with_the_models_it_stands_for(tmp_path: Path) -> None:
    """bench/streaming_floor.py measures the floor of the one-pass design (a day sorted by GPU and time, grouped
    without a hash table, one file per thread); it is not the product (gpumeter.models.sample_pass is), so it
    is checked against the product's models on a simulated fleet day: the same copied readings, GPU samples,
    MIG modes, holders, energy, busy fractions, prices, MIG instances and the series holders of shared
    samples."""
    ws = fleet.Workspace(tmp_path / "w", gpus=8, days=1)
    fleet.step_generate(ws)
    day = ws.start.isoformat()
    raw_rows = sum(pq.ParquetFile(f).metadata.num_rows for f in ws.raw_files("raw_dcgm_samples", ws.start))
    sorted_ = streaming_floor.sort_files(ws.root, day)
    # The simulator writes the raw zone's DCGM files in GPU order: each is linked, none rewritten.
    assert sorted_["rows"] == raw_rows
    assert sorted_["files_already_in_gpu_order"] == len(ws.raw_files("raw_dcgm_samples", ws.start)) > 0
    # The writer's way to that order: the pull's integer key, by GPU first (the order is checked inside).
    assert streaming_floor.window_keys(ws.root, day)["rows"] == raw_rows
    streaming_floor.compute_inputs(ws.root, day)
    got = streaming_floor.check(ws.root, day)
    assert got["equal"], got["differ"]
    # The day has what is compared: MIG GPUs and instances, holders, prices (shared samples: next test).
    assert got["mig_gpu_samples_in_day"] > 0 and got["mig_instance_samples"] > 0
    assert got["held_gpu_samples_in_day"] > 0 and got["price_units"] > 0
    stored = streaming_floor.run_pass(ws.root, day, threads=2, store="duckdb")
    in_parquet = streaming_floor.run_pass(ws.root, day, threads=2, store="parquet")
    for kept in (stored, in_parquet):
        assert (kept["stored_gpu_samples"], kept["stored_instance_samples"]) == (
            got["gpu_samples_in_day"],
            got["mig_instance_samples"],
        )
    # Summed to the mart grain (its sums are checked in `check`): an hour's samples of a device and holder
    # are one row.
    hourly = streaming_floor.run_pass(ws.root, day, threads=2, store="hourly")
    assert 0 < hourly["hourly_gpu_samples"] < got["gpu_samples_in_day"] / 60
    assert 0 < hourly["hourly_instance_samples"] < got["mig_instance_samples"] / 60
    # Compressed per quarter hour (its sums are checked in `check`): a quarter hour of a device's samples is
    # at most one row per what the later models read as a key, so each hourly row splits into some of them.
    compressed = streaming_floor.run_pass(ws.root, day, threads=2, store="compressed", bucket_s=900)
    for name, samples in (
        ("gpu_samples", "gpu_samples_in_day"),
        ("instance_samples", "mig_instance_samples"),
    ):
        assert hourly[f"hourly_{name}"] <= compressed[f"compressed_{name}"] < got[samples] / 10
    # What such a pass would leave in SQL: the models no DCGM row reaches, metered alone.
    no_dcgm = set(streaming_floor.models_reading_no_dcgm_row())
    assert {"stg_kube_spans", "stg_opencost_prices", "int_node_gpu_price_spans"} <= no_dcgm
    assert not no_dcgm & {"stg_dcgm_series", "int_gpu_samples", "int_holders", "mart_device_seconds"}
    assert streaming_floor.rest(ws.root, day)["models"] == len(no_dcgm)
    # The later models over the two tables as DuckDB tables or as Parquet views (the store's other half).
    assert streaming_floor.downstream(ws.root, day, "setup")["int_gpu_samples"] == got["gpu_samples_in_day"]
    for kind in ("duckdb", "parquet"):
        assert streaming_floor.downstream(ws.root, day, kind)["other_models_s"] > 0
    # The same over the two tables compressed per quarter hour (the compressed-samples design's later models).
    rows = streaming_floor.downstream(ws.root, day, "setup", bucket_s=900)
    assert 0 < rows["int_gpu_samples"] < got["gpu_samples_in_day"] / 10
    assert 0 < rows["int_mig_instance_samples"] < got["mig_instance_samples"] / 10
    assert streaming_floor.downstream(ws.root, day, "duckdb", bucket_s=900)["other_models_s"] > 0
    # bench.cores times (a) as the product meters a pulled day: with the kube rows stored as spans.
    (rows,) = cores.kube_rows_not_spans(ws.root)
    with pytest.raises(SystemExit, match="step kube_spans"):
        cores.main(["--work", str(ws.root), "--gpus", "8", "--cores", "1"])
    fleet.step_kube_spans(ws)
    assert not rows.exists() and cores.kube_rows_not_spans(ws.root) == []


def test_compressed_samples_are_one_row_per_device_bucket_and_key(tmp_path: Path) -> None:
    """The compressed-samples design's rows, by hand: a device's samples in one time bucket that agree on every
    key the later models read, and on the side of the idle threshold (0.05), are one row at the first one's
    time, with busy averaged, energy summed and the frame buffer at its largest."""
    path = tmp_path / "samples.parquet"
    minute = 60_000
    pq.write_table(
        pa.table(
            {
                "gpu_key": [1, 1, 1, 1, 1, 2, 1],
                "ts_ms": [0, minute, 2 * minute, 3 * minute, 15 * minute, 0, 4 * minute],
                "holder_key": [7, 7, 7, 7, 7, 7, 8],
                "busy": [0.5, 0.7, 0.01, None, 0.5, 0.5, 0.9],
                "energy_mj": [10, 20, 30, 40, 50, 60, 70],
                "fb_used_mib": [100.0, 300.0, 50.0, 60.0, 10.0, 10.0, 5.0],
            }
        ),
        path,
    )
    columns = ["gpu_key", "ts_ms", "holder_key", "busy", "energy_mj", "fb_used_mib"]
    sql = streaming_floor.compressed_sql(columns, f"'{path}'", 15 * minute, 0.05)
    got = sorted(duckdb.sql(f"select {', '.join(columns)} from ({sql})").fetchall())
    assert got == [
        # GPU 1, first quarter hour, holder 7: two active samples, then two idle ones (no reading is idle).
        (1, 0, 7, pytest.approx(0.6), 30, 300.0),
        (1, 2 * minute, 7, pytest.approx(0.01), 70, 60.0),
        (1, 4 * minute, 8, pytest.approx(0.9), 70, 5.0),  # another holder
        (1, 15 * minute, 7, pytest.approx(0.5), 50, 10.0),  # the next quarter hour
        (2, 0, 7, pytest.approx(0.5), 60, 10.0),  # another GPU
    ]


def test_the_streaming_pass_agrees_on_a_changing_day_with_broken_readings(tmp_path: Path) -> None:
    """The same check on the demo's changing pool (an outage, a cordoned node, an XID, an energy counter reset,
    MIG re-partitioned, pods deleted and recreated, time-sliced vgpu copies), priced by OpenCost's per-node
    spans, with two readings broken by hand: a vgpu copy that disagrees with its twin, and a reading written
    twice with two values."""
    ws = fleet.Workspace(tmp_path / "w", gpus=8, days=1)
    spec = replace(FactorySpec(), cluster=fleet.CLUSTER, days=1, mig_repartition=True, pod_churn=True)
    config_path = fleet.write_config(ws)
    config_path.write_text(
        config_path.read_text().replace("price_source: rate_card", "price_source: opencost")
    )
    write_parquet(
        spec, ws.warehouse / "raw", lookback_s=lookback_ms(load_config(config_path), fleet.CLUSTER) // 1000
    )
    (raw,) = ws.raw_files("raw_dcgm_samples", spec.start)
    rows = pq.read_table(raw)
    start_ms, _ = day_bounds_ms(spec.start)
    gr = pc.equal(rows["metric"], "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    in_day = pc.greater_equal(rows["ts_ms"], start_ms + 3_600_000)
    copy_at = pc.index(pc.and_(pc.and_(gr, in_day), pc.is_valid(rows["vgpu"])), True).as_py()
    plain_at = pc.index(pc.and_(pc.and_(gr, in_day), pc.is_null(rows["vgpu"])), True).as_py()
    value = rows["value"].to_pylist()
    value[copy_at] = 1.0 if value[copy_at] < 0.5 else 0.0  # the twin still says what it said
    at = rows.schema.get_field_index("value")
    twice = rows.slice(plain_at, 1).set_column(at, "value", pa.array([value[plain_at] / 2 + 0.25]))
    rows = pa.concat_tables([rows.set_column(at, "value", pa.array(value)), twice])
    pq.write_table(rows, raw)
    day = spec.start.isoformat()
    streaming_floor.sort_files(ws.root, day)
    inputs = streaming_floor.compute_inputs(ws.root, day)
    assert inputs["int_node_unschedulable_spans"] > 0 and inputs["int_node_gpu_price_spans"] > 0
    got = streaming_floor.check(ws.root, day)
    assert got["equal"], got["differ"]
    assert got["vgpu_copy_conflicts"] == 1 and got["series_samples_with_copies"] == 1
    assert got["unschedulable_gpu_samples"] > 0 and got["mig_gpu_samples_in_day"] > 0
    assert got["shared_holder_pairs"] > 0 and got["mig_price_units"] > 0
    # Where the compressed-samples design would cut besides its buckets: the cordoned node's and OpenCost's
    # spans, and the recreated pods' running spans, inside the day.
    cut = streaming_floor.cuts(ws.root, day)
    assert cut["node_boundaries"] > 0 and cut["holder_pod_boundaries"] > 0 and cut["holder_pods"] > 0


def test_cores_reports_each_rounds_ratios_and_each_steps_speedup() -> None:
    """bench.cores' summary, by hand: a/b′ of the meter and of each design (its pass plus the later models)
    per round and core count, and each step's mean over the rounds on one core over its mean on two."""

    def measured(scale: float) -> dict[str, float]:
        return {
            "b_prime_s": 10.0 * scale,
            "pass_duckdb_s": 20.0 * scale,
            "pass_parquet_s": 15.0 * scale,
            "later_over_tables_s": 18.0 * scale,
            "later_over_views_s": 24.0 * scale,
            "pass_hourly_s": 12.0 * scale,
            "no_dcgm_models_s": 5.0 * scale,
            "pass_compressed_s": 13.0 * scale,
            "later_over_compressed_s": 9.0 * scale,
            "meter_s": 90.0 * scale,
            "meter_cpu_s": 180.0,
        }

    rounds = [{"1": measured(2.0), "2": measured(1.0)}, {"1": measured(2.2), "2": measured(1.2)}]
    got = cores.summarize(rounds)
    # (20 + 18) / 10 = 3.8, (15 + 24) / 10 = 3.9, (12 + 5) / 10 = 1.7 and (13 + 9) / 10 = 2.2, at any
    # scale; the meter 90 / 10.
    by_hand = {
        "meter": 9.0,
        "design_duckdb": 3.8,
        "design_parquet": 3.9,
        "floor_mart_grain": 1.7,
        "floor_compressed": 2.2,
    }
    assert got["a_over_b_prime"] == [{c: by_hand for c in ("1", "2")}] * 2
    # Mean scale 2.1 on one core, 1.1 on two: every timed step speeds up by 2.1 / 1.1 = 1.91 (CPU not timed).
    assert got["speedup_1_to_2"] == {k: 1.91 for k in measured(1.0) if k != "meter_cpu_s"}
    assert got["mean_s"]["1"]["b_prime_s"] == 21.0 and got["mean_s"]["2"]["meter_s"] == 99.0
    # Rounds on two cores only: the ratios and means, and no speedup to report.
    two_only = cores.summarize([{"2": measured(1.0)}, {"2": measured(1.2)}])
    assert two_only["a_over_b_prime"] == [{"2": by_hand}] * 2 and "speedup_1_to_2" not in two_only
    assert two_only["mean_s"]["2"]["pass_hourly_s"] == 13.2


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
