"""The sample pass (gpumeter.models.sample_pass) against the per-sample SQL it replaced (tests/reference_sql/,
the models as they were): every intermediate table and mart, row for row, on the changing pool's days, on
simulated factory days (in time order and in the raw zone's GPU order, a day in several parts), on hostile
days (copies of a reading, values out of range, one UUID on two nodes, rows shuffled), and with the day cut
into one range of GPUs per GPU. Examples per property: $GPUMETER_PROPERTY_EXAMPLES (default 8)."""

from __future__ import annotations

import random
import tempfile
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpumeter_sim as simulator
from gpumeter.ingest.contract import RawFiles, day_bounds_ms
from gpumeter.ingest.row_order import gpu_ordered
from gpumeter.ingest.schema import DCGM_GPU_UTIL
from gpumeter.models import sample_pass
from gpumeter.models.project import SESSION_FOLDER, AccountingError, ProjectError, load_models
from gpumeter.models.runner import meter_day
from tests.builders import FactoryBuilder
from tests.sample_pass_reference import PASS_ONLY, differences, reference_models
from tests.test_changing_pool import CASES
from tests.test_changing_pool import DAY as CHANGING_DAY
from tests.test_fuzz import DAY as HOSTILE_DAY
from tests.test_fuzz import PROPERTY, _raw, hostile_days
from tests.test_properties import config_for, factories, raw_day
from tests.test_rules import A100, H100, P1, P2, make_config


def test_the_reference_is_the_sql_the_pass_replaced() -> None:
    """The reference swaps exactly the pass's models for SQL, and keeps every other model as it is."""
    ours = {m.name: m for m in load_models()}
    theirs = {m.name: m for m in reference_models()}
    assert set(ours) - set(theirs) == set(PASS_ONLY)
    assert set(theirs) - set(ours) == {"stg_dcgm_samples", "reference_gpu_samples"}
    replaced = {n for n in theirs if n in ours and theirs[n].sql != ours[n].sql}
    assert replaced == {
        "int_gpu_samples",
        "int_mig_instance_samples",
        "int_dcgm_quarantine",
        "int_keyed_device_holders",
        "int_vgpu_copy_conflicts",
        "int_gpu_sample_gaps",
    }
    assert ours["int_gpu_samples"].sql is None and ours["int_mig_instance_samples"].sql is None


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_changing_pool_meters_the_same(name: str) -> None:
    raw = CASES[name].build().build()
    assert differences(raw, CASES[name].config(), name, CHANGING_DAY) == {}


@given(spec=factories(), in_gpu_order=st.booleans())
@PROPERTY
def test_a_simulated_day_meters_the_same(spec: simulator.FactorySpec, in_gpu_order: bool) -> None:
    """The second day: its lookback is a part of its own, before the day's part; in time order as the
    simulator holds a day, or each part in the raw zone's GPU order."""
    day = spec.start + timedelta(days=1)
    raw = raw_day(spec, day)
    if in_gpu_order:
        start_ms, _ = day_bounds_ms(day)
        before = pa.compute.less(raw.dcgm["ts_ms"], start_ms)
        parts = [raw.dcgm.filter(before), raw.dcgm.filter(pa.compute.invert(before))]
        raw = replace(raw, dcgm=pa.concat_tables([gpu_ordered(part) for part in parts]))
    assert differences(raw, config_for(spec), spec.cluster, day) == {}


@given(rows=hostile_days(), seed=st.integers(0, 2**16))
@PROPERTY
def test_a_hostile_day_meters_the_same(rows: list[dict[str, object]], seed: int) -> None:
    random.Random(seed).shuffle(rows)
    assert differences(_raw(rows), make_config(), "c1", HOSTILE_DAY) == {}


def test_a_day_cut_into_a_range_per_gpu_meters_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo factory's day read one GPU at a time: no sample depends on the range its GPU is read in."""
    spec = simulator.demo_spec()
    day = spec.start + timedelta(days=1)
    raw = raw_day(spec, day)
    monkeypatch.setattr(sample_pass, "ROWS_PER_RANGE", 1)
    assert differences(raw, config_for(spec), spec.cluster, day) == {}


@pytest.mark.parametrize("in_gpu_order", [False, True])
def test_a_day_streamed_in_small_batches_meters_the_same(
    monkeypatch: pytest.MonkeyPatch, in_gpu_order: bool
) -> None:
    """The demo factory's day streamed a thousand rows at a time into ranges of a few GPUs: in time order each
    batch is set apart across ranges and each range gathers pieces of many batches; in GPU order most batches
    fall in one range. No sample depends on how the stream was cut."""
    spec = simulator.demo_spec()
    day = spec.start + timedelta(days=1)
    raw = raw_day(spec, day)
    if in_gpu_order:
        raw = replace(raw, dcgm=gpu_ordered(raw.dcgm))
    monkeypatch.setattr(sample_pass, "SPILL_BATCH_ROWS", 1000)
    monkeypatch.setattr(sample_pass, "ROWS_PER_RANGE", 20_000)
    assert differences(raw, config_for(spec), spec.cluster, day) == {}


def test_a_day_whose_gpus_come_in_no_order_meters_the_same_unsorted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A stored part with each GPU's rows together and in order, the GPUs last to first (as a range set apart
    from several parts comes, a node group's GPUs in each): the pass reads them as they are, without sorting
    them, and meters as the reference SQL does."""
    spec = simulator.demo_spec()
    day = spec.start + timedelta(days=1)
    raw = raw_day(spec, day)
    ordered = gpu_ordered(raw.dcgm)
    files: dict[str, list[Path]] = {}
    for name, table in raw.tables().items():
        if name == "raw_dcgm_samples":
            table = ordered.take(pc.sort_indices(ordered, sort_keys=[("uuid", "descending")]))
        files[name] = [tmp_path / f"{name}.parquet"]
        pq.write_table(table, files[name][0])
    seen: list[tuple[bool, bool]] = []
    order = sample_pass.rows_order

    def watched(gpu: np.ndarray, ts: np.ndarray, place: np.ndarray, metric: np.ndarray) -> np.ndarray | None:
        found = order(gpu, ts, place, metric)
        seen.append((bool(np.any(gpu[1:] < gpu[:-1])), found is None))
        return found

    monkeypatch.setattr(sample_pass, "rows_order", watched)
    assert differences(RawFiles(files), config_for(spec), spec.cluster, day) == {}
    assert (True, True) in seen  # a range with its GPUs out of order was read as it came, not sorted


def test_the_order_of_a_range_is_checked_not_assumed() -> None:
    """Runs of one GPU each, in order inside: read as they come; a GPU in two runs, or a run out of order inside,
    is sorted (GPU, time, series, metric)."""
    gpu = np.array([3, 3, 1, 1, 2])
    ts = np.array([10, 20, 10, 20, 10])
    place = np.array([5, 5, 0, 0, 2])
    metric = np.array([0, 0, 1, 1, 0], dtype=np.uint8)
    assert sample_pass.rows_order(gpu, ts, place, metric) is None
    split = np.array([3, 1, 3, 1, 2]), np.array([10, 10, 20, 20, 10]), np.array([5, 0, 5, 0, 2])
    assert sample_pass.rows_order(*split, metric).tolist() == [1, 3, 4, 0, 2]
    late = np.array([20, 10, 10, 20, 10])
    assert sample_pass.rows_order(gpu, late, place, metric).tolist() == [2, 3, 4, 1, 0]


def test_the_pass_keeps_its_files_in_the_session_folder_and_they_go_with_the_session(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The samples are Parquet files in the session's folder, read through views; the folder is removed when
    the session ends, whether the day is metered or stops, in memory or in a temp directory."""
    spec = simulator.demo_spec()
    day = spec.start + timedelta(days=1)
    raw, config = raw_day(spec, day), config_for(spec)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "system"))
    (tmp_path / "system").mkdir()
    seen: list[tuple[str, list[str]]] = []
    run = sample_pass.run

    def watched(con: duckdb.DuckDBPyConnection) -> None:
        run(con)
        ((folder,),) = con.sql(f"select getvariable('{SESSION_FOLDER}')").fetchall()
        kinds = con.sql(
            "select table_name, table_type from information_schema.tables where table_name in (?, ?)",
            params=[sample_pass.GPU_SAMPLES, sample_pass.MIG_INSTANCE_SAMPLES],
        ).fetchall()
        assert sorted(kinds) == sorted(
            (name, "VIEW") for name in (sample_pass.GPU_SAMPLES, sample_pass.MIG_INSTANCE_SAMPLES)
        )
        seen.append((folder, sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*.parquet"))))

    monkeypatch.setattr(sample_pass, "run", watched)
    samples = meter_day(raw, config, spec.cluster, day, select=("int_gpu_samples",))["int_gpu_samples"]
    meter_day(raw, config, spec.cluster, day, select=("int_gpu_samples",), temp_directory=tmp_path / "run")
    (in_memory, files), (in_directory, _) = seen
    assert Path(in_memory).parent == tmp_path / "system"
    assert Path(in_directory) == tmp_path / "run" / "session"
    assert files and all(
        name.startswith((sample_pass.GPU_SAMPLES, sample_pass.MIG_INSTANCE_SAMPLES)) for name in files
    )
    assert samples.num_rows > 0
    assert not Path(in_memory).exists() and not Path(in_directory).exists()

    def stops(*_args: object) -> None:
        raise AccountingError("stopped on purpose")

    monkeypatch.setattr(sample_pass, "samples_of_range", stops)
    for temp_directory in (None, tmp_path / "run"):
        with pytest.raises(AccountingError, match="stopped on purpose"):
            meter_day(
                raw, config, spec.cluster, day, select=("int_gpu_samples",), temp_directory=temp_directory
            )
    with pytest.raises(ProjectError, match="no model named no_such_model"):  # refused before a session opens
        meter_day(raw, config, spec.cluster, day, select=("no_such_model",))
    assert not (tmp_path / "run" / "session").exists()
    assert list((tmp_path / "system").iterdir()) == []


def _edges() -> FactoryBuilder:
    """A day with what only a few samples show: vgpu copies that disagree (a whole GPU's, a MIG instance's)
    and that agree; scrapes repeated exactly Δ/2 and just over Δ/2 apart; an energy counter reset and a
    sample without energy; a MIG GPU whose instances go, a gap of three scrapes, then of exactly two; one
    UUID on two nodes."""
    f = FactoryBuilder("c1", HOSTILE_DAY, scrape_s=60).gpu("n1", "GPU-V", H100).gpu("n2", "GPU-M", A100)
    f.gpu("n3", "GPU-R", H100)
    for index in range(-2, 6):
        f.sample("GPU-V", index, util=10 + index, energy=1000 * index + 5000, pod=P1, vgpu="0")
        f.sample(
            "GPU-V", index, util=10 + index + (index == 1) * 5, energy=1000 * index + 5000, pod=P2, vgpu="1"
        )
    f.sample("GPU-V", 7, util=50, energy=100, pod=P1)  # the counter went down: reset, 100 mJ accrued
    f.sample("GPU-V", 8, util=50, pod=P1)  # no energy reading: none accrued
    f.sample("GPU-V", 9, util=50, energy=400, pod=P1)  # 300 mJ since the last reading
    for index in (0, 1, 2):
        f.sample("GPU-M", index, gr=0.5, gpu_i_id="1", profile="3g.40gb", pod=P1, vgpu="0")
        f.sample(
            "GPU-M", index, gr=0.5 + (index == 2) * 0.25, gpu_i_id="1", profile="3g.40gb", pod=P2, vgpu="1"
        )
        f.sample("GPU-M", index, energy=7000 + index, fb=1000)
    f.samples("GPU-M", [3, 4], energy=7100, fb=900)  # instances gone: still MIG in the run
    f.samples("GPU-M", [8, 9], energy=7200)  # after a gap of three scrapes: a new run, whole
    f.sample("GPU-M", 10, gr=0.1, gpu_i_id="2", profile="4g.40gb")
    f.sample("GPU-M", 12, energy=7300)  # two scrapes after: the same run, still MIG
    f.samples("GPU-R", range(0, 4), util=30, pod=P1)
    half = f.ts(0) + 30_000  # Δ/2 after sample 0: a repeated scrape
    f.dcgm_row(half, DCGM_GPU_UTIL, 30.0, hostname="n3", uuid="GPU-R", model_name=H100, gpu="0")
    f.dcgm_row(f.ts(2) + 30_001, DCGM_GPU_UTIL, 30.0, hostname="n3", uuid="GPU-R", model_name=H100, gpu="0")
    f.dcgm_row(f.ts(3), DCGM_GPU_UTIL, 31.0, hostname="n1", uuid="GPU-R", model_name=H100, gpu="0")
    return f


def test_a_day_of_edges_meters_the_same() -> None:
    """The few-sample cases, metered both ways, and what the pass found, said by hand."""
    f = _edges()
    out = meter_day(f.build(), make_config(), "c1", HOSTILE_DAY, keep_layers=("staging", "intermediate"))
    uuid_of = {r["gpu_key"]: r["uuid"] for r in out["stg_dcgm_series"].to_pylist()}
    gpu = {(uuid_of[r["gpu_key"]], r["ts_ms"]): r for r in out["int_gpu_samples"].to_pylist()}
    conflicts = {(r["device_id"], r["ts_ms"]) for r in out["int_vgpu_copy_conflicts"].to_pylist()}
    assert conflicts == {("GPU-V", f.ts(1)), ("GPU-M/1", f.ts(2))}
    # A sample at most Δ/2 after the previous one repeats a scrape: 30,000 ms after sample 0, and sample 1
    # after it; 30,001 ms after sample 2 is a sample of its own, and sample 3, 29,999 ms after that, repeats.
    repeated = sorted(key for key, r in gpu.items() if r["repeats_scrape"])
    assert repeated == [("GPU-R", f.ts(0) + 30_000), ("GPU-R", f.ts(1)), ("GPU-R", f.ts(3))]
    # A counter that went down was reset: its new value accrued; no reading, nothing; then the step.
    assert [gpu[("GPU-V", f.ts(i))]["energy_mj"] for i in (7, 8, 9)] == [100, 0, 300]
    # MIG while instances show and in the rest of their run; whole after a gap of more than two scrapes.
    modes = [gpu[("GPU-M", f.ts(i))]["is_mig"] for i in (0, 1, 2, 3, 4, 8, 9, 10, 12)]
    assert modes == [True] * 5 + [False, False, True, True]
    merged = [r for r in out["int_dcgm_quarantine"].to_pylist() if r["reason"] == "uuid_on_several_nodes"]
    assert [(r["hostname"], r["ts_ms"]) for r in merged] == [("n3", f.ts(3))]  # billed at n1, first by name
    assert differences(f.build(), make_config(), "c1", HOSTILE_DAY) == {}


@pytest.mark.parametrize("damage", ["none", "clamped", "ignored", "dropped"])
def test_the_quarantine_looks_for_judged_rows_only_where_the_pass_saw_one(
    monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """The pass tells the quarantine whether the day has a dropped row, and one whose value was ignored or
    clamped; a day with one kind alone finds its row, a clean day none, and the reference (which looks at
    every row) agrees."""
    f = FactoryBuilder("c1", HOSTILE_DAY, scrape_s=60).gpu("n1", "GPU-A", H100)
    f.samples("GPU-A", [0, 1, 3], util=30, pod=P1)
    util_at_2 = {"none": 30.0, "clamped": 150.0, "ignored": -1.0, "dropped": 30.0}[damage]
    f.sample("GPU-A", 2, util=util_at_2, pod=P1)
    if damage == "dropped":
        f.dcgm_row(f.ts(1), DCGM_GPU_UTIL, 30.0, hostname="n1", uuid=None, model_name=H100, gpu="0")
    seen: list[tuple[bool, bool]] = []
    run = sample_pass.run

    def watched(con: duckdb.DuckDBPyConnection) -> None:
        run(con)
        ((dropped, changed),) = con.sql(
            f"select getvariable('{sample_pass.DROPPED_ROWS_SEEN}'), "
            f"getvariable('{sample_pass.CHANGED_VALUES_SEEN}')"
        ).fetchall()
        seen.append((dropped, changed))

    monkeypatch.setattr(sample_pass, "run", watched)
    out = meter_day(f.build(), make_config(), "c1", HOSTILE_DAY, keep_layers=("intermediate",))
    found = sorted((r["reason"], r["action"], r["ts_ms"]) for r in out["int_dcgm_quarantine"].to_pylist())
    expected = {
        "none": [],
        "clamped": [("over_range", "clamped", f.ts(2))],
        "ignored": [("negative_value", "value_ignored", f.ts(2))],
        "dropped": [("missing_uuid", "dropped", f.ts(1))],
    }[damage]
    assert found == expected
    assert seen == [(damage == "dropped", damage in ("clamped", "ignored"))]
    assert differences(f.build(), make_config(), "c1", HOSTILE_DAY) == {}
