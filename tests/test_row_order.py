"""The raw zone's order of DCGM rows (gpumeter.ingest.row_order): by GPU, time, series key and metric, a null
last, rows equal in all four in the order they came. The truth is Python's own stable sort of the rows as
tuples; the writers (the Prometheus mapping, the simulator's Parquet files) and the pull are held to it."""

from __future__ import annotations

import random
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpumeter_sim as simulator
from gpumeter.ingest.contract import RawDay
from gpumeter.ingest.prometheus.raw_tables import Series, SeriesMapping
from gpumeter.ingest.row_order import DCGM_ROW_ORDER, gpu_ordered, in_gpu_order, lexicographic_order
from gpumeter.ingest.schema import RAW_DCGM_SCHEMA, RAW_TABLES
from tests.test_properties import PROPERTY_SETTINGS


def python_key(row: dict[str, Any]) -> tuple[Any, ...]:
    """A row's place in the order, by hand: each key's null after every value."""
    return tuple(x for name in DCGM_ROW_ORDER for x in (row[name] is None, row[name] or 0))


def by_python(rows: pa.Table) -> list[dict[str, Any]]:
    return sorted(rows.to_pylist(), key=python_key)  # sorted() is stable


UUIDS = st.one_of(st.none(), st.sampled_from(["GPU-b", "GPU-a", "GPU-c", "GPU-a0"]))
METRICS = st.one_of(st.none(), st.sampled_from(["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "A", "Z"]))
ROWS = st.lists(
    st.fixed_dictionaries(
        {
            "uuid": UUIDS,
            "ts_ms": st.one_of(st.none(), st.integers(0, 5), st.just(2**62), st.just(-(2**62))),
            "series_key": st.one_of(st.none(), st.sampled_from([0, 7, 2**63 + 1, 2**64 - 1])),
            "metric": METRICS,
            "value": st.floats(allow_nan=False),
        }
    ),
    max_size=40,
)


def raw(rows: list[dict[str, Any]], dictionary: bool = False) -> pa.Table:
    table = pa.Table.from_pylist(
        [{**{name: None for name in RAW_DCGM_SCHEMA.names}, **row} for row in rows], schema=RAW_DCGM_SCHEMA
    )
    if not dictionary:
        return table
    for name in ("uuid", "metric"):
        table = table.set_column(
            table.schema.get_field_index(name), name, table[name].combine_chunks().dictionary_encode()
        )
    return table


@PROPERTY_SETTINGS
@given(rows=ROWS, dictionary=st.booleans())
def test_rows_are_put_in_gpu_order_as_python_sorts_them(rows: list[dict[str, Any]], dictionary: bool) -> None:
    table = raw(rows, dictionary)
    ordered = gpu_ordered(table)
    assert ordered.cast(RAW_DCGM_SCHEMA).to_pylist() == by_python(raw(rows))
    assert in_gpu_order(ordered)
    assert in_gpu_order(table) == (table.cast(RAW_DCGM_SCHEMA).to_pylist() == by_python(raw(rows)))


def test_rows_already_in_order_are_kept_as_they_are() -> None:
    rows = [
        {"uuid": "GPU-a", "ts_ms": 1, "series_key": 2**64 - 1, "metric": "B"},
        {"uuid": "GPU-a", "ts_ms": 2, "series_key": 1, "metric": "A"},
        {"uuid": "GPU-b", "ts_ms": 0, "series_key": 1, "metric": "A"},
        {"uuid": None, "ts_ms": 0, "series_key": None, "metric": None},
    ]
    table = raw(rows)
    assert gpu_ordered(table) is table
    # A step down in time within one GPU, or in the series key within one sample, is out of order.
    assert not in_gpu_order(raw([rows[1], rows[0]]))
    assert not in_gpu_order(raw([rows[0], {**rows[1], "ts_ms": 1}]))
    # The series key compares as the unsigned integer it is (2**64 - 1 after 1, not before it as an int64).
    assert in_gpu_order(raw([{**rows[0], "series_key": 1}, rows[0]]))
    # A null comes after the largest value, not level with it.
    for name, top in (("series_key", 2**64 - 1), ("ts_ms", 2**63 - 1)):
        largest = {**rows[0], name: top}
        assert not in_gpu_order(raw([{**largest, name: None}, largest])), name
        assert [r[name] for r in gpu_ordered(raw([{**largest, name: None}, largest])).to_pylist()] == [
            top,
            None,
        ]


def test_stored_tables_put_only_the_dcgm_rows_in_order() -> None:
    rows = [
        {"uuid": "GPU-b", "ts_ms": 0, "series_key": 1, "metric": "A", "value": 1.0},
        {"uuid": "GPU-a", "ts_ms": 5, "series_key": 1, "metric": "A", "value": 2.0},
        {"uuid": "GPU-a", "ts_ms": 0, "series_key": 9, "metric": "A", "value": 3.0},
    ]
    kube = RAW_TABLES["raw_kube_samples"].empty_table()
    stored = RawDay(raw(rows), kube).stored_tables()
    assert [r["value"] for r in stored["raw_dcgm_samples"].to_pylist()] == [3.0, 2.0, 1.0]
    assert stored["raw_kube_samples"] is kube


def test_the_prometheus_mapping_writes_rows_in_gpu_order() -> None:
    """Series as the pull holds them (each its own samples in time order) become raw rows in GPU order, for
    whole GPUs, MIG instances of one GPU and a series with no UUID."""
    rng = random.Random(16)
    series = []
    for uuid, iid in (("GPU-b", None), ("GPU-a", "1"), ("GPU-a", None), ("GPU-a", "2"), (None, None)):
        for metric in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"):
            labels = {"__name__": metric, "Hostname": "n1", "modelName": "H100"}
            labels |= {"UUID": uuid} if uuid else {}
            labels |= {"GPU_I_ID": iid, "GPU_I_PROFILE": "1g.10gb"} if iid else {}
            times = np.array(sorted(rng.sample(range(0, 600_000, 30_000), 12)), np.int64)
            series.append(Series(labels, [times], [times.astype(np.float64)], tuple(sorted(labels.items()))))
    table = SeriesMapping("cluster", ()).dcgm_table("c1", series)
    assert table.num_rows == 10 * 12
    assert table.to_pylist() == by_python(table)


def test_the_simulators_parquet_files_are_in_gpu_order(tmp_path: Path) -> None:
    """Each file the simulator writes (node groups, and the next day's lookback files) holds its rows in GPU
    order: the same rows as its day, which it keeps in time order for the OpenMetrics writer."""
    spec = simulator.FactorySpec(h100_nodes=2, a100_nodes=1, gpus_per_node=2, scrape_interval_s=300, days=2)
    simulator.write_parquet(spec, tmp_path, nodes_per_part=1, lookback_s=600)
    files = sorted(tmp_path.glob("raw_dcgm_samples/**/*.parquet"))
    second = [p.name for p in files if f"day={spec.day_list[1]}" in str(p)]
    lookbacks = [name for name in second if name.startswith("lookback-")]
    assert len(lookbacks) >= 2 and len(second) == 2 * len(lookbacks)  # a lookback file per node group
    for path in files:
        table = pq.read_table(path)
        assert table.num_rows and table.to_pylist() == by_python(table), path
    day: date = spec.day_list[0]
    as_simulated = simulator.simulate_day(spec, day).dcgm
    written = pa.concat_tables(pq.read_table(p) for p in files if f"day={day}" in str(p))
    assert by_python(written) == by_python(as_simulated)


@pytest.mark.parametrize("dictionary", [False, True])
def test_a_large_table_is_ordered_as_python_orders_it(dictionary: bool) -> None:
    rng = random.Random(7)
    rows = [
        {
            "uuid": rng.choice([None, *(f"GPU-{i:03d}" for i in range(50))]),
            "ts_ms": rng.randrange(-(2**40), 2**40),
            "series_key": rng.randrange(2**64),
            "metric": rng.choice(["A", "B", "C"]),
            "value": float(i),
        }
        for i in range(20_000)
    ]
    assert gpu_ordered(raw(rows, dictionary)).cast(RAW_DCGM_SCHEMA).to_pylist() == by_python(raw(rows))


@pytest.mark.parametrize("high", [3, 2**40], ids=["one int64 key", "too wide for one: lexsort"])
def test_the_order_by_integer_keys_is_pythons(high: int) -> None:
    """lexicographic_order, which the order, the Prometheus mapping and the simulator sort with: stable, most
    significant key first, whether the keys fit one int64 or not."""
    rng = random.Random(high)
    rows = [(rng.randrange(high), rng.randrange(high), rng.randrange(high)) for _ in range(2_000)]
    keys = [np.array(column, np.int64) for column in zip(*rows, strict=True)]
    assert lexicographic_order(keys).tolist() == sorted(range(len(rows)), key=lambda i: rows[i])
