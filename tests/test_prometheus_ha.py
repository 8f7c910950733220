"""HA Prometheus pairs against a REAL Prometheus on 127.0.0.1 (backfilled with promtool), and a real
VictoriaMetrics holding the same samples: the union of the
replicas' scrapes is kept, one sample per scrape (R1), decided per scrape target so that every series of a
target has the same timestamps (R1a reads a series' end from them), whatever the chunking of the pull.

Every fixture is built scrape by scrape: scrape k of a target is at D0 + k·Δ, and a replica records it at
D0 + k·Δ + its offset unless its own timestamp falls in one of its gaps. The truth of each test is computed
from that construction (which replica first in name order recorded scrape k), never by running the source.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from prometheus_fixtures import (
    BACKENDS,
    PromQLServer,
    Sample,
    needs_prometheus,
    sample,
    served,
)

from gpumeter.config import PrometheusSource
from gpumeter.ingest.contract import concat_parts, day_bounds_ms
from gpumeter.ingest.kube_series import SpanBuilder
from gpumeter.ingest.kube_spans import create_spans
from gpumeter.ingest.prometheus import PrometheusRawSource
from gpumeter.ingest.schema import RAW_KUBE_SCHEMA, RAW_KUBE_SPANS_SCHEMA
from gpumeter_sim import openmetrics
from gpumeter_sim.promserver import PrometheusServer, backfill

pytestmark = needs_prometheus

DAY = date(2026, 11, 1)
D0, D1 = day_bounds_ms(DAY)
DELTA = 30_000  # Δ, scrape_interval_seconds = 30
SCRAPES_PER_DAY = 86_400_000 // DELTA  # 2,880
HOUR = 3_600_000
UTIL, FB = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"
PHASE, INFO, CAPACITY = "kube_pod_status_phase", "kube_pod_info", "kube_node_status_capacity"
KSM_TARGET = "kube-state-metrics/ksm:8080"
FIRST_K, LAST_K = -10, SCRAPES_PER_DAY + 10  # scrapes from 23:55 the day before to 00:05 the day after
NOON_K = 12 * HOUR // DELTA  # 1,440: pod p2 is deleted and GPU-3 changes pods at noon


def at(hh: int, mm: int, ss: float = 0) -> int:
    return D0 + hh * HOUR + mm * 60_000 + round(ss * 1000)


@dataclass(frozen=True)
class Replica:
    name: str
    offset_ms: int
    gaps: tuple[tuple[int, int], ...] = ()  # [from, to) of its own timestamps

    def ts(self, k: int) -> int:
        return D0 + k * DELTA + self.offset_ms

    def recorded(self, k: int) -> bool:
        return not any(lo <= self.ts(k) < hi for lo, hi in self.gaps)


FIXTURES: dict[str, tuple[Replica, ...]] = {
    # The case: rolling restarts, both replicas gappy in the same hour.
    "gappy": (
        Replica("a", 0, ((at(10, 5), at(10, 20)),)),
        Replica("b", 2_000, ((at(10, 35), at(10, 50)),)),
    ),
    # A at hh:mm:ss - 0.5 s, B at + 1.5 s: the 10:00 scrape is A's 09:59:59.5 and B's 10:00:01.5, in two
    # parts; A is down 10:00-11:00, so the 11:00 scrape is only B's 11:00:01.5.
    "straddle": (
        Replica("a", -500, ((at(10, 0), at(11, 0)),)),
        Replica("b", 1_500),
    ),
    "hour-down": (
        Replica("a", 0, ((at(13, 0), at(14, 0)),)),
        Replica("b", 2_000),
    ),
    # 06:00-06:30 only b and c, 06:30-07:00 only c: c must not fill what b already filled.
    "three": (
        Replica("a", 0, ((at(6, 0), at(7, 0)),)),
        Replica("b", 2_000, ((at(6, 30), at(7, 30)),)),
        Replica("c", 4_000, ((at(7, 45), at(8, 0)),)),
    ),
    # b stamped exactly Δ/2 after a: a sample at k·Δ + Δ/2 is scrape k's ([k·Δ - Δ/2, k·Δ + Δ/2)).
    "half": (
        Replica("a", 0, ((at(10, 5), at(10, 20)),)),
        Replica("b", DELTA // 2),
    ),
}


@dataclass(frozen=True)
class SeriesSpec:
    metric: str
    labels: tuple[tuple[str, str], ...]
    ks: range  # the scrapes that show the series


def _series_specs(cluster: str) -> list[SeriesSpec]:
    every = range(FIRST_K, LAST_K + 1)
    before_noon, from_noon = range(FIRST_K, NOON_K), range(NOON_K, LAST_K + 1)
    dcgm = {"cluster": cluster, "job": "dcgm-exporter", "instance": "n1:9400", "Hostname": "n1"}
    out = []
    for gpu in ("1", "2", "3"):
        gpu_labels = {**dcgm, "UUID": f"GPU-{gpu}", "gpu": gpu, "modelName": "NVIDIA H100 80GB HBM3"}
        for metric in (UTIL, FB):
            if gpu == "3":  # GPU-3 changes holder at noon: one GPU, two series
                out.append(
                    SeriesSpec(metric, tuple(sorted({**gpu_labels, "pod": "p3a"}.items())), before_noon)
                )
                out.append(SeriesSpec(metric, tuple(sorted({**gpu_labels, "pod": "p3b"}.items())), from_noon))
            else:
                out.append(SeriesSpec(metric, tuple(sorted(gpu_labels.items())), every))
    ksm = {"cluster": cluster, "job": "kube-state-metrics", "instance": "ksm:8080", "namespace": "team-a"}
    for pod, ks in (("p1", every), ("p2", before_noon)):  # p2 is deleted at noon
        out.append(SeriesSpec(PHASE, tuple(sorted({**ksm, "pod": pod, "phase": "Running"}.items())), ks))
        out.append(SeriesSpec(INFO, tuple(sorted({**ksm, "pod": pod, "node": "n1"}.items())), ks))
    return out


def _value(k: int, replica: int) -> float:
    return k + 0.25 * replica  # tells which replica's sample was kept


def _samples() -> list[Sample]:
    out = []
    for cluster, replicas in FIXTURES.items():
        for spec in _series_specs(cluster):
            for i, replica in enumerate(replicas):
                labels = {**dict(spec.labels), "prometheus_replica": replica.name}
                out += [
                    sample(spec.metric, labels, _value(k, i), replica.ts(k))
                    for k in spec.ks
                    if replica.recorded(k)
                ]
    # A series without a replica label is not deduped, even on a target with replicas.
    plain = {"cluster": "gappy", "job": "kube-state-metrics", "instance": "ksm:8080", "node": "n1"}
    out += [sample(CAPACITY, plain, 8, D0 + k * DELTA + 7_000) for k in range(FIRST_K, LAST_K + 1)]
    return out


def expected_samples(cluster: str, spec: SeriesSpec, lo: int, hi: int) -> list[tuple[int, float]]:
    """The truth: every scrape k that some replica recorded, once, taken from the first replica in name order
    that recorded it, at that replica's timestamp; those with lo <= ts < hi."""
    replicas = FIXTURES[cluster]
    out = []
    for k in spec.ks:
        first = next((i for i, r in enumerate(replicas) if r.recorded(k)), None)
        if first is not None and lo <= replicas[first].ts(k) < hi:
            out.append((replicas[first].ts(k), _value(k, first)))
    return out


def day_scrapes(cluster: str) -> list[int]:
    """The scrapes k of the day: those whose first recording replica stamped them within the day (R2)."""
    replicas = FIXTURES[cluster]
    out = []
    for k in range(FIRST_K, LAST_K + 1):
        first = next((r for r in replicas if r.recorded(k)), None)
        if first is not None and D0 <= first.ts(k) < D1:
            out.append(k)
    return out


@pytest.fixture(scope="module", params=BACKENDS)
def prom(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromQLServer]:
    folder = tmp_path_factory.mktemp("prom-ha")
    with served(request.param, _samples(), folder) as server:
        yield server


def source(url: str, cluster: str, **spec: Any) -> PrometheusRawSource:
    return PrometheusRawSource(
        PrometheusSource(url=url, selector=f'cluster="{cluster}"', **spec),
        cluster,
        dcgm_metrics=(UTIL, FB),
        kube_metrics=(PHASE, INFO, CAPACITY),
        scrape_interval_seconds=DELTA / 1000,
        backoff_seconds=0.01,
    )


def _dcgm_key(labels: dict[str, str]) -> tuple[str, str | None]:
    return labels["UUID"], labels.get("pod")


def by_series(raw: Any) -> dict[tuple[str, Any], list[tuple[int, float]]]:
    """(metric, series key) -> sorted [(ts, value)] of a pulled day."""
    out: dict[tuple[str, Any], list[tuple[int, float]]] = defaultdict(list)
    for row in raw.dcgm.to_pylist():
        out[(row["metric"], (row["uuid"], row["pod"]))].append((row["ts_ms"], row["value"]))
    for row in raw.kube.to_pylist():
        out[(row["metric"], row["labels"])].append((row["ts_ms"], row["value"]))
    return {key: sorted(values) for key, values in out.items()}


def _kube_key(labels: dict[str, str]) -> str:
    kept = {k: v for k, v in labels.items() if k not in ("cluster", "job", "instance", "__name__")}
    return json.dumps(kept, separators=(",", ":"), sort_keys=True)


def expected_by_series(cluster: str, lo: int, hi: int) -> dict[tuple[str, Any], list[tuple[int, float]]]:
    out = {}
    for spec in _series_specs(cluster):
        labels = dict(spec.labels)
        key = _dcgm_key(labels) if spec.metric in (UTIL, FB) else _kube_key(labels)
        want = expected_samples(cluster, spec, lo, hi)
        if want:
            out[(spec.metric, key)] = want
    return out


def stored_spans(kube_rows: pa.Table) -> pa.Table:
    """The spans the pull stores for these rows, made by DuckDB (create_spans) in the stored order."""
    con = duckdb.connect()
    try:
        con.register("kube_rows", kube_rows)
        create_spans(con, "kube_rows", "spans")
        order = "ts_ms, last_ms, cluster, target, metric, labels, value, copies"
        return con.sql(f"select * from spans order by {order}").to_arrow_table().cast(RAW_KUBE_SPANS_SCHEMA)
    finally:
        con.close()


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    def norm(v: Any) -> Any:
        return "NaN" if isinstance(v, float) and math.isnan(v) else v

    out = [tuple(norm(v) for v in row.values()) for row in table.to_pylist()]
    return sorted(out, key=lambda r: tuple((v is None, str(v)) for v in r))


# --- the union of the replicas' scrapes ------------------------------------------------------


def test_both_replicas_gappy_in_one_hour_keep_every_scrape_once(prom: PromQLServer) -> None:
    raw = source(prom.url, "gappy").fetch_day("gappy", DAY, 0)
    got = by_series(raw)
    # By hand: A misses 10:05-10:20 (30 scrapes), B misses 10:35-10:50 (30 others): every one of the day's
    # 86,400 / 30 = 2,880 scrapes was recorded by a replica, so 2,880 samples per all-day series; the 30 of
    # 10:05-10:20 are B's (stamped 2 s later), every other one A's.
    p1 = got[(PHASE, '{"namespace":"team-a","phase":"Running","pod":"p1"}')]
    assert len(p1) == SCRAPES_PER_DAY == 2_880
    from_b = [ts for ts, _ in p1 if (ts - D0) % DELTA == 2_000]
    assert from_b == list(range(at(10, 5, 2), at(10, 20), DELTA)) and len(from_b) == 30
    assert [ts for ts, _ in p1 if at(10, 35) <= ts < at(10, 50)] == list(range(at(10, 35), at(10, 50), DELTA))
    for gpu in ("GPU-1", "GPU-2"):
        assert len(got[(UTIL, (gpu, None))]) == len(got[(FB, (gpu, None))]) == 2_880
    # GPU-3's two series (pod p3a until noon, p3b from noon): 1,440 scrapes each, 2,880 for the GPU.
    assert len(got[(UTIL, ("GPU-3", "p3a"))]) == len(got[(UTIL, ("GPU-3", "p3b"))]) == 1_440
    # p2, deleted at noon: 1,440 scrapes show it.
    assert len(got[(PHASE, '{"namespace":"team-a","phase":"Running","pod":"p2"}')]) == 1_440
    expected = expected_by_series("gappy", D0, D1)
    assert {k: v for k, v in got.items() if k[0] != CAPACITY} == expected
    # The series without a replica label is not deduped: all its 2,880 samples, at its own timestamps.
    capacity = got[(CAPACITY, '{"node":"n1"}')]
    assert [ts for ts, _ in capacity] == list(range(D0 + 7_000, D1, DELTA))
    assert not any("replica" in text for text in raw.kube.column("labels").to_pylist())


def test_every_series_of_a_target_has_the_targets_scrape_times(prom: PromQLServer) -> None:
    """R1a reads a kube series' end from its target's scrapes: a kept scrape is one replica's whole scrape,
    so every series of the target has exactly the kept scrapes' timestamps where it exists."""
    for cluster in FIXTURES:
        raw = source(prom.url, cluster).fetch_day(cluster, DAY, 0)
        got = {k: {ts for ts, _ in v} for k, v in by_series(raw).items()}
        p1, p2 = (f'{{"namespace":"team-a","phase":"Running","pod":"{p}"}}' for p in ("p1", "p2"))
        for target in ("dcgm", "kube"):
            group = {
                k: v
                for k, v in got.items()
                if (k[0] in (UTIL, FB)) == (target == "dcgm") and k[0] != CAPACITY
            }
            scrapes = set().union(*group.values())
            assert len(scrapes) == SCRAPES_PER_DAY, (cluster, target)  # one timestamp per scrape of the day
            whole_day = [ts for k, ts in group.items() if "p2" not in str(k) and "p3" not in str(k)]
            assert whole_day and all(ts == scrapes for ts in whole_day), (cluster, target)
        morning, afternoon = got[(UTIL, ("GPU-3", "p3a"))], got[(UTIL, ("GPU-3", "p3b"))]
        # GPU-3's holder changes at scrape 1,440: its two series split the node's scrapes between them. (The
        # day's scrapes are 0 ... 2,879, but 1 ... 2,880 in "straddle", where A stamps them 0.5 s early.)
        before_noon = sum(1 for k in day_scrapes(cluster) if k < NOON_K)
        assert before_noon == (1_439 if cluster == "straddle" else 1_440)
        assert morning | afternoon == got[(UTIL, ("GPU-1", None))] and not morning & afternoon
        assert len(morning) == before_noon and len(afternoon) == SCRAPES_PER_DAY - before_noon
        # p2 is shown by the scrapes before noon of the kube-state-metrics target, and by no later one.
        kube_scrapes = sorted(got[(PHASE, p1)])
        assert sorted(got[(PHASE, p2)]) == kube_scrapes[:before_noon]
        assert got[(INFO, '{"namespace":"team-a","node":"n1","pod":"p2"}')] == got[(PHASE, p2)]
        assert set(raw.kube.column("target").to_pylist()) == {KSM_TARGET}


def test_one_replica_down_for_a_whole_hour(prom: PromQLServer) -> None:
    got = by_series(source(prom.url, "hour-down").fetch_day("hour-down", DAY, 0))
    ts = [t for t, _ in got[(UTIL, ("GPU-1", None))]]
    # 2,880 scrapes; the 120 of 13:00-14:00 are B's, at hh:mm:02 and hh:mm:32.
    assert len(ts) == 2_880
    assert [t for t in ts if at(13, 0) <= t < at(14, 0)] == list(range(at(13, 0, 2), at(14, 0), DELTA))
    assert [t for t in ts if not at(13, 0) <= t < at(14, 0)] == [
        t for t in range(D0, D1, DELTA) if not at(13, 0) <= t < at(14, 0)
    ]
    assert got == {k: v for k, v in expected_by_series("hour-down", D0, D1).items()}


def test_three_replicas_fill_each_others_gaps_once(prom: PromQLServer) -> None:
    got = by_series(source(prom.url, "three").fetch_day("three", DAY, 0))
    ts = [t for t, _ in got[(FB, ("GPU-2", None))]]
    # a misses 06:00-07:00; b (+2 s) misses 06:30-07:30; c (+4 s) misses 07:45-08:00: 06:00-06:30 is b's
    # (60 scrapes), 06:30-07:00 c's (60), everything else a's; 2,880 in all, none twice.
    assert len(ts) == 2_880
    assert [t for t in ts if (t - D0) % DELTA == 2_000] == list(range(at(6, 0, 2), at(6, 30), DELTA))
    assert [t for t in ts if (t - D0) % DELTA == 4_000] == list(range(at(6, 30, 4), at(7, 0), DELTA))
    assert got == expected_by_series("three", D0, D1)


def test_a_replica_half_an_interval_later_fills_exactly_the_gap(prom: PromQLServer) -> None:
    got = by_series(source(prom.url, "half").fetch_day("half", DAY, 0))
    ts = [t for t, _ in got[(UTIL, ("GPU-1", None))]]
    # b's sample at k·Δ + 15 s is scrape k's: a's gap 10:05-10:20 (30 scrapes) is filled by b's 10:05:15 ...
    # 10:19:45, and b's 10:04:45 (scrape 10:04:30, a's) and 10:19:45's successor 10:20:15 (a's 10:20) are not.
    assert len(ts) == 2_880
    assert [t for t in ts if (t - D0) % DELTA] == list(range(at(10, 5, 15), at(10, 20), DELTA))
    assert got == expected_by_series("half", D0, D1)


# --- chunking: parts, part edges, day edges ----------------------------------------------------


@pytest.mark.parametrize(
    ("cluster", "lookback_ms", "bucket_seconds"),
    [
        ("gappy", 0, 3600),
        ("gappy", 300_000, 5400),
        ("straddle", 300_000, 3600),
        ("straddle", 0, 900),
        ("hour-down", 0, 3600),
        ("three", 300_000, 3600),
        ("three", 0, 1800),
        ("half", 0, 3600),
    ],
)
def test_the_day_in_parts_holds_exactly_the_rows_of_the_whole_day(
    prom: PromQLServer, cluster: str, lookback_ms: int, bucket_seconds: int
) -> None:
    whole = source(prom.url, cluster, dedupe_bucket_seconds=bucket_seconds).fetch_day(
        cluster, DAY, lookback_ms
    )
    parts = list(
        source(prom.url, cluster, dedupe_bucket_seconds=bucket_seconds).fetch_day_parts(
            cluster, DAY, lookback_ms
        )
    )
    together = concat_parts(iter(parts))
    assert rows(together.dcgm) == rows(whole.dcgm) and rows(together.kube) == rows(whole.kube)
    assert whole.dcgm.num_rows > 0 and whole.kube.num_rows > 0
    # The pull's form: each part's kube samples as series (the same samples), the day's spans made part by
    # part equal to the spans of the whole day's rows.
    series_parts = list(
        source(prom.url, cluster, dedupe_bucket_seconds=bucket_seconds).fetch_day_series_parts(
            cluster, DAY, lookback_ms
        )
    )
    assert len(series_parts) == len(parts)
    builder = SpanBuilder()
    for by_rows, by_series_part in zip(parts, series_parts, strict=True):
        assert rows(by_series_part.dcgm) == rows(by_rows.dcgm) and by_series_part.kube.num_rows == 0
        if by_series_part.kube_series is not None:
            assert rows(by_series_part.kube_series.rows()) == rows(by_rows.kube)
            builder.add(by_series_part.kube_series)
    assert builder.table().equals(stored_spans(whole.kube))
    expected = expected_by_series(cluster, D0 - lookback_ms, D1)
    assert {k: v for k, v in by_series(whole).items() if k[0] != CAPACITY} == expected
    bucket_ms = bucket_seconds * 1000
    for part in parts[:-1]:
        ts = part.dcgm.column("ts_ms").to_pylist() + part.kube.column("ts_ms").to_pylist()
        assert len({t // bucket_ms for t in ts}) <= 1  # one part, one bucket


def test_a_scrape_straddling_a_part_edge_counts_once(prom: PromQLServer) -> None:
    parts = list(source(prom.url, "straddle").fetch_day_parts("straddle", DAY, 0))
    ten, eleven = parts[10], parts[11]
    util = pc.equal(ten.dcgm.column("metric"), UTIL)
    gpu1 = pc.and_(util, pc.equal(ten.dcgm.column("uuid"), "GPU-1"))
    ts10 = sorted(ten.dcgm.filter(gpu1).column("ts_ms").to_pylist())
    # The 10:00 scrape is A's 09:59:59.5 (part 9), not B's 10:00:01.5 too; A is down until 11:00, so part 10
    # holds B's 10:00:31.5 ... 10:59:31.5: 119 scrapes; the 11:00 scrape is B's 11:00:01.5, in part 11.
    assert at(10, 0, 1.5) not in ts10 and ts10 == list(range(at(10, 0, 31.5), at(11, 0), DELTA))
    assert len(ts10) == 119
    nine = parts[9].dcgm.filter(
        pc.and_(
            pc.equal(parts[9].dcgm.column("metric"), UTIL), pc.equal(parts[9].dcgm.column("uuid"), "GPU-1")
        )
    )
    assert max(nine.column("ts_ms").to_pylist()) == at(9, 59, 59.5)
    ts11 = sorted(
        eleven.dcgm.filter(
            pc.and_(
                pc.equal(eleven.dcgm.column("metric"), UTIL), pc.equal(eleven.dcgm.column("uuid"), "GPU-1")
            )
        )
        .column("ts_ms")
        .to_pylist()
    )
    assert ts11[0] == at(11, 0, 1.5) and ts11[1:] == list(range(at(11, 0, 29.5), at(12, 0), DELTA))
    assert len(ts11) == 121


def test_a_scrape_straddling_midnight_belongs_to_one_day(prom: PromQLServer) -> None:
    """A's 23:59:59.5 and B's 00:00:01.5 are one scrape: the day of A's sample has it, the next day not."""
    src = source(prom.url, "straddle")
    days = [src.fetch_day("straddle", DAY + timedelta(days=d), 0) for d in (-1, 0, 1)]
    counts = []
    for raw in days:
        t = raw.dcgm.filter(
            pc.and_(pc.equal(raw.dcgm.column("metric"), UTIL), pc.equal(raw.dcgm.column("uuid"), "GPU-1"))
        )
        counts.append(sorted(t.column("ts_ms").to_pylist()))
    before, today, after = counts
    # Scrapes -10 ... 2,890 of the fixture (2,901), each once: the day before holds A's -10 ... 0 (23:54:59.5
    # ... 23:59:59.5: 11), today A's 1 ... 2,880 but 10:00-11:00 from B (2,880), the day after A's 2,881 ...
    # 2,890 (10; B's 00:00:01.5 is A's 23:59:59.5 scrape).
    assert before == [D0 + k * DELTA - 500 for k in range(-10, 1)]
    assert len(today) == 2_880 and today[0] == D0 + DELTA - 500 and today[-1] == D1 - 500
    assert D0 + 1_500 not in today
    assert after == [D0 + k * DELTA - 500 for k in range(2_881, LAST_K + 1)]
    assert len(before) + len(today) + len(after) == LAST_K - FIRST_K + 1


# --- the target column ------------------------------------------------------------------------


def test_the_target_survives_a_round_trip_through_openmetrics_and_prometheus(
    prom: PromQLServer, tmp_path: Path
) -> None:
    pulled = source(prom.url, "gappy").fetch_day("gappy", DAY, 0)
    assert set(pulled.kube.column("target").to_pylist()) == {KSM_TARGET}
    # More targets: a PodMonitor job with slashes, a job without instance, and none (the simulator's).
    extra = pa.table(
        {
            "cluster": ["gappy"] * 3,
            "ts_ms": [D0 + 5_000] * 3,
            "metric": [INFO] * 3,
            "value": [1.0] * 3,
            # kube_pod_info carries its pod's namespace: a target's own namespace never stands in for it.
            "labels": [
                '{"namespace":"ns","pod":"x1"}',
                '{"namespace":"ns","pod":"x2"}',
                '{"namespace":"ns","pod":"x3"}',
            ],
            "target": ["monitoring/ksm/10.0.0.7:8080", "kube-state-metrics/", None],
        },
        schema=RAW_KUBE_SCHEMA,
    )
    kube = pa.concat_tables([pulled.kube, extra])
    om = tmp_path / "round.om"
    openmetrics.write_openmetrics([(pulled.dcgm, kube)], om)
    backfill(om, tmp_path / "tsdb")
    with PrometheusServer(tmp_path / "tsdb") as server:
        again = source(server.url, "gappy").fetch_day("gappy", DAY, 0)
    assert rows(again.dcgm) == rows(pulled.dcgm)
    targets = dict(
        zip(again.kube.column("labels").to_pylist(), again.kube.column("target").to_pylist(), strict=True)
    )
    assert targets['{"namespace":"ns","pod":"x1"}'] == "monitoring/ksm/10.0.0.7:8080"
    assert targets['{"namespace":"ns","pod":"x2"}'] == "kube-state-metrics/"
    assert (
        targets['{"namespace":"ns","pod":"x3"}'] == "kube-state-metrics/kube-state-metrics.kube-system:8080"
    )  # the default
    assert rows(again.kube.filter(pc.equal(again.kube.column("target"), KSM_TARGET))) == rows(pulled.kube)
    assert again.kube.num_rows == pulled.kube.num_rows + 3
