"""Helpers for tests/test_prometheus.py: tiny OpenMetrics files and a misbehaving HTTP server.

Nothing here is mocked: the OpenMetrics text is backfilled into a real Prometheus with promtool (or imported
into a real VictoriaMetrics, `served`), and the fault server is a real `http.server` on 127.0.0.1, so the client sees real sockets, real status
codes, real timeouts and real truncated bodies.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from gpumeter_sim import promserver

# Tests that start a real Prometheus: skipped, saying what to install, where the binaries are missing.
needs_prometheus = pytest.mark.skipif(
    not promserver.binaries_available(),
    reason=f"`prometheus` and `promtool` are not on PATH: {promserver.INSTALL_HINT}",
)
needs_victoria_metrics = pytest.mark.skipif(
    not promserver.victoria_metrics_available(),
    reason=f"`victoria-metrics` is not on PATH: {promserver.VICTORIA_METRICS_INSTALL_HINT}",
)
PromQLServer = promserver.PrometheusServer | promserver.VictoriaMetricsServer
# The PromQL servers a module's real-server tests run against, each test once per server (`served`).
PROMETHEUS, VICTORIA_METRICS = "prometheus", "victoria-metrics"
BACKENDS = [
    pytest.param(PROMETHEUS, id=PROMETHEUS),
    pytest.param(VICTORIA_METRICS, id=VICTORIA_METRICS, marks=needs_victoria_metrics),
]


@dataclass(frozen=True)
class Sample:
    metric: str
    labels: tuple[tuple[str, str], ...]
    value: float
    ts_ms: int

    @property
    def label_dict(self) -> dict[str, str]:
        return dict(self.labels)


def sample(metric: str, labels: dict[str, str], value: float, ts_ms: int) -> Sample:
    return Sample(metric, tuple(sorted(labels.items())), float(value), int(ts_ms))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _value(value: float) -> str:
    if value != value:
        return "NaN"
    return repr(float(value))


def write_openmetrics(samples: Iterable[Sample], path: Path) -> Path:
    """OpenMetrics text as promtool wants it: one contiguous block per family, each series in time order,
    timestamps in seconds with millisecond decimals, `# EOF` at the end."""
    families: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        families[s.metric].append(s)
    lines: list[str] = []
    for metric in sorted(families):
        lines.append(f"# TYPE {metric} gauge")
        for s in sorted(families[metric], key=lambda s: (s.labels, s.ts_ms)):
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels)
            lines.append(f"{metric}{{{labels}}} {_value(s.value)} {s.ts_ms // 1000}.{s.ts_ms % 1000:03d}")
    lines.append("# EOF")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --- a misbehaving Prometheus ------------------------------------------------------------------


@contextmanager
def serve_samples(samples: Iterable[Sample], folder: Path) -> Iterator[promserver.PrometheusServer]:
    """A real Prometheus on 127.0.0.1 serving `samples`: written as OpenMetrics under `folder`, backfilled
    with promtool into a TSDB there."""
    promserver.backfill(write_openmetrics(samples, folder / "samples.om"), folder / "tsdb")
    with promserver.PrometheusServer(folder / "tsdb") as server:
        yield server


def keeps_nan(server: PromQLServer) -> bool:
    """Whether the server stores a NaN sample: Prometheus does; VictoriaMetrics drops it at ingestion (its
    export holds none), so a NaN reading is no sample there (docs/prometheus.md)."""
    return isinstance(server, promserver.PrometheusServer)


@contextmanager
def serve_openmetrics(backend: str, openmetrics: Path, folder: Path) -> Iterator[PromQLServer]:
    """A real PromQL server on 127.0.0.1 holding the samples of an OpenMetrics file: Prometheus (backfilled
    with promtool into a TSDB under `folder`) or VictoriaMetrics (imported over HTTP)."""
    if backend == PROMETHEUS:
        with promserver.PrometheusServer(promserver.backfill(openmetrics, folder / "tsdb")) as server:
            yield server
        return
    with promserver.VictoriaMetricsServer(folder / "victoria-metrics") as vm:
        vm.import_openmetrics(openmetrics)
        yield vm


@contextmanager
def served(backend: str, samples: Iterable[Sample], folder: Path) -> Iterator[PromQLServer]:
    """`serve_openmetrics` of `samples`, written as OpenMetrics under `folder`."""
    with serve_openmetrics(backend, write_openmetrics(samples, folder / "samples.om"), folder) as server:
        yield server


def matrix_body(series: list[tuple[dict[str, str], list[tuple[int, str]]]]) -> bytes:
    result = [
        {"metric": labels, "values": [[ts_ms / 1000, value] for ts_ms, value in values]}
        for labels, values in series
    ]
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    delay_s: float = 0.0
    content_length: int | None = None  # lie about the length to cut the connection mid-body


@dataclass
class FaultServer:
    """`http.server` on 127.0.0.1 answering /api/v1/query with `respond(n, query_params)` for the n-th
    request (0-based). Records every request's path, parameters and headers."""

    respond: Callable[[int, dict[str, str]], Reply]
    requests: list[dict[str, Any]] = field(default_factory=list)
    # The pull's one question for its scrape targets (`up`, promql.up_query): answered as a Prometheus with
    # no target would, unless `answer_targets` is false, and kept apart so that `respond` numbers the data
    # queries as before.
    answer_targets: bool = True
    target_requests: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                return None

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                parsed = urlparse(self.path)
                params = {k: v[0] for k, v in parse_qs(parsed.query).items()}
                if outer.answer_targets and params.get("query", "").startswith("count_over_time(up"):
                    with outer._lock:
                        outer.target_requests.append({"path": parsed.path, "params": params})
                    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}})
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body.encode())
                    return
                with outer._lock:
                    n = len(outer.requests)
                    outer.requests.append(
                        {"path": parsed.path, "params": params, "headers": dict(self.headers)}
                    )
                reply = outer.respond(n, params)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    length = len(reply.body) if reply.content_length is None else reply.content_length
                    self.send_header("Content-Length", str(length))
                    if reply.content_length is not None:
                        self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(reply.body)
                    self.wfile.flush()
                    if reply.content_length is not None:
                        self.close_connection = True
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.daemon = True

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


__all__ = ["FaultServer", "Reply", "Sample", "matrix_body", "sample", "write_openmetrics"]
