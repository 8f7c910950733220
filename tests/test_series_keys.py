"""The DCGM series key: stored with each raw row by the sources that know their series (the pull, the
simulator), or a hash of the labels where a day's rows do not all carry one. Either way the day meters to the
same marts; a series keyed two ways, or two series under one key, stops the day with one error."""

from __future__ import annotations

from dataclasses import replace
from datetime import date
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpumeter_sim as simulator
from gpumeter.ingest.contract import RawDay, RawFiles
from gpumeter.ingest.k8s_objects import parse_resource_claims, parse_resource_slices
from gpumeter.ingest.schema import DCGM_GPU_UTIL, DCGM_SERIES_LABELS, dcgm_series_key
from gpumeter.models.project import AccountingError
from gpumeter.models.runner import _stores_series_keys, meter_day
from tests.test_properties import config_for
from tests.test_rules import H100, P1, P2, factory, make_config

DAY = date(2026, 11, 1)
SPEC = replace(simulator.demo_spec(), cluster="prop", start=DAY, days=1, scrape_interval_s=300)
LABELS = ["c1", "n1", "GPU-1", None, "ns-a", "p1", "main", "NVIDIA H100 80GB HBM3", None]


def key(labels: list[str | None]) -> int:
    return dcgm_series_key(dict(zip(DCGM_SERIES_LABELS, labels, strict=True)))


def test_the_key_of_a_label_set_never_changes() -> None:
    """Files written by another version or source must key one label set alike: the function is pinned."""
    assert key(LABELS) == 14573155268895575014
    # The raw row's other columns are not the series' (the metric, the value, the GPU index, vgpu, DRA).
    assert dcgm_series_key(dict(zip(DCGM_SERIES_LABELS, LABELS, strict=True), metric="x", vgpu="1")) == key(
        LABELS
    )
    with pytest.raises(KeyError, match="gpu_i_profile"):
        dcgm_series_key(dict(zip(DCGM_SERIES_LABELS[:-1], LABELS, strict=False)))


def test_keys_tell_apart_label_sets_that_read_alike() -> None:
    """A null is not the empty string, a boundary moved between two labels is another series, and so is a
    value moved to another label."""
    variants = [
        LABELS,
        [*LABELS[:3], "", *LABELS[4:]],  # gpu_i_id '' instead of null
        ["c1", "n1", "GPU-1", None, "ns-ap", "1", "main", LABELS[7], None],  # ns-a|p1 -> ns-ap|1
        ["c1", "n1", "GPU-1", None, "p1", "ns-a", "main", LABELS[7], None],  # namespace and pod swapped
        ["c1", "n1", "GPU-1", None, None, None, None, LABELS[7], None],  # no pod labels
        ["c1", "n1", "GPU-1", "1", "ns-a", "p1", "main", LABELS[7], "1g.10gb"],
    ]
    assert len({key(v) for v in variants}) == len(variants)


def _sim_day() -> tuple[RawDay, pa.Table]:
    day = simulator.simulate_day(SPEC, DAY)
    raw = RawDay(
        day.dcgm,
        day.kube,
        parse_resource_claims(day.resource_claims, SPEC.cluster, "claims.json"),
        parse_resource_slices(day.resource_slices, SPEC.cluster, "slices.json"),
    )
    return raw, day.dcgm


def _without_keys(dcgm: pa.Table) -> pa.Table:
    return dcgm.set_column(
        dcgm.schema.get_field_index("series_key"), "series_key", pa.nulls(dcgm.num_rows, pa.uint64())
    )


def _sorted(table: pa.Table) -> list[dict[str, object]]:
    return sorted(table.to_pylist(), key=repr)


def test_the_simulator_keys_each_row_by_its_labels() -> None:
    _, dcgm = _sim_day()
    series = dcgm.group_by([*DCGM_SERIES_LABELS, "series_key"]).aggregate([]).to_pylist()
    assert len(series) > 20
    for row in series:
        assert row["series_key"] == dcgm_series_key(row)
    assert len({row["series_key"] for row in series}) == len(series)


def test_a_day_meters_alike_with_stored_keys_hashed_keys_and_a_mix_of_files(tmp_path: Path) -> None:
    raw, dcgm = _sim_day()
    config = config_for(SPEC)
    marts = ("marts",)
    stored = meter_day(raw, config, SPEC.cluster, DAY, keep_layers=marts)
    hashed = meter_day(replace(raw, dcgm=_without_keys(dcgm)), config, SPEC.cluster, DAY, keep_layers=marts)
    # Files: the first half of the rows with their keys, the second half written before keys were stored.
    half = dcgm.num_rows // 2
    keyed, unkeyed = tmp_path / "keyed.parquet", tmp_path / "unkeyed.parquet"
    pq.write_table(dcgm.slice(0, half), keyed)
    pq.write_table(dcgm.slice(half).drop_columns(["series_key"]), unkeyed)
    others = {}
    for name, table in raw.tables().items():
        if name != "raw_dcgm_samples":
            others[name] = [tmp_path / f"{name}.parquet"]
            pq.write_table(table, others[name][0])
    mixed = meter_day(
        RawFiles({"raw_dcgm_samples": [keyed, unkeyed], **others}),
        config,
        SPEC.cluster,
        DAY,
        keep_layers=marts,
    )
    assert stored.keys() == hashed.keys() == mixed.keys() and "mart_tenant_daily_cost" in stored
    for name in stored:
        assert _sorted(stored[name]) == _sorted(hashed[name]) == _sorted(mixed[name]), name
    assert stored["mart_device_seconds"].num_rows > 0


def test_stored_keys_are_taken_only_where_every_file_carries_them_in_every_row(tmp_path: Path) -> None:
    def file(name: str, keys: list[int | None] | None) -> str:
        columns: dict[str, pa.Array] = {"ts_ms": pa.array([1, 2], pa.int64())}
        if keys is not None:
            columns["series_key"] = pa.array(keys, pa.uint64())
        pq.write_table(pa.table(columns), tmp_path / name)
        return "'" + str(tmp_path / name) + "'"

    a, b, c, d = (
        file("a.parquet", [1, 2]),
        file("b.parquet", [3, 3]),
        file("c.parquet", None),
        file("d.parquet", [4, None]),
    )
    con = duckdb.connect()
    try:
        assert _stores_series_keys(con, f"{a}, {b}", 2)
        assert not _stores_series_keys(con, f"{a}, {c}", 2)  # one file written before keys
        assert not _stores_series_keys(con, f"{a}, {d}", 2)  # a row without its key
    finally:
        con.close()


def test_a_series_whose_rows_carry_two_keys_stops_the_day() -> None:
    """Two writers that key one series differently would split its samples into two series (and miss a copy
    of one reading across them): the day stops and names the series."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(4), util=50, pod=P1)
    raw = f.build()
    keys = pa.array([7 if i % 2 else 8 for i in range(raw.dcgm.num_rows)], pa.uint64())
    dcgm = raw.dcgm.set_column(raw.dcgm.schema.get_field_index("series_key"), "series_key", keys)
    with pytest.raises(AccountingError, match="GPU GPU-1 on node n1 of pod ns-a/p1 carries two series keys"):
        meter_day(replace(raw, dcgm=dcgm), make_config(), f.cluster, f.day)


def test_two_series_under_one_stored_key_stop_the_day() -> None:
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(2), util=50, pod=P1)
    f.samples("GPU-1", range(2), util=50, pod=P2)
    raw = f.build()
    assert set(raw.dcgm.column("metric").to_pylist()) >= {DCGM_GPU_UTIL}
    keys = pa.array([42] * raw.dcgm.num_rows, pa.uint64())
    dcgm = raw.dcgm.set_column(raw.dcgm.schema.get_field_index("series_key"), "series_key", keys)
    with pytest.raises(AccountingError, match="two DCGM series share the key 42"):
        meter_day(replace(raw, dcgm=dcgm), make_config(), f.cluster, f.day)
