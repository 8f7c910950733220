"""How answers are fetched and decoded (docs/prometheus.md): gzip and identity give the same raw tables, byte
for byte, and the rows the samples written into a real Prometheus say; `encoding` is validated; a failed
query stops the pull instead of letting the rest of the day hammer the server."""

from __future__ import annotations

import hashlib
import io
import math
import random
import threading
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prometheus_fixtures import (
    FaultServer,
    Reply,
    Sample,
    matrix_body,
    sample,
    serve_samples,
)
from pydantic import ValidationError

from gpumeter.config import ConfigError, PrometheusSource, parse_config
from gpumeter.ingest.contract import SourceError, day_bounds_ms
from gpumeter.ingest.prometheus import PrometheusRawSource
from gpumeter.ingest.schema import DCGM_SERIES_LABELS, RAW_DCGM_SCHEMA, dcgm_series_key
from gpumeter_sim import promserver
from gpumeter_sim.promserver import PrometheusServer

if not promserver.binaries_available():
    pytest.skip("prometheus/promtool not installed (apt-get install -y prometheus)", allow_module_level=True)

DAY = date(2026, 11, 1)
D0, D1 = day_bounds_ms(DAY)
UTIL, FB = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"
H100 = "NVIDIA H100 80GB HBM3"


def _samples() -> list[Sample]:
    """Twelve GPUs on three nodes, scraped at odd milliseconds, with values that a careless parser gets
    wrong: NaN, -0, 0.1 + 0.2, tiny and huge magnitudes, long decimals."""
    rng = random.Random(16)
    awkward = [math.nan, -0.0, 0.1 + 0.2, 1e-300, 1.7976931348623157e308, 123456.789012345678, 5e-324]
    out = []
    for g in range(12):
        labels = {
            "Hostname": f"node-{g % 3}",
            "UUID": f"GPU-{g:02d}",
            "gpu": str(g % 4),
            "modelName": H100,
            "namespace": f"team-{g % 2}",
            "pod": f"p{g}",
            "container": "main",
            "cluster": "c1",
        }
        offset = rng.randrange(0, 30_000)  # each GPU's own scrape phase, at millisecond precision
        for metric in (UTIL, FB):
            for i, ts in enumerate(range(D0 - 120_000 + offset, D0 + 4 * 3_600_000, 30_000)):
                value = awkward[i % len(awkward)] if i % 5 == 0 else rng.uniform(-1e6, 1e6)
                out.append(sample(metric, labels, value, ts))
    return out


SAMPLES = _samples()


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    folder = tmp_path_factory.mktemp("prom-encoding")
    with serve_samples(SAMPLES, folder) as server:
        yield server


def _source(url: str, **spec: Any) -> PrometheusRawSource:
    return PrometheusRawSource(
        PrometheusSource(url=url, **spec),
        cluster="c1",
        backoff_seconds=0.01,
        dcgm_metrics=(UTIL, FB),
        kube_metrics=(),
    )


def _parquet(table: pa.Table) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def _expected(lo: int, hi: int) -> pa.Table:
    """The DCGM rows of [lo, hi) from the samples as written, sorted in Python: independent of the decoder
    and of the source's sort."""
    rows = []
    for s in SAMPLES:
        if lo <= s.ts_ms < hi:
            labels = s.label_dict
            row = {
                "cluster": "c1",
                "ts_ms": s.ts_ms,
                "metric": s.metric,
                "value": s.value,
                "hostname": labels["Hostname"],
                "uuid": labels["UUID"],
                "gpu": labels["gpu"],
                "model_name": labels["modelName"],
                "namespace": labels["namespace"],
                "pod": labels["pod"],
                "container": labels["container"],
            }
            # The series' key of its labels (those it lacks, the MIG ones, are null).
            row["series_key"] = dcgm_series_key(dict.fromkeys(DCGM_SERIES_LABELS) | row)
            rows.append(row)
    # The raw zone's order of DCGM rows: by GPU, time, series key, metric (gpumeter.ingest.row_order).
    rows.sort(key=lambda r: (r["uuid"], r["ts_ms"], r["series_key"], r["metric"]))
    return pa.Table.from_pylist(rows, schema=RAW_DCGM_SCHEMA)


def test_gzip_and_identity_give_the_same_bytes_and_the_samples_written(prom: PrometheusServer) -> None:
    lo, hi = D0 - 60_000, D0 + 3 * 3_600_000 + 17
    tables, sources = {}, {}
    for encoding in ("gzip", "identity"):
        source = _source(prom.url, encoding=encoding, chunk_seconds=1800)
        tables[encoding] = source.fetch_window("c1", lo, hi).dcgm
        sources[encoding] = source
    expected = _expected(lo, hi)
    assert tables["gzip"].num_rows == expected.num_rows > 0
    # Byte-identical Parquet: to each other, and to the rows computed from the samples written (NaN, -0
    # and every float's bits included).
    assert _parquet(tables["gzip"]) == _parquet(tables["identity"]) == _parquet(expected)
    gzip, identity = sources["gzip"], sources["identity"]
    assert gzip.bytes_received == identity.bytes_received == identity.wire_bytes
    assert 0 < gzip.wire_bytes < identity.wire_bytes / 3  # Prometheus compressed what was asked gzipped


def test_the_day_in_parts_is_the_day_whatever_the_encoding(prom: PrometheusServer) -> None:
    got = {}
    for encoding in ("gzip", "identity"):
        parts = list(_source(prom.url, encoding=encoding).fetch_day_parts("c1", DAY, 120_000))
        got[encoding] = pa.concat_tables([p.dcgm for p in parts])
    whole = _source(prom.url).fetch_day("c1", DAY, 120_000).dcgm
    digest = {k: hashlib.sha256(_parquet(v)).hexdigest() for k, v in got.items()}
    assert digest["gzip"] == digest["identity"]
    # Each part is in GPU order; the parts together are, once sorted so across parts.
    keys = ("uuid", "ts_ms", "series_key", "metric")
    in_parts = got["gzip"].sort_by([(k, "ascending") for k in keys]).combine_chunks()
    # Parquet bytes, not Table.equals: NaN is not equal to itself.
    assert _parquet(in_parts) == _parquet(whole) == _parquet(_expected(D0 - 120_000, D1))


def test_encoding_is_validated_with_one_error_naming_the_field() -> None:
    assert PrometheusSource(url="http://x").encoding == "gzip"
    with pytest.raises(ValidationError) as caught:
        PrometheusSource(url="http://x", encoding="br")  # type: ignore[arg-type]
    assert [e["loc"] for e in caught.value.errors()] == [("encoding",)]
    text = """
clusters:
  - name: c1
    source: {kind: prometheus, url: "http://prom:9090", encoding: brotli}
rate_card:
  models:
    - {model: H100-80GB, aliases: ["NVIDIA H100 80GB HBM3"], price_per_gpu_hour: 3.6}
"""
    with pytest.raises(ConfigError) as config_error:
        parse_config(text)
    assert len(config_error.value.problems) == 1
    place, message = config_error.value.problems[0]
    assert "encoding" in place and "gzip" in message and "identity" in message


def test_the_header_asked_is_the_encoding(tmp_path: Path) -> None:
    with FaultServer(lambda n, _: Reply(200, matrix_body([]))) as server:
        for encoding in ("gzip", "identity"):
            _source(server.url, encoding=encoding, chunk_seconds=86_400).fetch_window("c1", D0, D0 + 1000)
    assert [r["headers"]["Accept-Encoding"] for r in server.requests] == ["gzip"] * 2 + ["identity"] * 2


def test_a_failed_query_stops_the_pull_and_the_next_fetch_starts_afresh() -> None:
    """One query of the first window fails (HTTP 500, no retries): the other 575 queued queries of the day
    are not sent; the queries in flight then end. A later fetch by the same source is not stopped."""
    failing = [True]

    def respond(n: int, params: dict[str, str]) -> Reply:
        if failing[0] and UTIL in params["query"]:
            return Reply(500, b'{"status":"error","errorType":"internal","error":"boom"}')
        return Reply(200, matrix_body([]), delay_s=0.05)

    with FaultServer(respond) as server:
        source = _source(server.url, retries=0, chunk_seconds=300, max_concurrent_queries=4)
        with pytest.raises(SourceError, match="HTTP 500"):
            source.fetch_day("c1", DAY, 0)
        asked = len(server.requests)
        assert asked <= 12, asked  # of 2 × 288 windows: the first few, not the day
        failing[0] = False
        assert source.fetch_window("c1", D0, D0 + 600_000).dcgm.num_rows == 0
        assert len(server.requests) == asked + 4  # 2 metrics × 2 windows: the stop flag was this fetch's


def test_a_failed_part_stops_the_parts_ahead() -> None:
    """The day in parts (an hour each, the next one fetched while the caller writes this one): a failure in
    the third hour is raised there, and no query of the fifth hour or later is sent."""
    third = (D0 + 2 * 3_600_000, D0 + 3 * 3_600_000)

    def respond(n: int, params: dict[str, str]) -> Reply:
        at = round(float(params["time"]) * 1000)
        if third[0] < at <= third[1]:
            return Reply(500, b'{"status":"error","errorType":"internal","error":"boom"}')
        return Reply(200, matrix_body([]))

    with FaultServer(respond) as server:
        source = _source(server.url, retries=1, chunk_seconds=600)
        parts = source.fetch_day_parts("c1", DAY, 0)
        with pytest.raises(SourceError, match="HTTP 500"):
            for _ in parts:
                pass
        latest = max(round(float(r["params"]["time"]) * 1000) for r in server.requests)
    assert latest <= D0 + 4 * 3_600_000, (latest - D0) / 3_600_000


def test_a_failure_in_the_part_fetched_alongside_is_the_error_raised() -> None:
    """Two parts are fetched at once. The first hour's query fails once (HTTP 503) and waits to be retried
    while the second hour's queries are refused (HTTP 400): the pull raises the refusal, not the stop it
    caused in the first hour, yields no part, and does not retry the first hour's query after the stop."""
    refused = threading.Event()
    first_hour = (D0, D0 + 3_600_000)

    def respond(n: int, params: dict[str, str]) -> Reply:
        at = round(float(params["time"]) * 1000)
        if first_hour[0] < at <= first_hour[1]:
            if UTIL in params["query"]:
                return Reply(503, b'{"status":"error","errorType":"unavailable","error":"busy"}')
            return Reply(200, matrix_body([]))
        refused.set()
        return Reply(400, b'{"status":"error","errorType":"bad_data","error":"no"}')

    def backoff(_: float) -> None:
        """The retry's backoff: until the second hour is refused, and a while for the refusal to be read."""
        refused.wait(10)
        time.sleep(1)

    with FaultServer(respond) as server:
        source = PrometheusRawSource(
            PrometheusSource(url=server.url, retries=3, chunk_seconds=3600, max_concurrent_queries=4),
            cluster="c1",
            sleep=backoff,
            dcgm_metrics=(UTIL, FB),
            kube_metrics=(),
        )
        got = []
        with pytest.raises(SourceError, match="HTTP 400"):
            for part in source.fetch_day_parts("c1", DAY, 0):
                got.append(part)
        first_hour_util = [
            r
            for r in server.requests
            if UTIL in r["params"]["query"]
            and first_hour[0] < round(float(r["params"]["time"]) * 1000) <= first_hour[1]
        ]
    assert got == []
    assert len(first_hour_util) == 1


def test_parts_fetched_together_keep_to_max_concurrent_queries() -> None:
    """The parts fetched at once share one pool of queries: the server never has more than
    max_concurrent_queries requests of the pull at a time, and has that many while the day is fetched."""
    lock = threading.Lock()
    now, most = [0], [0]

    def respond(n: int, params: dict[str, str]) -> Reply:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.02)
        with lock:
            now[0] -= 1
        return Reply(200, matrix_body([]))

    with FaultServer(respond) as server:
        source = _source(server.url, chunk_seconds=1800, max_concurrent_queries=3)
        parts = list(source.fetch_day_parts("c1", DAY, 0))
        asked = len(server.requests)
    assert len(parts) == 25  # 24 hours and the DRA objects
    assert asked == 24 * 2 * 2  # two metrics, two windows an hour
    assert most[0] == 3
