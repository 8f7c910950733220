"""The Prometheus source against a REAL Prometheus on 127.0.0.1 (backfilled with promtool), each such test
also against a real VictoriaMetrics (`served`), and a real misbehaving HTTP server: exactness (R1, R2), chunk-size invariance, HA replica dedupe (more, with gappy
replicas, in tests/test_prometheus_ha.py), label spellings,
the selector, retries and errors, and the key equality "Prometheus path == Parquet path" on the
simulated factory."""

from __future__ import annotations

import json
import math
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from prometheus_fixtures import (
    BACKENDS,
    FaultServer,
    PromQLServer,
    Reply,
    Sample,
    keeps_nan,
    matrix_body,
    sample,
    serve_openmetrics,
    served,
    write_openmetrics,
)

from gpumeter.config import PrometheusSource
from gpumeter.ingest.contract import SourceError, concat_parts, day_bounds_ms
from gpumeter.ingest.k8s_objects import load_k8s_json, parse_resource_claims, parse_resource_slices
from gpumeter.ingest.parquet import ParquetRawSource
from gpumeter.ingest.prometheus import PrometheusRawSource, parse_timestamp_ms
from gpumeter.ingest.schema import DCGM_SERIES_LABELS, RAW_DCGM_SCHEMA, RAW_KUBE_SCHEMA, dcgm_series_key
from gpumeter_sim import promserver
from gpumeter_sim.promserver import PrometheusServer, backfill

if not promserver.binaries_available():  # CI installs it (.ci/run); say what to do anywhere else
    pytest.skip(
        "prometheus/promtool not installed: install the Debian package prometheus (apt-get install -y prometheus)",
        allow_module_level=True,
    )

DAY = date(2026, 11, 1)
D0, D1 = day_bounds_ms(DAY)
STEP = 30_000
H100 = "NVIDIA H100 80GB HBM3"
UTIL, FB, PHASE = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "kube_pod_status_phase"
FEW = {"dcgm_metrics": (UTIL, FB), "kube_metrics": (PHASE,)}


def _gpu(cluster: str | None, **extra: str) -> dict[str, str]:
    labels = {"Hostname": "n1", "UUID": "GPU-1", "gpu": "0", "modelName": H100, "job": "dcgm-exporter"}
    labels["instance"] = "n1:9400"
    if cluster is not None:
        labels["cluster"] = cluster
    labels.update(extra)
    return labels


def _series(metric: str, labels: dict[str, str], start: int, stop: int, step: int = STEP) -> list[Sample]:
    """Samples at start, start+step, ... <= stop (inclusive: the edges are the interesting part)."""
    return [sample(metric, labels, 0.25 * i + 1, ts) for i, ts in enumerate(range(start, stop + 1, step))]


def _fixture_samples() -> dict[str, list[Sample]]:
    s: dict[str, list[Sample]] = {}
    pod = {"pod": "p1", "namespace": "team-a", "container": "main"}
    # exact: samples exactly at day start and at day end (= next day's start), ms timestamps, a NaN.
    exact = _series(UTIL, _gpu("exact", **pod), D0 - 600_000, D1 + 600_000)
    exact[25] = sample(UTIL, _gpu("exact", **pod), math.nan, exact[25].ts_ms)
    exact += _series(FB, _gpu("exact", **pod), D0 - 900_000 + 123, D1 + 300_000)
    ksm = {"cluster": "exact", "namespace": "team-a", "pod": "p1", "uid": "u1", "phase": "Running"}
    exact += _series(
        PHASE, {**ksm, "job": "kube-state-metrics", "instance": "ksm:8080"}, D0 - 600_000, D1 + 60_000
    )
    s["exact"] = exact
    # ha: two replicas scraping the same targets 15 s (= Δ/2) apart, all day.
    ha = []
    for replica, offset in (("a", 0), ("b", 15_000)):
        ha += _series(UTIL, _gpu("ha", prometheus_replica=replica, **pod), D0 + offset, D1 - 1)
        ha += _series(
            UTIL, _gpu("ha", prometheus_replica=replica, UUID="GPU-2", gpu="1"), D0 + offset, D1 - 1
        )
        ksm_ha = {
            **ksm,
            "cluster": "ha",
            "job": "kube-state-metrics",
            "instance": "ksm:8080",
            "replica": replica,
        }
        ha += _series(PHASE, ksm_ha, D0 + offset, D1 - 1)
    s["ha"] = ha
    # failover: replica a scrapes 00:00-06:00 only, b all day.
    fo = _series(UTIL, _gpu("failover", prometheus_replica="a", **pod), D0, D0 + 6 * 3_600_000 - 1)
    fo += _series(UTIL, _gpu("failover", prometheus_replica="b", **pod), D0 + 15_000, D1 - 1)
    s["failover"] = fo
    # mixed: within one target, replica a's scrapes lack GPU-2 at the last two, b's lack GPU-1 there.
    hour = D0 + 3_600_000
    mixed = _series(UTIL, _gpu("mixed", prometheus_replica="a"), D0, hour - 1)
    mixed += _series(UTIL, _gpu("mixed", prometheus_replica="a", UUID="GPU-2", gpu="1"), D0, hour - 1)[:-2]
    mixed += _series(UTIL, _gpu("mixed", prometheus_replica="b"), D0 + 15_000, hour - 1)[:-2]
    mixed += _series(
        UTIL, _gpu("mixed", prometheus_replica="b", UUID="GPU-2", gpu="1"), D0 + 15_000, hour - 1
    )
    s["mixed"] = mixed
    # Label spellings: current, old (dcgm-exporter 2.x), and exported_* (scraped without honor_labels).
    full = {
        "GPU_I_ID": "2",
        "GPU_I_PROFILE": "3g.40gb",
        "vgpu": "1",
        "dra_claim_name": "claim-1",
        "dra_claim_namespace": "team-a",
        "dra_driver_name": "gpu.nvidia.com",
        "dra_pool_name": "n1",
        "dra_device_name": "gpu-0-mig-2",
    }
    new = {**_gpu("new", **pod), **full}
    old = {k: v for k, v in new.items() if k not in ("Hostname", "UUID", "pod", "namespace", "container")}
    old.update(
        cluster="old",
        hostname="n1",
        uuid="GPU-1",
        pod_name="p1",
        pod_namespace="team-a",
        container_name="main",
    )
    exported = {**new, "cluster": "exported", "pod": "dcgm-exporter-x1", "namespace": "gpu-operator"}
    exported.update(
        container="exporter", exported_pod="p1", exported_namespace="team-a", exported_container="main"
    )
    s["spellings"] = [
        *_series(UTIL, new, D0, D0 + 600_000),
        *_series(UTIL, old, D0, D0 + 600_000),
        *_series(UTIL, exported, D0, D0 + 600_000),
        # no cluster label at all, and a cluster in another label
        *_series(UTIL, {**_gpu(None, **pod), "job": "nocluster"}, D0, D0 + 600_000),
        *_series(UTIL, _gpu(None, k8s_cluster="kc"), D0, D0 + 600_000),
        *_series(
            PHASE, {"k8s_cluster": "kc", "namespace": "n", "pod": "p", "phase": "Running"}, D0, D0 + 60_000
        ),
    ]
    return s


FIXTURES = _fixture_samples()


def _all_samples() -> list[Sample]:
    return [x for samples in FIXTURES.values() for x in samples]


@pytest.fixture(scope="module", params=BACKENDS)
def prom(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromQLServer]:
    folder = tmp_path_factory.mktemp("prom")
    with served(request.param, _all_samples(), folder) as server:
        yield server
    assert server.process is None


def source(url: str, selector: str | None = None, **kwargs: Any) -> PrometheusRawSource:
    spec_keys = set(PrometheusSource.model_fields)
    spec = PrometheusSource(url=url, selector=selector, **{k: v for k, v in kwargs.items() if k in spec_keys})
    rest = {k: v for k, v in kwargs.items() if k not in spec_keys}
    return PrometheusRawSource(
        spec, cluster=rest.pop("cluster", "fallback"), **{"backoff_seconds": 0.01, **rest}
    )


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """Sorted rows with NaN made comparable."""

    def norm(v: Any) -> Any:
        return "NaN" if isinstance(v, float) and math.isnan(v) else v

    out = [tuple(norm(v) for v in row.values()) for row in table.to_pylist()]
    return sorted(out, key=lambda r: tuple((v is None, str(v)) for v in r))


def expected(cluster: str, metric: str, lo: int, hi: int, nan: bool = True) -> list[tuple[int, Any]]:
    """The fixture's samples of [lo, hi); with `nan` False, without its NaN samples (a server that drops
    them at ingestion: keeps_nan)."""
    out = [
        (s.ts_ms, "NaN" if math.isnan(s.value) else s.value)
        for s in FIXTURES[cluster]
        if s.metric == metric and lo <= s.ts_ms < hi and (nan or not math.isnan(s.value))
    ]
    return sorted(out)


def got(table: pa.Table, metric: str) -> list[tuple[int, Any]]:
    t = table.filter(pa.compute.equal(table.column("metric"), metric))
    return sorted(
        (ts, "NaN" if math.isnan(v) else v)
        for ts, v in zip(t.column("ts_ms").to_pylist(), t.column("value").to_pylist(), strict=True)
    )


# --- exactness (R1, R2) ----------------------------------------------------------------------


def test_fetch_day_returns_exactly_the_samples_of_the_half_open_day(prom: PromQLServer) -> None:
    raw = source(prom.url, 'cluster="exact"', **FEW).fetch_day("exact", DAY, 0)
    assert raw.dcgm.schema.equals(RAW_DCGM_SCHEMA) and raw.kube.schema.equals(RAW_KUBE_SCHEMA)
    for metric, table in ((UTIL, raw.dcgm), (FB, raw.dcgm), (PHASE, raw.kube)):
        want = expected("exact", metric, D0, D1, keeps_nan(prom))
        assert got(table, metric) == want, metric
    util = got(raw.dcgm, UTIL)
    assert util[0][0] == D0  # the sample at 00:00:00.000 is this day's
    assert util[-1][0] == D1 - STEP  # the one at the next midnight is not
    if keeps_nan(prom):
        assert len(util) == 2880
        assert any(v == "NaN" for _, v in util)  # NaN passes through; the accounting ignores it (R10)
    else:
        assert len(util) == 2879  # the fixture's one NaN sample was never stored
    fb_ts = [ts for ts, _ in got(raw.dcgm, FB)]
    assert all(ts % 1000 == 123 for ts in fb_ts)  # millisecond timestamps survive exactly
    # Every row carries its series' key: one per label set, the fixed function of its labels.
    series = raw.dcgm.group_by([*DCGM_SERIES_LABELS, "series_key"]).aggregate([]).to_pylist()
    assert series and all(s["series_key"] == dcgm_series_key(s) for s in series)
    assert len({s["series_key"] for s in series}) == len(series)


def test_next_day_starts_with_the_midnight_sample_and_lookback_reaches_back(prom: PromQLServer) -> None:
    nxt = source(prom.url, 'cluster="exact"', **FEW).fetch_day("exact", DAY + timedelta(days=1), 0)
    assert got(nxt.dcgm, UTIL)[0][0] == D1
    assert got(nxt.dcgm, UTIL) == expected("exact", UTIL, D1, D1 + 86_400_000, keeps_nan(prom))
    with_lookback = source(prom.url, 'cluster="exact"', **FEW).fetch_day("exact", DAY, 300_000)
    for metric, table in ((UTIL, with_lookback.dcgm), (FB, with_lookback.dcgm), (PHASE, with_lookback.kube)):
        assert got(table, metric) == expected("exact", metric, D0 - 300_000, D1, keeps_nan(prom)), metric
    assert len(got(with_lookback.dcgm, UTIL)) == 2880 + 10 - (not keeps_nan(prom))


@pytest.mark.parametrize("chunk_seconds", [300, 1234, 86_400 * 2])
def test_results_do_not_depend_on_the_chunk_size(prom: PromQLServer, chunk_seconds: int) -> None:
    # 300 s: every window edge falls on a sample (a closed range selector would count it twice);
    # 1234 s: edges between samples; two days: one window.
    reference = source(prom.url, 'cluster="exact"', **FEW).fetch_day("exact", DAY, 300_000)
    other = source(prom.url, 'cluster="exact"', chunk_seconds=chunk_seconds, **FEW).fetch_day(
        "exact", DAY, 300_000
    )
    assert rows(other.dcgm) == rows(reference.dcgm)
    assert rows(other.kube) == rows(reference.kube)
    assert reference.dcgm.num_rows == len(expected("exact", UTIL, D0 - 300_000, D1, keeps_nan(prom))) + len(
        expected("exact", FB, D0 - 300_000, D1, keeps_nan(prom))
    )


def test_a_window_too_large_for_the_server_is_split(tmp_path: Path) -> None:
    om = write_openmetrics(FIXTURES["exact"], tmp_path / "exact.om")
    backfill(om, tmp_path / "tsdb")
    with PrometheusServer(tmp_path / "tsdb", extra_args=("--query.max-samples=400",)) as small:
        src = source(small.url, 'cluster="exact"', chunk_seconds=86_400 * 2, **FEW)
        raw = src.fetch_day("exact", DAY, 0)
        assert got(raw.dcgm, UTIL) == expected("exact", UTIL, D0, D1)
        assert got(raw.kube, PHASE) == expected("exact", PHASE, D0, D1)
        assert src.queries > 3  # it did split
        with pytest.raises(SourceError, match="too large"):
            source(
                small.url, 'cluster="exact"', chunk_seconds=86_400, min_chunk_seconds=86_400, **FEW
            ).fetch_day("exact", DAY, 0)


def test_parse_timestamp_ms_is_exact() -> None:
    assert parse_timestamp_ms(1_793_491_200.123) == 1_793_491_200_123
    assert parse_timestamp_ms(0.123) == 123  # int(0.123 * 1000) would be 122
    assert parse_timestamp_ms("1793491200.001") == 1_793_491_200_001
    assert all(parse_timestamp_ms((D0 + ms) / 1000) == D0 + ms for ms in range(0, 5000, 7))


# --- HA replicas -----------------------------------------------------------------------------


def test_replicas_scraping_at_different_times_bill_once(prom: PromQLServer) -> None:
    raw = source(prom.url, 'cluster="ha"', **FEW).fetch_day("ha", DAY, 0)
    for uuid in ("GPU-1", "GPU-2"):
        t = raw.dcgm.filter(pa.compute.equal(raw.dcgm.column("uuid"), uuid))
        ts = t.column("ts_ms").to_pylist()
        assert len(ts) == 2880 and len(set(ts)) == 2880  # one sample per scrape, not 5760
        # All a's: b's sample Δ/2 after a scrape of a is that scrape's, and the first replica's are all kept.
        assert all((x - D0) % STEP == 0 for x in ts)
    phases = raw.kube.column("ts_ms").to_pylist()
    assert len(phases) == 2880 and all((x - D0) % STEP == 0 for x in phases)
    assert "replica" not in raw.kube.column("labels")[0].as_py()


def test_failover_takes_the_replica_that_is_up(prom: PromQLServer) -> None:
    raw = source(prom.url, 'cluster="failover"', **FEW).fetch_day("failover", DAY, 0)
    ts = sorted(raw.dcgm.column("ts_ms").to_pylist())
    six = D0 + 6 * 3_600_000
    assert [x for x in ts if x < six] == list(range(D0, six, STEP))  # a, the first replica
    # b alone after 06:00; its 05:59:45 is a's 05:59:30 scrape, its 06:00:15 the 06:00 one that a missed.
    assert [x for x in ts if x >= six] == list(range(six + 15_000, D1, STEP))
    assert len(ts) == 2880


def test_one_replica_per_target_for_all_its_series(prom: PromQLServer) -> None:
    # Deciding per series would take GPU-2's last two samples from b (a's scrapes did not show it): two
    # timestamps per scrape of one node. Deciding per target (job, instance) keeps each scrape whole: a's
    # scrapes are kept, and they show GPU-2 118 times.
    raw = source(prom.url, 'cluster="mixed"', **FEW).fetch_day("mixed", DAY, 0)
    assert all((x - D0) % STEP == 0 for x in raw.dcgm.column("ts_ms").to_pylist())
    assert raw.dcgm.num_rows == 120 + 118


# --- labels, cluster, selector ---------------------------------------------------------------


def test_label_spellings_map_to_the_same_columns(prom: PromQLServer) -> None:
    tables = {}
    for cluster in ("new", "old", "exported"):
        raw = source(prom.url, f'cluster="{cluster}"', **FEW).fetch_day(cluster, DAY, 0)
        assert set(raw.dcgm.column("cluster").to_pylist()) == {cluster}
        # The series key is of every label the accounting reads, the cluster's too.
        tables[cluster] = rows(raw.dcgm.drop_columns(["cluster", "series_key"]))
    assert tables["new"] == tables["old"] == tables["exported"]
    first = source(prom.url, 'cluster="old"', **FEW).fetch_day("old", DAY, 0).dcgm.slice(0, 1).to_pylist()[0]
    expected = {
        "cluster": "old",
        "ts_ms": D0,
        "metric": UTIL,
        "value": 1.0,
        "hostname": "n1",
        "uuid": "GPU-1",
        "gpu": "0",
        "model_name": H100,
        "gpu_i_id": "2",
        "gpu_i_profile": "3g.40gb",
        "namespace": "team-a",
        "pod": "p1",
        "container": "main",
        "vgpu": "1",
        "dra_claim_name": "claim-1",
        "dra_claim_namespace": "team-a",
        "dra_driver_name": "gpu.nvidia.com",
        "dra_pool_name": "n1",
        "dra_device_name": "gpu-0-mig-2",
    }
    # The key of the row's own series labels (tests/test_series_keys.py pins the function); a static target's
    # pod labels are the exporter's, told as such (holder_unverified null).
    assert first == {**expected, "series_key": dcgm_series_key(expected), "holder_unverified": None}


def test_cluster_column_from_the_label_else_the_configured_name(prom: PromQLServer) -> None:
    raw = source(prom.url, 'job="nocluster"', cluster="fallback", **FEW).fetch_day("fallback", DAY, 0)
    assert raw.dcgm.num_rows == 21 and set(raw.dcgm.column("cluster").to_pylist()) == {"fallback"}
    src = source(prom.url, 'k8s_cluster="kc"', cluster_label="k8s_cluster", **FEW)
    raw = src.fetch_day("kc", DAY, 0)
    assert set(raw.dcgm.column("cluster").to_pylist()) == {"kc"}
    assert set(raw.kube.column("cluster").to_pylist()) == {"kc"}
    assert json.loads(raw.kube.column("labels")[0].as_py()) == {
        "namespace": "n",
        "phase": "Running",
        "pod": "p",
    }


def test_kube_labels_are_json_without_target_cluster_and_name(prom: PromQLServer) -> None:
    raw = source(prom.url, 'cluster="exact"', **FEW).fetch_day("exact", DAY, 0)
    labels = set(raw.kube.column("labels").to_pylist())
    assert labels == {'{"namespace":"team-a","phase":"Running","pod":"p1","uid":"u1"}'}


def test_kube_target_is_job_slash_instance_else_null(prom: PromQLServer) -> None:
    raw = source(prom.url, 'cluster="exact"', **FEW).fetch_day("exact", DAY, 0)
    assert set(raw.kube.column("target").to_pylist()) == {"kube-state-metrics/ksm:8080"}
    # The k8s_cluster fixture's phase series carries neither job nor instance.
    raw = source(prom.url, 'k8s_cluster="kc"', cluster_label="k8s_cluster", **FEW).fetch_day("kc", DAY, 0)
    assert raw.kube.num_rows == 3 and raw.kube.column("target").null_count == 3


def test_selector_is_added_to_every_query(prom: PromQLServer) -> None:
    src = source(prom.url, 'cluster="new"', **FEW)
    assert src.query_for(UTIL, 3_600_000) == 'DCGM_FI_DEV_GPU_UTIL{cluster="new"}[3600001ms]'
    assert set(src.fetch_day("new", DAY, 0).dcgm.column("cluster").to_pylist()) == {"new"}
    both = source(prom.url, '{cluster=~"new|old"}', **FEW).fetch_day("new", DAY, 0)
    assert set(both.dcgm.column("cluster").to_pylist()) == {"new", "old"}
    everything = source(prom.url, None, **FEW).fetch_day("x", DAY, 0)
    assert set(everything.dcgm.column("cluster").to_pylist()) == {
        *("exact", "ha", "failover", "mixed", "new", "old", "exported"),
        "x",  # the series without a `cluster` label (incl. the one with k8s_cluster)
    }


# --- the key test: Prometheus path == Parquet path -------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_prometheus_path_equals_parquet_path_on_the_simulated_factory(tmp_path: Path, backend: str) -> None:
    """Simulate two days, write them as Parquet (the parquet source) and as OpenMetrics into a real
    Prometheus (or VictoriaMetrics); the second day with its lookback must come out of both sources
    identical."""
    import gpumeter_sim as simulator
    from gpumeter_sim import openmetrics

    spec = simulator.FactorySpec(
        cluster="sim",
        days=2,
        scrape_interval_s=300,
        h100_nodes=2,
        a100_nodes=1,
        h200_nodes=0,
        gpus_per_node=4,
    )
    simulator.write_parquet(spec, tmp_path / "source")
    day = spec.start + timedelta(days=1)
    day_start, _ = day_bounds_ms(day)
    # Day 1 only needs its last hour in Prometheus (the lookback): keeps the backfill short.
    first, second = simulator.simulate_day(spec, spec.start), simulator.simulate_day(spec, day)
    tail = [
        t.filter(pa.compute.greater_equal(t.column("ts_ms"), day_start - 3_600_000))
        for t in (first.dcgm, first.kube)
    ]
    openmetrics.write_openmetrics([(tail[0], tail[1]), (second.dcgm, second.kube)], tmp_path / "sim.om")
    k8s = tmp_path / "source" / "k8s" / "cluster=sim" / f"day={day.isoformat()}"
    with serve_openmetrics(backend, tmp_path / "sim.om", tmp_path) as server:
        src = source(
            server.url,
            'cluster="sim"',
            cluster="sim",
            claims_file=str(k8s / "resourceclaims.json"),
            slices_file=str(k8s / "resourceslices.json"),
            max_concurrent_queries=8,
        )
        via_prom = src.fetch_day("sim", day, 600_000)
    via_parquet = ParquetRawSource(tmp_path / "source").fetch_day("sim", day, 600_000)
    expected_dcgm = _pulled_part(via_parquet.dcgm, day_start - 600_000)
    assert 0 < expected_dcgm.num_rows < via_parquet.dcgm.num_rows  # TEMP, POWER, zero XID not pulled
    # Of kube_pod_status_phase only the Running series is pulled (PUSHDOWN_MATCHERS).
    phases = via_parquet.kube.filter(
        pa.compute.equal(via_parquet.kube.column("metric"), "kube_pod_status_phase")
    )
    not_running = pa.compute.invert(
        pa.compute.match_substring(via_parquet.kube.column("labels"), '"phase":"Running"')
    )
    expected_kube = via_parquet.kube.filter(
        pa.compute.invert(
            pa.compute.and_(
                pa.compute.equal(via_parquet.kube.column("metric"), "kube_pod_status_phase"), not_running
            )
        )
    )
    assert (
        phases.num_rows > 0 and expected_kube.num_rows == via_parquet.kube.num_rows - phases.num_rows * 4 // 5
    )
    # The simulator knows no scrape target (null); the OpenMetrics writer gives a null target its exporter's
    # usual job and instance, which the pull reads back as the target: kube-state-metrics for kube_*, else
    # OpenCost's.
    assert expected_kube.column("target").null_count == expected_kube.num_rows
    defaults = [
        "kube-state-metrics/kube-state-metrics.kube-system:8080"
        if metric.startswith("kube_")
        else "opencost/opencost.opencost:9003"
        for metric in expected_kube.column("metric").to_pylist()
    ]
    expected_kube = expected_kube.set_column(
        expected_kube.schema.get_field_index("target"), "target", pa.array(defaults, pa.string())
    )
    for name in ("dcgm", "kube"):
        a, b = getattr(via_prom, name), expected_dcgm if name == "dcgm" else expected_kube
        assert a.schema.equals(b.schema), name
        assert a.num_rows == b.num_rows > 1000, name
        assert a.column("ts_ms").to_pylist()[0] == day_start - 600_000
        by_all = [(c, "ascending") for c in a.column_names]
        if not a.sort_by(by_all).equals(b.sort_by(by_all)):
            assert rows(a) == rows(b), name  # shows the difference (and tolerates NaN == NaN)
    claims = parse_resource_claims(load_k8s_json(k8s / "resourceclaims.json"), "sim", "x")
    slices = parse_resource_slices(load_k8s_json(k8s / "resourceslices.json"), "sim", "x")
    assert via_prom.dra_allocations.equals(claims) and claims.num_rows > 0
    assert via_prom.dra_devices.equals(slices) and slices.num_rows > 0
    # The documents as read, handed over with the day for the pull to keep (no timed snapshot files here).
    snapshot = via_prom.k8s_snapshot
    assert snapshot is not None and snapshot.fetched_at.utcoffset() == timedelta(0)
    assert set(snapshot.documents) == {"resourceclaims", "resourceslices"} and snapshot.timed_files == ()
    # A small but complete factory: MIG instances and time-sliced vgpu copies came through.
    dcgm = via_prom.dcgm
    assert dcgm.column("gpu_i_profile").null_count < dcgm.num_rows
    assert dcgm.column("vgpu").null_count < dcgm.num_rows


def _pulled_part(dcgm: pa.Table, pull_start: int) -> pa.Table:
    """The rows of a Parquet day that the Prometheus source pulls (docs/prometheus.md, "What is pushed
    down"): the fields the accounting reads (schema.DCGM_METRICS), and XID_ERRORS only in the hourly
    windows (chunk_seconds from the pull's start) where that series has some value != 0 — derived here
    from the rows themselves. dcgm-exporter labels an XID reading with its value (`err_code`), so each value
    is a series of its own: a 0 reading is in a series that is never screened in."""
    from gpumeter.ingest.schema import DCGM_METRICS, DCGM_XID

    rows = dcgm.to_pylist()
    series_of = [
        tuple((k, v) for k, v in row.items() if k not in ("ts_ms", "value"))
        + ((("err_code", row["value"]),) if row["metric"] == DCGM_XID else ())
        for row in rows
    ]
    flagged = {
        (key, (row["ts_ms"] - pull_start) // 3_600_000)
        for key, row in zip(series_of, rows, strict=True)
        if row["metric"] == DCGM_XID and row["value"] != 0
    }
    keep = [
        row["metric"] in DCGM_METRICS
        and (row["metric"] != DCGM_XID or (key, (row["ts_ms"] - pull_start) // 3_600_000) in flagged)
        for key, row in zip(series_of, rows, strict=True)
    ]
    return dcgm.filter(pa.array(keep))


# --- faults from a real misbehaving server ---------------------------------------------------

ONE = matrix_body([({"__name__": UTIL, "Hostname": "n1", "UUID": "GPU-1"}, [(D0, "1"), (D0 + STEP, "2")])])
ONE_QUERY = {"dcgm_metrics": (UTIL,), "kube_metrics": (), "chunk_seconds": 2 * 86_400}


def test_503_then_ok_is_retried() -> None:
    with FaultServer(lambda n, _: Reply(503, b"busy") if n < 2 else Reply(200, ONE)) as server:
        raw = source(server.url, retries=3, **ONE_QUERY).fetch_day("c", DAY, 0)
    assert len(server.requests) == 3
    assert raw.dcgm.column("ts_ms").to_pylist() == [D0, D0 + STEP]
    assert server.requests[0]["path"] == "/api/v1/query"
    params = server.requests[0]["params"]
    assert params["query"] == f"{UTIL}[{D1 - D0 + 1}ms]" and params["time"] == f"{D1 // 1000}.000"


def test_always_500_gives_one_source_error_after_the_retries() -> None:
    body = b'{"status":"error","errorType":"internal","error":"boom"}'
    with FaultServer(lambda n, _: Reply(500, body)) as server, pytest.raises(SourceError) as info:
        source(server.url, retries=2, **ONE_QUERY).fetch_day("c", DAY, 0)
    assert len(server.requests) == 3
    message = str(info.value)
    assert server.url in message and UTIL in message and "3 attempt" in message and "HTTP 500" in message
    assert "boom" in message


def test_4xx_is_not_retried() -> None:
    body = b'{"status":"error","errorType":"bad_data","error":"parse error"}'
    with (
        FaultServer(lambda n, _: Reply(400, body)) as server,
        pytest.raises(SourceError, match="HTTP 400.*parse error.*selector"),
    ):
        source(server.url, retries=3, **ONE_QUERY).fetch_day("c", DAY, 0)
    assert len(server.requests) == 1
    with (
        FaultServer(lambda n, _: Reply(401, b"no")) as server,
        pytest.raises(SourceError, match="bearer_token_env"),
    ):
        source(server.url, retries=3, **ONE_QUERY).fetch_day("c", DAY, 0)
    assert len(server.requests) == 1


def test_a_server_slower_than_the_timeout_is_a_source_error() -> None:
    with FaultServer(lambda n, _: Reply(200, ONE, delay_s=1.5)) as server:
        started = time.monotonic()
        with pytest.raises(SourceError, match="timeout") as info:
            source(server.url, retries=1, timeout_seconds=0.3, **ONE_QUERY).fetch_day("c", DAY, 0)
        assert time.monotonic() - started < 1.5
    assert len(server.requests) == 2 and "timeout_seconds" in str(info.value)


@pytest.mark.parametrize("lie", [False, True], ids=["invalid-json", "connection-cut"])
def test_a_truncated_body_is_retried_then_a_source_error(lie: bool) -> None:
    cut = ONE[: len(ONE) // 2]
    reply = Reply(200, cut, content_length=len(ONE) if lie else None)
    with (
        FaultServer(lambda n, _: reply) as server,
        pytest.raises(SourceError, match="connection failed" if lie else "not valid JSON"),
    ):
        source(server.url, retries=1, **ONE_QUERY).fetch_day("c", DAY, 0)
    assert len(server.requests) == 2


def test_truncated_once_then_ok_succeeds() -> None:
    with FaultServer(lambda n, _: Reply(200, ONE[:-3]) if n == 0 else Reply(200, ONE)) as server:
        raw = source(server.url, retries=1, **ONE_QUERY).fetch_day("c", DAY, 0)
    assert raw.dcgm.num_rows == 2 and len(server.requests) == 2


def test_not_a_prometheus_answer_is_a_source_error() -> None:
    vector = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
    with (
        FaultServer(lambda n, _: Reply(200, vector)) as server,
        pytest.raises(SourceError, match="resultType"),
    ):
        source(server.url, retries=0, **ONE_QUERY).fetch_day("c", DAY, 0)


def _said(body: bytes, **said: object) -> bytes:
    """`body` with the fields a server adds to a successful answer to say more about it."""
    return json.dumps({**json.loads(body), **said}).encode()


# What each backend says when a part of it did not answer: Prometheus of a remote-read endpoint (its fanout
# storage turns the endpoint's error into a warning and answers with the rest), Thanos of a store (with
# partial responses allowed), VictoriaMetrics cluster of a vmstorage node.
REMOTE_READ_FAILED = "remote_read: error sending request: Post http://lts:9201/read: connection refused"
INCOMPLETE = {
    "prometheus-remote-read": {"warnings": [REMOTE_READ_FAILED]},
    "thanos-store": {
        "warnings": [
            "receive series from Addr: thanos-store-1:10901: rpc error: code = Unavailable desc = EOF"
        ]
    },
    "victoriametrics-vmstorage": {"isPartial": True},
}


def test_an_answer_that_says_it_may_be_incomplete_is_retried_and_the_complete_one_used() -> None:
    warned = _said(ONE, warnings=[REMOTE_READ_FAILED])
    with FaultServer(lambda n, _: Reply(200, warned if n == 0 else ONE)) as server:
        raw = source(server.url, retries=1, **ONE_QUERY).fetch_day("c", DAY, 0)
    # The warned answer held the same two samples: they are taken once, from the complete answer.
    assert len(server.requests) == 2
    assert raw.dcgm.column("ts_ms").to_pylist() == [D0, D0 + STEP]


@pytest.mark.parametrize("backend", list(INCOMPLETE))
def test_an_answer_that_stays_incomplete_is_one_source_error_naming_what_the_server_said(
    backend: str,
) -> None:
    said = INCOMPLETE[backend]
    with (
        FaultServer(lambda n, _: Reply(200, _said(ONE, **said))) as server,
        pytest.raises(SourceError) as info,
    ):
        source(server.url, retries=2, **ONE_QUERY).fetch_day("c", DAY, 0)
    assert len(server.requests) == 3
    message = str(info.value)
    assert server.url in message and UTIL in message and "3 attempt" in message
    assert "may be incomplete" in message and "run the day again" in message
    assert (said["warnings"][0] if "warnings" in said else "isPartial: true") in message  # type: ignore[index]


def test_infos_and_a_complete_answer_s_own_flags_are_not_incomplete() -> None:
    # `infos` are notes on the query (newer Prometheus versions send them apart from warnings); isPartial
    # false and no warnings say the answer is whole.
    noted = _said(ONE, infos=["PromQL info: metric might not be a counter"], isPartial=False, warnings=[])
    with FaultServer(lambda n, _: Reply(200, noted)) as server:
        raw = source(server.url, retries=0, **ONE_QUERY).fetch_day("c", DAY, 0)
    assert raw.dcgm.column("ts_ms").to_pylist() == [D0, D0 + STEP] and len(server.requests) == 1


def test_every_query_asks_for_every_raw_sample_or_an_error() -> None:
    with FaultServer(lambda n, _: Reply(200, ONE)) as server:
        source(server.url, chunk_seconds=6 * 3600, dcgm_metrics=(UTIL,), kube_metrics=()).fetch_day(
            "c", DAY, 0
        )
    assert len(server.requests) == 4
    for request in server.requests:
        params = request["params"]
        # Thanos: no partial answer, raw blocks only; VictoriaMetrics cluster: no partial answer.
        assert params["partial_response"] == "false" and params["max_source_resolution"] == "0s"
        assert params["deny_partial_response"] == "1"


def test_query_params_of_the_config_reach_every_query() -> None:
    with FaultServer(lambda n, _: Reply(200, ONE)) as server:
        source(server.url, query_params={"dedup": False, "engine": "prometheus"}, **ONE_QUERY).fetch_day(
            "c", DAY, 0
        )
    [request] = server.requests
    assert request["params"]["dedup"] == "false" and request["params"]["engine"] == "prometheus"
    assert request["params"]["partial_response"] == "false"


def test_connection_refused_is_a_source_error() -> None:
    url = f"http://127.0.0.1:{promserver.free_port()}"
    with pytest.raises(SourceError) as info:
        source(url, retries=1, **ONE_QUERY).fetch_day("c", DAY, 0)
    assert (
        url in str(info.value) and "connection failed" in str(info.value) and "2 attempt" in str(info.value)
    )


def test_auth_headers_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUMETER_TEST_TOKEN", "s3cr3t")
    monkeypatch.setenv("GPUMETER_TEST_HEADERS", '{"X-Scope-OrgID": "tenant-1"}')
    with FaultServer(lambda n, _: Reply(200, ONE)) as server:
        source(
            server.url,
            bearer_token_env="GPUMETER_TEST_TOKEN",
            headers_env="GPUMETER_TEST_HEADERS",
            **ONE_QUERY,
        ).fetch_day("c", DAY, 0)
    headers = server.requests[0]["headers"]
    assert headers["Authorization"] == "Bearer s3cr3t" and headers["X-Scope-OrgID"] == "tenant-1"
    monkeypatch.delenv("GPUMETER_TEST_TOKEN")
    with pytest.raises(SourceError, match="GPUMETER_TEST_TOKEN"):
        source("http://127.0.0.1:9", bearer_token_env="GPUMETER_TEST_TOKEN", **ONE_QUERY).fetch_day(
            "c", DAY, 0
        )
    monkeypatch.setenv("GPUMETER_TEST_HEADERS", "not json")
    with pytest.raises(SourceError, match="headers_env"):
        source("http://127.0.0.1:9", headers_env="GPUMETER_TEST_HEADERS", **ONE_QUERY).fetch_day("c", DAY, 0)


def test_verify_tls_false_reaches_the_session() -> None:
    src = source("https://127.0.0.1:9", verify_tls=False, **ONE_QUERY)
    assert src.transport.client()._session.verify is False


def test_concurrent_queries_are_capped() -> None:
    lock, state = threading.Lock(), {"now": 0, "max": 0}

    def respond(n: int, _: dict[str, str]) -> Reply:
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.05)
        with lock:
            state["now"] -= 1
        return Reply(200, ONE)

    with FaultServer(respond) as server:
        raw = source(
            server.url,
            max_concurrent_queries=2,
            dcgm_metrics=(UTIL,),
            kube_metrics=(),
            chunk_seconds=3 * 3600,
        )
        raw.fetch_day("c", DAY, 0)
    assert len(server.requests) == 8 and state["max"] == 2


# --- the server helper itself ----------------------------------------------------------------


def test_server_stops_on_error_and_leaves_no_process(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), PrometheusServer(tmp_path / "tsdb") as server:
        pid = server.process.pid if server.process else -1
        raise RuntimeError("boom")
    assert server.process is None
    alive = subprocess.run(
        ["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True
    ).stdout.strip()
    assert alive == "" or alive.startswith("Z")


def test_missing_binaries_name_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(promserver.PrometheusNotInstalled, match="Debian package prometheus"):
        backfill(tmp_path / "x.om", tmp_path / "tsdb")
    with pytest.raises(promserver.PrometheusNotInstalled, match="Debian package prometheus"):
        PrometheusServer(tmp_path / "tsdb").start()


def test_backfill_errors_are_clear(tmp_path: Path) -> None:
    bad = tmp_path / "bad.om"
    bad.write_text("# TYPE m gauge\nm 1 1700000000\n", encoding="utf-8")  # no # EOF
    with pytest.raises(promserver.PrometheusServerError, match="promtool could not backfill"):
        backfill(bad, tmp_path / "tsdb")


# --- a day in parts (runner.pull_raw_day holds one part, not the day) -----------------------------------


@pytest.mark.parametrize(
    ("cluster", "lookback_ms", "bucket_seconds"),
    [("exact", 300_000, 3600), ("ha", 0, 3600), ("failover", 300_000, 3600), ("failover", 0, 5400)],
)
def test_the_day_in_parts_holds_exactly_the_rows_of_the_whole_day(
    prom: PromQLServer, cluster: str, lookback_ms: int, bucket_seconds: int
) -> None:
    """fetch_day_parts cuts the day at replica-dedupe bucket edges (R1: the failover fixture switches replica
    at 06:00; a 90-minute bucket puts edges off the hour): the parts hold the rows of fetch_day, each part one
    bucket's, and the DRA objects come last."""
    selector = f'cluster="{cluster}"'
    whole = source(prom.url, selector, dedupe_bucket_seconds=bucket_seconds, **FEW).fetch_day(
        cluster, DAY, lookback_ms
    )
    parts = list(
        source(prom.url, selector, dedupe_bucket_seconds=bucket_seconds, **FEW).fetch_day_parts(
            cluster, DAY, lookback_ms
        )
    )
    together = concat_parts(iter(parts))
    assert rows(together.dcgm) == rows(whole.dcgm) and rows(together.kube) == rows(whole.kube)
    assert together.dcgm.num_rows == whole.dcgm.num_rows > 0
    bucket_ms = bucket_seconds * 1000
    for part in parts[:-1]:
        ts = part.dcgm.column("ts_ms").to_pylist() + part.kube.column("ts_ms").to_pylist()
        assert len({t // bucket_ms for t in ts}) <= 1  # one bucket per part
    assert len(parts) >= 86_400 // bucket_seconds
