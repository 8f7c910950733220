"""The raw kube table stored as spans (gpumeter.ingest.kube_spans, R1a): every row a span table stands for comes
back from it, copies and all; a day the pull stored as spans is metered as the same day handed over as rows; a
Parquet source reads a pulled day's spans back as its rows."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_changing_pool import CASES, DAY
from test_rules import make_config

from gpumeter.ingest.contract import RawFiles, lookback_ms
from gpumeter.ingest.kube_series import KubeSeries, SpanBuilder
from gpumeter.ingest.kube_spans import create_spans, decode_spans, is_spans, span_samples
from gpumeter.ingest.parquet import ParquetRawSource
from gpumeter.ingest.pull import pull_raw_day
from gpumeter.ingest.schema import RAW_KUBE_SCHEMA, RAW_KUBE_SPANS_SCHEMA, RAW_TABLES
from gpumeter.models.runner import meter_day
from gpumeter.storage.paths import RAW
from gpumeter.storage.warehouse import Warehouse

SETTINGS = settings(
    max_examples=int(os.environ.get("GPUMETER_PROPERTY_EXAMPLES", "8")) * 5,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
T0 = 1_793_491_200_000  # 2026-11-01T00:00:00Z


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    value = row["value"]
    shown = "nan" if value is not None and math.isnan(value) else value
    return (row["cluster"], row["ts_ms"], row["metric"], shown, row["labels"], row["target"])


def _spans(rows: pa.Table) -> pa.Table:
    con = duckdb.connect()
    try:
        con.register("rows_arrow", rows)
        create_spans(con, "rows_arrow", "spans")
        return con.sql("select * from spans").to_arrow_table()
    finally:
        con.close()


# Per target, the scrapes it had (a 30 s grid with gaps, some beyond the lookback); per series and scrape what
# it showed: nothing, a value, a value twice (copies), or two values.
shown = st.sampled_from(["none", "value", "copies", "two"])
series = st.tuples(
    st.sampled_from(["c1", "c2"]),
    st.sampled_from(["kube_pod_status_phase", "kube_node_labels", "kueue_x_usage", "node_gpu_hourly_cost"]),
    st.sampled_from(['{"pod": "a"}', '{"pod": "b"}', None]),
    st.sampled_from([None, "ksm/a", "ksm/b"]),
)


@SETTINGS
@given(st.data())
def test_spans_stand_for_every_row_they_were_made_of(data: st.DataObject) -> None:
    rows: list[dict[str, Any]] = []
    for cluster, metric, labels, target in data.draw(st.lists(series, min_size=1, max_size=6, unique=True)):
        for step in data.draw(st.lists(st.integers(0, 30), min_size=1, max_size=20, unique=True)):
            what = data.draw(shown)
            value = data.draw(st.sampled_from([0.0, 1.0, 2.5, float("nan"), None]))
            row = {"cluster": cluster, "ts_ms": T0 + step * 30_000, "metric": metric, "value": value,
                   "labels": labels, "target": target}  # fmt: skip
            if what != "none":
                rows.append(row)
            if what == "copies":
                rows.append(dict(row))
            if what == "two":
                rows.append(row | {"value": 7.0})
    # A row of no series (no metric) still marks a scrape of its target; a row with no time is no sample.
    rows.append({"cluster": "c1", "ts_ms": T0 + 31 * 30_000, "metric": None, "value": 1.0, "labels": None,
                 "target": "ksm/a"})  # fmt: skip
    rows.append({"cluster": "c1", "ts_ms": None, "metric": "kube_node_labels", "value": 1.0, "labels": None,
                 "target": None})  # fmt: skip
    table = pa.Table.from_pylist(rows, schema=RAW_KUBE_SCHEMA)
    spans = _spans(table)
    assert is_spans(spans.schema)
    back = pa.concat_tables([RAW_KUBE_SCHEMA.empty_table(), *decode_spans(spans)])
    kept = [r for r in rows if r["metric"] is not None and r["ts_ms"] is not None]
    assert sorted(map(_key, back.to_pylist()), key=repr) == sorted(map(_key, kept), key=repr)
    # The scrape of the row with no metric is kept: a series shown before it has ended there (R1a).
    scrapes = spans.filter(pa.compute.is_null(spans.column("metric"))).to_pylist()
    assert {"cluster": "c1", "target": "ksm/a", "ts_ms": T0 + 31 * 30_000} in [
        {k: s[k] for k in ("cluster", "target", "ts_ms")} for s in scrapes
    ]


# A series as the Prometheus pull hands it over: always a metric, a labels object and a value.
series_key = st.tuples(
    st.sampled_from(["c1", "c2"]),
    st.sampled_from(["kube_pod_status_phase", "kube_node_labels", "opencost_x"]),
    st.sampled_from(['{"pod":"a"}', '{"pod":"b"}']),
    st.sampled_from([None, "ksm/a"]),
)


def _stored_order(spans: pa.Table) -> list[tuple[Any, ...]]:
    """The rows of `spans` in the order the pull stores them, NaN as "nan" (NaN != NaN)."""
    order = ["ts_ms", "last_ms", "cluster", "target", "metric", "labels", "value", "copies"]
    return _as_rows(spans.cast(RAW_KUBE_SPANS_SCHEMA).sort_by([(c, "ascending") for c in order]))


def _as_rows(spans: pa.Table) -> list[tuple[Any, ...]]:
    assert spans.schema == RAW_KUBE_SPANS_SCHEMA
    return [
        tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in row.values())
        for row in spans.to_pylist()
    ]


@SETTINGS
@given(st.data())
def test_spans_made_part_by_part_are_the_spans_of_the_rows(data: st.DataObject) -> None:
    """The pull's SpanBuilder (hours of series in time order, runs joined across part edges) stores what
    create_spans makes of the same samples as rows: copies (two series of one key), two values at one
    scrape, NaN, gaps, samples out of order within a series, and part edges anywhere."""
    keys = data.draw(st.lists(series_key, min_size=1, max_size=5))
    ts: list[np.ndarray] = []
    values: list[np.ndarray] = []
    for _ in keys:
        steps = data.draw(st.permutations(data.draw(st.lists(st.integers(0, 30), max_size=20, unique=True))))
        ts.append(np.array([T0 + k * 30_000 for k in steps], np.int64))
        drawn = [data.draw(st.sampled_from([0.0, 1.0, 2.5, float("nan")])) for _ in steps]
        values.append(np.array(drawn, np.float64))
    cuts = sorted(data.draw(st.lists(st.integers(1, 30), max_size=4, unique=True)))
    edges = [T0, *(T0 + c * 30_000 - data.draw(st.integers(0, 29_999)) for c in cuts), T0 + 31 * 30_000]
    builder = SpanBuilder()
    for lo, hi in zip(edges, edges[1:], strict=False):
        inside = [(t >= lo) & (t < hi) for t in ts]
        builder.add(
            KubeSeries(
                keys,
                [t[i] for t, i in zip(ts, inside, strict=True)],
                [v[i] for v, i in zip(values, inside, strict=True)],
            )
        )
    rows = KubeSeries(keys, ts, values).rows()
    assert builder.samples == rows.num_rows
    assert _as_rows(builder.table()) == _stored_order(_spans(rows))


def test_runs_meet_across_a_part_edge_and_end_at_a_gap() -> None:
    """Hand-made: a target scraped at steps 0..5 (Δ = 30 s), handed over as steps 0-2 and 3-5."""
    a = ("c1", "kube_pod_status_phase", '{"pod":"a"}', "ksm/a")
    b = ("c1", "kube_pod_status_phase", '{"pod":"b"}', "ksm/a")

    def at(*steps: int) -> np.ndarray:
        return np.array([T0 + k * 30_000 for k in steps], np.int64)

    builder = SpanBuilder()
    # pod a: 1 at 0-3, then 0 at 4-5; its key twice at 0-1 (a copy, as two series of one key are); pod b:
    # 1 at 0, 1 and 3 (not shown at scrape 2)
    builder.add(
        KubeSeries([a, a, b], [at(0, 1, 2), at(0, 1), at(0, 1)], [np.ones(3), np.ones(2), np.ones(2)])
    )
    builder.add(KubeSeries([a, b], [at(3, 4, 5), at(3)], [np.array([1.0, 0.0, 0.0]), np.ones(1)]))
    got = {
        (r["labels"], r["ts_ms"], r["last_ms"], r["value"], r["copies"])
        for r in builder.table().to_pylist()
        if r["metric"] is not None
    }
    assert got == {
        ('{"pod":"a"}', T0, T0 + 30_000, 1.0, 2),
        ('{"pod":"a"}', T0 + 60_000, T0 + 90_000, 1.0, 1),
        ('{"pod":"a"}', T0 + 120_000, T0 + 150_000, 0.0, 1),
        ('{"pod":"b"}', T0, T0 + 30_000, 1.0, 1),
        ('{"pod":"b"}', T0 + 90_000, T0 + 90_000, 1.0, 1),
    }
    scrapes = [r for r in builder.table().to_pylist() if r["metric"] is None]
    assert [(r["cluster"], r["target"], r["ts_ms"]) for r in scrapes] == [
        ("c1", "ksm/a", T0 + k * 30_000) for k in range(6)
    ]
    assert builder.samples == 11


def test_parts_out_of_time_order_are_refused() -> None:
    key = ("c1", "kube_node_labels", '{"node":"n1"}', None)
    builder = SpanBuilder()
    builder.add(KubeSeries([key], [np.array([T0 + 60_000])], [np.ones(1)]))
    with pytest.raises(ValueError, match="out of time order"):
        builder.add(KubeSeries([key], [np.array([T0])], [np.ones(1)]))


def test_a_constant_series_is_one_span(tmp_path: Path) -> None:
    """A node label shown at 2,880 scrapes of a day is one span; the file says how many samples it holds."""
    rows = [
        {
            "cluster": "c1",
            "ts_ms": T0 + i * 30_000,
            "metric": "kube_node_labels",
            "value": 1.0,
            "labels": '{"node": "n1"}',
            "target": None,
        }  # fmt: skip
        for i in range(2880)
    ]
    spans = _spans(pa.Table.from_pylist(rows, schema=RAW_KUBE_SCHEMA))
    assert spans.filter(pa.compute.is_valid(spans.column("metric"))).num_rows == 1
    pq.write_table(spans, tmp_path / "spans.parquet")
    assert span_samples([tmp_path / "spans.parquet"]) == 2880


def _marts(raw: Any, name: str) -> dict[str, list[dict[str, Any]]]:
    case = CASES[name]
    out = meter_day(raw, case.config(), name, DAY, keep_layers=("marts",))
    return {model: table.to_pylist() for model, table in out.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_day_stored_as_spans_is_metered_as_its_rows(tmp_path: Path, name: str) -> None:
    """The changing pool's days (pods deleted and recreated, nodes drained, labels changed, scrapes off the
    DCGM grid): pulled from a Parquet source, their kube samples stored as spans, they meter to the marts
    of the same day handed over as rows."""
    f = CASES[name].build()
    root = f.write_parquet_source(tmp_path / "source")
    config = make_config(clusters=[{"name": name, "source": {"kind": "parquet", "path": str(root)}}])
    warehouse = Warehouse.at(tmp_path / "warehouse")
    pull_raw_day(config, warehouse, DAY, source_for=lambda _: ParquetRawSource(root))
    kube = warehouse.day_files(RAW, "raw_kube_samples", name, DAY)
    assert kube and all(is_spans(pq.read_schema(p)) for p in kube)
    stored = RawFiles({t: warehouse.day_files(RAW, t, name, DAY) for t in RAW_TABLES})
    assert _marts(stored, name) == _marts(f.build(), name)
    # An earlier pull as a Parquet source: its spans read back as the day's kube rows.
    again = ParquetRawSource(warehouse.root / RAW).fetch_day(name, DAY, lookback_ms(config, name))
    assert sorted(map(_key, again.kube.to_pylist()), key=repr) == sorted(
        map(_key, f.build().kube.to_pylist()), key=repr
    )


def test_a_day_stored_as_rows_before_spans_is_read(tmp_path: Path) -> None:
    """A raw day stored before spans (rows, no target column) is metered as it was: the runner makes its spans."""
    f = CASES["steady"].build()
    raw = f.build()
    folder = tmp_path / "raw_kube_samples"
    folder.mkdir()
    pq.write_table(raw.kube.drop_columns(["target"]), folder / "data.parquet")
    files = {"raw_kube_samples": [folder / "data.parquet"]}
    for table, rows in raw.tables().items():
        if table != "raw_kube_samples":
            pq.write_table(rows, tmp_path / f"{table}.parquet")
            files[table] = [tmp_path / f"{table}.parquet"]
    assert _marts(RawFiles(files), "steady") == _marts(raw, "steady")


def test_only_the_models_a_run_keeps_and_reads_are_built() -> None:
    """With only the marts kept, the per-sample tables with names (audits, the dashboard) are not built, and
    the marts are those of a run that builds every model."""
    f = CASES["steady"].build()
    config = make_config()
    built: list[str] = []
    marts = meter_day(
        f.build(), config, "steady", DAY, keep_layers=("marts",), on_model=lambda m: built.append(m.name)
    )
    assert not {"int_device_samples", "int_device_holders", "int_device_categories"} & set(built)
    assert "int_keyed_device_holders" in built
    every = meter_day(f.build(), config, "steady", DAY)
    assert {n: t.to_pylist() for n, t in marts.items()} == {n: every[n].to_pylist() for n in marts}
