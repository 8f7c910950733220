"""The Prometheus source: raw samples of a (cluster, day) pulled from any PromQL API (Prometheus, Thanos,
Mimir, VictoriaMetrics) into the raw-samples schema (gpumeter/ingest/schema.py). docs/prometheus.md explains
the configuration and the reasoning; the short version:

- Exact (R1, R2). Every metric is read as RAW samples: an instant query of a range selector,
  `M{selector}[W+1ms]` evaluated at the end of a window [start, end), which returns the stored samples
  of the window (no step, no lookback, no interpolation). Prometheus 2.x range selectors are closed,
  [t-W, t], 3.x and VictoriaMetrics are left-open, (t-W, t]: asking for one millisecond more and then
  keeping, client-side, exactly the samples with start <= ts < end makes every window half-open
  whatever the server, so consecutive windows partition the day and each sample is counted once,
  whatever the window size.
- Windows are `chunk_seconds` long (default one hour) so that one answer stays small on big fleets;
  a window the server refuses as too large (HTTP 422, e.g. `query.max-samples`) is split in two and
  retried, down to `min_chunk_seconds`.
- HA pairs (R1: every scrape once). Series identical but for a replica label (`prometheus_replica`,
  `replica`) are one series seen by several scrapers, at timestamps a fraction of Δ apart. The UNION of
  the replicas' scrapes is kept, one sample per scrape, decided per scrape target (`job`, `instance`) for
  all series of the target at once: replicas in name order, every scrape of the first kept, a scrape of a
  later one kept only where no kept scrape of the target lies in [t - Δ/2, t + Δ/2) (it fills a gap).
  So when both replicas have gaps (rolling restarts) nothing is lost, and the metrics, MIG instances and
  vgpu copies of one GPU at one scrape always come from one scraper's scrape. The rule looks at most a
  few Δ away, so a window is deduped exactly by fetching a margin of Δ around it: `fetch_day_parts`
  yields exactly `fetch_day`'s rows, and a day exactly the whole stream's.
- Robust. Retries with exponential backoff on connection errors, timeouts, HTTP 5xx/429 and unreadable
  bodies; never on other 4xx. After the last attempt, one `SourceError` naming the URL, the query and
  what to do.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import requests
import urllib3
from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

from gpumeter.config import PrometheusSource
from gpumeter.ingest.contract import RawDay, SourceError, day_bounds_ms
from gpumeter.ingest.k8s_objects import (
    K8sObjectError,
    load_k8s_json,
    parse_resource_claims,
    parse_resource_slices,
)
from gpumeter.ingest.schema import (
    DCGM_METRICS,
    DCGM_XID,
    KUBE_METRICS,
    RAW_DCGM_SCHEMA,
    RAW_KUBE_SCHEMA,
    RAW_TABLES,
)
from gpumeter_sim.openmetrics import escape_label_value

log = logging.getLogger(__name__)

# raw_dcgm_samples column -> label names that carry it, most preferred first (docs/telemetry.md). The
# `exported_` names are what Prometheus makes of the exporter's own labels when the scrape target has
# labels of the same name and `honor_labels` is false: then `pod` is the exporter's pod.
DCGM_LABEL_COLUMNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("hostname", ("Hostname", "hostname")),
    ("uuid", ("UUID", "uuid")),
    ("gpu", ("gpu",)),
    ("model_name", ("modelName",)),
    ("gpu_i_id", ("GPU_I_ID",)),
    ("gpu_i_profile", ("GPU_I_PROFILE",)),
    ("namespace", ("exported_namespace", "namespace", "pod_namespace")),
    ("pod", ("exported_pod", "pod", "pod_name")),
    ("container", ("exported_container", "container", "container_name")),
    ("vgpu", ("vgpu",)),
    ("dra_claim_name", ("dra_claim_name",)),
    ("dra_claim_namespace", ("dra_claim_namespace",)),
    ("dra_driver_name", ("dra_driver_name",)),
    ("dra_pool_name", ("dra_pool_name",)),
    ("dra_device_name", ("dra_device_name",)),
)
# Labels that Prometheus adds and that say where a sample was scraped, not what it describes.
TARGET_LABELS = ("instance", "job")

_HOUR_MS = 3_600_000
# Series of a metric that the accounting never needs (with `pushdown`): kube-state-metrics writes one 0/1
# kube_pod_status_phase series per phase at every scrape, and stg_kube_pod_phases only asks "is the
# Running one 1", so the Running series alone gives the same pod samples and the same answer.
PUSHDOWN_MATCHERS: dict[str, str] = {"kube_pod_status_phase": 'phase="Running"'}
_BACKOFF_CAP_S = 30.0


class _Retryable(Exception):
    """One attempt failed in a way that another attempt may fix."""

    def __init__(self, reason: str, hint: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.hint = hint


class _TooLarge(Exception):
    """The server refused the window as too large (HTTP 422): split it."""


@dataclass
class _Series:
    labels: dict[str, str]
    ts: list[np.ndarray]
    values: list[np.ndarray]


class _Client(PrometheusConnect):
    """prometheus-api-client's connection (session, headers, TLS, timeout) with the raw response of an
    instant query: `custom_query` hides the HTTP status, `status`/`warnings` and the result type, which
    the retry policy and the validation need."""

    def instant_query(self, query: str, eval_time: str, extra: dict[str, str]) -> requests.Response:
        return self._session.request(
            method="GET",
            url=f"{self.url}/api/v1/query",
            params={"query": query, "time": eval_time, **extra},
            verify=self._session.verify,
            headers=self.headers,
            auth=self.auth,
            cert=self._session.cert,
            timeout=self._timeout,
            stream=True,  # the body is read by _read_within, against the attempt's deadline
        )


def _prom_time(ms: int) -> str:
    """Epoch ms as the exact decimal seconds the HTTP API takes (no float rounding)."""
    sign, ms = ("-", -ms) if ms < 0 else ("", ms)
    return f"{sign}{ms // 1000}.{ms % 1000:03d}"


def parse_timestamp_ms(ts: Any) -> int:
    """Prometheus' float seconds (e.g. 1700000000.123) -> int ms. round(), never int(): 0.123 * 1000 is
    122.99999999999999 in binary floating point."""
    return round(float(ts) * 1000)


class PrometheusRawSource:
    """A `RawSource` reading raw samples from a PromQL HTTP API (docs/prometheus.md).

    `cluster` is the configured cluster name (the `cluster` column where a series has no `cluster_label`
    label). `scrape_interval_seconds` is Δ (the config's top-level field, R1): the replica dedupe's
    unit. The other keyword arguments tune the pull and are not config fields yet. One `fetch_day` at a time
    per instance (it runs its own pool of `max_concurrent_queries` threads)."""

    def __init__(
        self,
        spec: PrometheusSource,
        cluster: str,
        *,
        cluster_label: str = "cluster",
        backoff_seconds: float = 0.5,
        dcgm_metrics: Sequence[str] = DCGM_METRICS,
        kube_metrics: Sequence[str] = KUBE_METRICS,
        scrape_interval_seconds: float = 30,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.spec = spec
        self.cluster = cluster
        self.cluster_label = cluster_label
        self.url = spec.url.rstrip("/")
        self.chunk_ms = spec.chunk_seconds * 1000
        self.min_chunk_ms = spec.min_chunk_seconds * 1000
        self.backoff_seconds = backoff_seconds
        self.bucket_ms = spec.dedupe_bucket_seconds * 1000
        # Δ (R1, config `scrape_interval_seconds`): two replicas' samples less than Δ/2 apart are one scrape.
        self.scrape_interval_ms = round(scrape_interval_seconds * 1000)
        if self.scrape_interval_ms < 2:
            raise ValueError(f"scrape_interval_seconds must be positive, got {scrape_interval_seconds!r}")
        self.dcgm_metrics = tuple(dcgm_metrics)
        self.kube_metrics = tuple(kube_metrics)
        # Validated and re-rendered by PrometheusSource: only label matchers, never other PromQL.
        self.selector = spec.selector or ""
        self.replica_labels = tuple(spec.replica_labels)
        self._sleep = sleep
        self._local = threading.local()
        self._clients: list[_Client] = []
        self._stop = threading.Event()
        self._headers: dict[str, str] = {}
        # What the last fetch_day moved over HTTP (attempts included): requests, response bytes, and
        # samples received (raw samples, plus one per series of an aggregate answer).
        self.queries = 0
        self.bytes_received = 0
        self.samples_received = 0
        self._count_lock = threading.Lock()
        # The Kubernetes objects read by the last fetch_day, as read (for the pipeline to persist).
        self.last_k8s_snapshot: dict[str, Any] = {}

    # --- public ------------------------------------------------------------------------------

    def query_for(self, metric: str, window_ms: int, series: dict[str, str] | None = None) -> str:
        """The PromQL of one window: raw samples of `metric` in (end - window - 1ms, end] or [.., end];
        with `series`, only the series carrying those labels (values escaped: labels come from the server)."""
        parts = [self.selector] if self.selector else []
        if self.spec.pushdown and metric in PUSHDOWN_MATCHERS:
            parts.append(PUSHDOWN_MATCHERS[metric])
        parts += [f'{k}="{escape_label_value(v)}"' for k, v in sorted((series or {}).items())]
        matchers = "{" + ",".join(parts) + "}" if parts else ""
        return f"{metric}{matchers}[{window_ms + 1}ms]"

    def screen_query_for(self, metric: str, window_ms: int) -> str:
        """The series of `metric` with some value != 0 in the window (NaN counts as != 0: fetched, then
        ignored by the accounting like any non-finite value, R10). Evaluated at end - 1ms, its range
        `[window_ms]` covers [start, end) on a left-open server and [start - 1ms, end) on a closed one:
        never less than the window, and a sample on the window's end is left to the next window."""
        selection = self.query_for(metric, window_ms - 1)
        return f"max_over_time({selection}) != 0 or min_over_time({selection}) != 0"

    def fetch_day(self, cluster: str, day: date, lookback_ms: int) -> RawDay:
        """Raw samples with day start − lookback <= ts < day end (R2), plus the DRA objects."""
        start_ms, end_ms = day_bounds_ms(day)
        return self.fetch_window(cluster, start_ms - max(0, int(lookback_ms)), end_ms)

    def fetch_day_parts(self, cluster: str, day: date, lookback_ms: int) -> Iterator[RawDay]:
        """The same rows as `fetch_day` (in another order), one part of `dedupe_bucket_seconds` (an hour by
        default) at a time, the DRA objects last: a pull holds one part's samples, not the day's
        (runner.pull_raw_day writes each part as it comes). Replica dedupe looks a few Δ beyond each part
        (its margins are fetched with it) and keeps exactly the samples the whole stream's dedupe keeps, so
        the parts together are the day, also where a scrape's replica samples straddle a part edge."""
        start_ms, end_ms = day_bounds_ms(day)
        start = start_ms - max(0, int(lookback_ms))
        inner = range(start - start % self.bucket_ms + self.bucket_ms, end_ms, self.bucket_ms)
        edges = sorted({start, end_ms, *inner})
        self._reset_counts()
        warned: set[tuple[str, str]] = set()
        for w0, w1 in itertools.pairwise(edges):
            dcgm, kube = self._fetch_samples(cluster, w0, w1, warned)
            yield RawDay(dcgm, kube)
        allocations, devices = self._k8s_objects(cluster, start, end_ms)
        yield RawDay(RAW_DCGM_SCHEMA.empty_table(), RAW_KUBE_SCHEMA.empty_table(), allocations, devices)

    def fetch_window(self, cluster: str, start_ms: int, end_ms: int) -> RawDay:
        self._reset_counts()
        dcgm, kube = self._fetch_samples(cluster, start_ms, end_ms, set())
        allocations, devices = self._k8s_objects(cluster, start_ms, end_ms)
        return RawDay(dcgm, kube, allocations, devices)

    def _reset_counts(self) -> None:
        self.queries = 0
        self.bytes_received = self.samples_received = 0

    def _fetch_samples(
        self, cluster: str, start_ms: int, end_ms: int, warned: set[tuple[str, str]]
    ) -> tuple[pa.Table, pa.Table]:
        """The DCGM and kube rows of [start_ms, end_ms), replicas deduped; `warned` holds what was already
        warned about in this pull (one warning per pull, not per part).

        Replica dedupe decides a sample from the target's other replicas' scrapes within a few Δ of it
        (docs/prometheus.md, "HA pairs"), so where the window holds replica series, margins on both sides
        are fetched too: the rows of the window are then the whole stored stream's, whatever the window."""
        self._headers = self._auth_headers()
        metrics = [(m, "dcgm") for m in self.dcgm_metrics] + [(m, "kube") for m in self.kube_metrics]
        # R11 reads XID only as "some value != 0": its raw samples are fetched only in windows where an
        # aggregate says a series has one (docs/prometheus.md, "What is pushed down").
        screened = {DCGM_XID} & set(self.dcgm_metrics) if self.spec.pushdown else set()
        kinds = dict(metrics)
        series: dict[tuple[tuple[str, str], ...], _Series] = {}
        self._pull(series, [m for m, _ in metrics], screened, [(start_ms, end_ms)])
        margin = 0
        while self.replica_labels and any(self._replica_of(s.labels) for s in series.values()):
            need = self._margin_ms(series.values())
            if need <= margin:
                break
            # The margins carry no screened metric: its samples share the scrapes of the target's other
            # fields (dcgm-exporter stamps a scrape's fields alike), which are what the dedupe reads.
            unscreened = [m for m, _ in metrics if m not in screened]
            self._pull(
                series,
                unscreened,
                set(),
                [(start_ms - need, start_ms - margin), (end_ms + margin, end_ms + need)],
            )
            margin = need
        merged = self._dedupe_replicas(list(series.values()), start_ms, end_ms, warned)
        dcgm_series = [s for s in merged if kinds.get(s.labels.get("__name__", "")) == "dcgm"]
        kube_series = [s for s in merged if kinds.get(s.labels.get("__name__", "")) == "kube"]
        self._warn_foreign_clusters(cluster, merged, warned)
        return self._dcgm_table(cluster, dcgm_series), self._kube_table(cluster, kube_series)

    def _pull(
        self,
        series: dict[tuple[tuple[str, str], ...], _Series],
        metrics: Sequence[str],
        screened: set[str],
        spans: Sequence[tuple[int, int]],
    ) -> None:
        """Raw samples of `metrics` in the half-open `spans`, each cut into `chunk_seconds` windows, queried
        by a pool of `max_concurrent_queries` threads, added to `series` by label set."""
        self._local = threading.local()
        self._stop = stop = threading.Event()
        windows = [
            (w, min(w + self.chunk_ms, s1))
            for s0, s1 in spans
            if s0 < s1
            for w in range(s0, s1, self.chunk_ms)
        ]
        tasks = [(metric, w0, w1) for metric in metrics for w0, w1 in windows]
        if not tasks:
            return
        pool = ThreadPoolExecutor(self.spec.max_concurrent_queries, thread_name_prefix="gpumeter-prom")
        try:
            futures = [
                pool.submit(
                    self._fetch_screened if metric in screened else self._fetch_window,
                    metric,
                    w0,
                    w1,
                    stop,
                )
                for metric, w0, w1 in tasks
            ]
            wait(futures, return_when=FIRST_EXCEPTION)
            for future in futures:
                if future.done() and future.exception() is not None:
                    stop.set()
                    future.result()  # raises the first failure (a SourceError)
            for future in futures:
                for labels, ts, values in future.result():
                    _append_series(series, labels, ts, values)
        finally:
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            for client in self._clients:
                client.close()
            self._clients = []

    # --- HTTP --------------------------------------------------------------------------------

    def _auth_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self.spec.headers_env:
            raw = os.environ.get(self.spec.headers_env)
            if raw is None:
                raise SourceError(
                    f"Prometheus {self.url}: environment variable {self.spec.headers_env} (headers_env) is not set; "
                    'export it as a JSON object, e.g. {"X-Scope-OrgID": "tenant-1"}, or remove headers_env'
                )
            try:
                extra = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise SourceError(
                    f"Prometheus {self.url}: {self.spec.headers_env} (headers_env) is not JSON ({exc.msg}); "
                    'it must be a JSON object of header names to values, e.g. {"X-Scope-OrgID": "tenant-1"}'
                ) from None
            if not isinstance(extra, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in extra.items()
            ):
                raise SourceError(
                    f"Prometheus {self.url}: {self.spec.headers_env} (headers_env) must be a JSON object of "
                    'string header names to string values, e.g. {"X-Scope-OrgID": "tenant-1"}'
                )
            headers.update(extra)
        if self.spec.bearer_token_env:
            token = os.environ.get(self.spec.bearer_token_env, "").strip()
            if not token:
                raise SourceError(
                    f"Prometheus {self.url}: environment variable {self.spec.bearer_token_env} (bearer_token_env) "
                    "is not set or empty; export the token there or remove bearer_token_env"
                )
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _client(self) -> _Client:
        client = getattr(self._local, "client", None)
        if client is None:
            client = _Client(
                url=self.url,
                headers=dict(self._headers),
                disable_ssl=not self.spec.verify_tls,
                retry=Retry(0, read=False),  # requests' own default: no retries here, our loop below
                timeout=self.spec.timeout_seconds,
            )
            self._local.client = client
            with self._count_lock:
                self._clients.append(client)
        return client

    def _too_large(self, query: str, w0: int, w1: int, exc: _TooLarge) -> SourceError:
        return SourceError(
            f"Prometheus {self.url}: query {query!r} at {_iso(w1)} is refused as too large even for a "
            f"{(w1 - w0) / 1000:g} s window ({exc}); raise the server's limits (query.max-samples, "
            "Mimir/Thanos series or chunk limits), narrow `selector`, or lower min_chunk_seconds"
        )

    def _fetch_window(
        self,
        metric: str,
        w0: int,
        w1: int,
        stop: threading.Event,
        series: dict[str, str] | None = None,
    ) -> list[tuple[dict[str, str], np.ndarray, np.ndarray]]:
        if stop.is_set():
            return []
        query = self.query_for(metric, w1 - w0, series)
        try:
            result = self._query(query, w1)
        except _TooLarge as exc:
            if w1 - w0 <= self.min_chunk_ms:
                raise self._too_large(query, w0, w1, exc) from None
            mid = w0 + (w1 - w0) // 2
            return self._fetch_window(metric, w0, mid, stop, series) + self._fetch_window(
                metric, mid, w1, stop, series
            )
        out = []
        for item in result:
            labels = item["metric"]
            with self._count_lock:
                self.samples_received += len(item["values"])
            ts, values = _samples(item["values"], w0, w1)
            if len(ts):
                out.append((labels, ts, values))
        return out

    def _fetch_screened(
        self, metric: str, w0: int, w1: int, stop: threading.Event
    ) -> list[tuple[dict[str, str], np.ndarray, np.ndarray]]:
        """Raw samples of the series that have a value != 0 in [w0, w1), and nothing else. The screen
        covers at least the half-open window, so it never misses a sample that the raw fetch keeps (R1)."""
        if stop.is_set():
            return []
        query = self.screen_query_for(metric, w1 - w0)
        try:
            flagged = self._query(query, w1 - 1, result_type="vector")
        except _TooLarge as exc:
            if w1 - w0 <= self.min_chunk_ms:
                raise self._too_large(query, w0, w1, exc) from None
            mid = w0 + (w1 - w0) // 2
            return self._fetch_screened(metric, w0, mid, stop) + self._fetch_screened(metric, mid, w1, stop)
        with self._count_lock:
            self.samples_received += len(flagged)
        out = []
        for item in flagged:
            labels = item["metric"]
            # Matchers also match series with more labels: keep only the flagged series itself.
            wanted = {**labels, "__name__": metric}
            out += [got for got in self._fetch_window(metric, w0, w1, stop, labels) if got[0] == wanted]
        return out

    def _query(self, query: str, eval_ms: int, result_type: str = "matrix") -> list[dict[str, Any]]:
        eval_time = _prom_time(eval_ms)
        extra = {"timeout": f"{self.spec.timeout_seconds:g}s", "partial_response": "false"}
        attempts = self.spec.retries + 1
        last: _Retryable | None = None
        made = 0
        for attempt in range(attempts):
            if attempt and self._stop.is_set():
                break  # another query failed: the pull is over
            if attempt:
                self._sleep(min(_BACKOFF_CAP_S, self.backoff_seconds * 2 ** (attempt - 1)))
            with self._count_lock:
                self.queries += 1
            made += 1
            try:
                return self._attempt(query, eval_time, extra, result_type)
            except _Retryable as exc:
                last = exc
                log.debug(
                    "Prometheus %s: attempt %d/%d of %r failed: %s",
                    self.url,
                    attempt + 1,
                    attempts,
                    query,
                    exc,
                )
        assert last is not None
        raise SourceError(
            f"Prometheus {self.url}: query {query!r} at {_iso(eval_ms)} failed after {made} attempt(s): "
            f"{last.reason}; {last.hint}"
        )

    def _timeout_error(self, exc: Exception) -> _Retryable:
        return _Retryable(
            f"timeout after {self.spec.timeout_seconds:g} s ({type(exc).__name__})",
            "raise timeout_seconds, lower chunk_seconds, or check the server's load",
        )

    def _attempt(
        self, query: str, eval_time: str, extra: dict[str, str], result_type: str
    ) -> list[dict[str, Any]]:
        # requests' timeout bounds each socket read; a server trickling its body would never hit it. The
        # deadline bounds the whole attempt (to within one read of _READ_CHUNK bytes).
        deadline = time.monotonic() + self.spec.timeout_seconds
        try:
            response = self._client().instant_query(query, eval_time, extra)
            body = _read_within(response, deadline)
        except requests.Timeout as exc:
            raise self._timeout_error(exc) from None
        except requests.exceptions.SSLError as exc:  # before ConnectionError, its base: retrying cannot help
            raise SourceError(
                f"Prometheus {self.url}: TLS failed for query {query!r} ({_short(exc)}); check the server's "
                "certificate and the CA bundle (REQUESTS_CA_BUNDLE), or set verify_tls: false"
            ) from None
        except (
            requests.ConnectionError,
            requests.exceptions.ChunkedEncodingError,
            requests.exceptions.ContentDecodingError,
        ) as exc:
            reason = exc.args[0].reason if exc.args and hasattr(exc.args[0], "reason") else None
            # urllib3's NewConnectionError (refused, unresolvable) subclasses its ConnectTimeoutError.
            timed_out = isinstance(reason, urllib3.exceptions.ReadTimeoutError) or (
                isinstance(reason, urllib3.exceptions.ConnectTimeoutError)
                and not isinstance(reason, urllib3.exceptions.NewConnectionError)
            )
            if timed_out:
                raise self._timeout_error(exc) from None
            raise _Retryable(
                f"connection failed ({_short(exc)})",
                "check `url`, that the server is up and reachable from here, and proxies/firewalls",
            ) from None
        except requests.RequestException as exc:
            raise SourceError(
                f"Prometheus {self.url}: query {query!r} could not be sent ({_short(exc)}); check `url`"
            ) from None
        status = response.status_code
        with self._count_lock:
            self.bytes_received += len(body)
        if status >= 500 or status == 429:
            raise _Retryable(
                f"HTTP {status} {self._error_text(body)}",
                "the server failed or is overloaded: check its logs, lower max_concurrent_queries or chunk_seconds",
            )
        if status == 422:
            raise _TooLarge(f"HTTP 422 {self._error_text(body)}")
        if status in (401, 403):
            raise SourceError(
                f"Prometheus {self.url}: query {query!r} was refused with HTTP {status} {self._error_text(body)}; "
                "check the token in bearer_token_env / the headers in headers_env (e.g. X-Scope-OrgID for Mimir)"
            )
        if status != 200:
            raise SourceError(
                f"Prometheus {self.url}: query {query!r} was refused with HTTP {status} {self._error_text(body)}; "
                "check `url` (the API root, e.g. http://host:9090 or https://mimir/prometheus) and `selector` "
                '(matchers such as cluster="prod-a")'
            )
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise _Retryable(
                f"the response is not valid JSON ({exc}; {len(body)} bytes)",
                "a proxy may have cut the response: lower chunk_seconds, or check proxies in front of the server",
            ) from None
        return _validated(doc, result_type)

    def _error_text(self, body: bytes) -> str:
        """The server's error, quoted into errors and logs with every secret this source sent replaced: a
        proxy that echoes the request would otherwise put the token or the headers_env values there."""
        text = _error_text(body)
        for secret in self._secrets():
            text = text.replace(secret, "***")
        return text

    def _secrets(self) -> list[str]:
        values = []
        for value in self._headers.values():
            values.append(value)
            if value.startswith("Bearer "):
                values.append(value.removeprefix("Bearer "))
        # Longest first, so that a token inside a longer header value is not left half-replaced.
        return sorted((v for v in values if len(v) >= 4), key=len, reverse=True)

    # --- replicas ----------------------------------------------------------------------------

    def _replica_of(self, labels: dict[str, str]) -> tuple[str, ...] | None:
        values = tuple(labels.get(name, "") for name in self.replica_labels)
        return values if any(values) else None

    def _target_of(self, labels: dict[str, str]) -> tuple[str, ...]:
        """The scrape target of a series: (cluster, job, instance). A series without either (federated, or
        backfilled without them) stands for its node's dcgm-exporter when it names a host, else for the
        exporter its metric comes from, named by the metric's namespace (`kube`, `kueue`, `node`: its name up
        to the first `_`), as the accounting reads a null target (schema.RAW_KUBE_SCHEMA)."""
        target = tuple(labels.get(name, "") for name in (self.cluster_label, *TARGET_LABELS))
        if any(target[1:]):
            return target
        host = labels.get("Hostname") or labels.get("hostname")
        if host:
            return (target[0], "", "", f"host={host}")
        namespace = labels.get("__name__", "").split("_", 1)[0]
        return (target[0], "", "", f"exporter={namespace}")

    def _replicas_per_target(self, series: Iterable[_Series]) -> dict[tuple[str, ...], set[tuple[str, ...]]]:
        out: dict[tuple[str, ...], set[tuple[str, ...]]] = defaultdict(set)
        for s in series:
            replica = self._replica_of(s.labels)
            if replica is not None:
                out[self._target_of(s.labels)].add(replica)
        return out

    def _margin_ms(self, series: Iterable[_Series]) -> int:
        """How far beyond a window the dedupe of its samples looks: the n-th replica of a target (0-based)
        is decided from the kept scrapes within Δ/2 of it, which were decided from within Δ/2 of them...:
        n × Δ/2. At least Δ (two or three replicas)."""
        most = max((len(r) for r in self._replicas_per_target(series).values()), default=1)
        return max(self.scrape_interval_ms, (most - 1) * (self.scrape_interval_ms // 2))

    def _dedupe_replicas(
        self, series: list[_Series], start_ms: int, end_ms: int, warned: set[tuple[str, str]]
    ) -> list[_Series]:
        """The samples with start_ms <= ts < end_ms of the union of the replicas' scrapes (R1), one sample
        per scrape, decided per scrape target (docs/prometheus.md, "HA pairs"):

        - a target's scrapes by replica r are the timestamps of r's series of that target (every series of
          a scrape carries the scrape's timestamp);
        - replicas are taken in name order; every scrape of the first is kept; a scrape of a later replica
          at t is kept only where no scrape kept so far lies in [t - Δ/2, t + Δ/2) (it fills a gap);
        - a series' sample is kept where its replica's scrape at that timestamp is kept, so every series
          of a target has the kept scrapes' timestamps, each from one replica's complete scrape.

        A series without a replica label is not deduped. `series` may reach beyond the window (the margins
        fetched by `_fetch_samples`): they inform the decision and are dropped after it."""

        def window(ts: np.ndarray) -> np.ndarray:
            return (ts >= start_ms) & (ts < end_ms)

        out: dict[tuple[tuple[str, str], ...], _Series] = {}

        def add(labels: dict[str, str], ts: np.ndarray, values: np.ndarray) -> None:
            if len(ts):
                _append_series(out, labels, ts, values)

        by_target: dict[tuple[str, ...], dict[tuple[str, ...], list[_Series]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for s in series:
            replica = self._replica_of(s.labels) if self.replica_labels else None
            if replica is None:
                ts, values = np.concatenate(s.ts), np.concatenate(s.values)
                keep = window(ts)
                add(s.labels, ts[keep], values[keep])
            else:
                by_target[self._target_of(s.labels)][replica].append(s)
        half = self.scrape_interval_ms // 2
        for target, replicas in sorted(by_target.items()):
            kept = np.empty(0, np.int64)  # the target's kept scrapes so far, sorted
            for replica in sorted(replicas):
                members = [(s, np.concatenate(s.ts), np.concatenate(s.values)) for s in replicas[replica]]
                scrapes = np.unique(np.concatenate([ts for _, ts, _ in members]))
                if len(replicas) > 1:
                    self._warn_interval(target, replica, scrapes, warned)
                if len(kept):
                    # A kept scrape k covers [k - Δ/2, k + Δ/2): k in [t - Δ/2, t + Δ/2) covers t.
                    lo = np.searchsorted(kept, scrapes - half, side="left")
                    hi = np.searchsorted(kept, scrapes + half, side="left")
                    scrapes = scrapes[lo == hi]
                kept = np.union1d(kept, scrapes)
                for s, ts, values in members:
                    at = np.searchsorted(scrapes, ts)
                    keep = (at < len(scrapes)) & window(ts)
                    keep[keep] = scrapes[at[keep]] == ts[keep]
                    labels = {k: v for k, v in s.labels.items() if k not in self.replica_labels}
                    add(labels, ts[keep], values[keep])
        return [_Series(s.labels, [np.concatenate(s.ts)], [np.concatenate(s.values)]) for s in out.values()]

    def _warn_interval(
        self,
        target: tuple[str, ...],
        replica: tuple[str, ...],
        scrapes: np.ndarray,
        warned: set[tuple[str, str]],
    ) -> None:
        """A target scraped much less often than Δ: two replicas' samples of one scrape can then be more
        than Δ/2 apart and would count as two scrapes. Said once per pull and target."""
        if len(scrapes) < 3:
            return
        interval = float(np.median(np.diff(scrapes)))
        name = "/".join(target[1:3]) or target[3]
        if interval <= 1.5 * self.scrape_interval_ms or ("interval", name) in warned:
            return
        warned.add(("interval", name))
        log.warning(
            "Prometheus %s: target %s (replica %s) is scraped every %g s, but scrape_interval_seconds is %g: "
            "its replicas' samples of one scrape may lie more than half of that apart and count twice (R1); "
            "set scrape_interval_seconds to the scrape interval",
            self.url,
            name,
            ",".join(v for v in replica if v),
            interval / 1000,
            self.scrape_interval_ms / 1000,
        )

    # --- tables ------------------------------------------------------------------------------

    def _cluster_of(self, labels: dict[str, str], configured: str) -> str:
        return labels.get(self.cluster_label) or configured

    def _warn_foreign_clusters(
        self, cluster: str, series: Iterable[_Series], warned: set[tuple[str, str]]
    ) -> None:
        seen = {name for kind, name in warned if kind == "cluster"}
        others = sorted(
            {v for s in series if (v := s.labels.get(self.cluster_label)) and v != cluster} - seen
        )
        warned.update(("cluster", other) for other in others)
        if others:
            log.warning(
                "Prometheus %s: series of cluster(s) %s are in the pull for %r and will not be metered as %r; "
                'set `selector: %s="%s"` on this source',
                self.url,
                ", ".join(others),
                cluster,
                cluster,
                self.cluster_label,
                cluster,
            )

    def _dcgm_table(self, cluster: str, series: list[_Series]) -> pa.Table:
        if not series:
            return RAW_DCGM_SCHEMA.empty_table()
        ts, values, index = _stack(series)
        columns: dict[str, pa.Array] = {
            "cluster": pa.array([self._cluster_of(s.labels, cluster) for s in series], pa.string()).take(
                index
            ),
            "ts_ms": pa.array(ts, pa.int64()),
            "metric": pa.array([s.labels["__name__"] for s in series], pa.string()).take(index),
            "value": pa.array(values, pa.float64()),
        }
        for column, names in DCGM_LABEL_COLUMNS:
            per_series = [_first(s.labels, names) for s in series]
            columns[column] = pa.array(per_series, pa.string()).take(index)
        table = pa.table(columns).select(RAW_DCGM_SCHEMA.names).cast(RAW_DCGM_SCHEMA)
        return table.sort_by(
            [(name, "ascending") for name in ("ts_ms", "metric", "hostname", "uuid", "gpu_i_id")]
        )

    def _kube_labels(self, labels: dict[str, str]) -> str:
        drop = {"__name__", self.cluster_label, *self.replica_labels, *TARGET_LABELS}
        kept = {
            k: v for k, v in labels.items() if k not in drop and not k.startswith("exported_") and v != ""
        }
        for key, value in labels.items():  # the exporter's own label, renamed by a conflicting target label
            if key.startswith("exported_") and value != "" and key[len("exported_") :] not in drop:
                kept[key[len("exported_") :]] = value
        return json.dumps(kept, separators=(",", ":"), sort_keys=True)

    def _kube_target(self, labels: dict[str, str]) -> str | None:
        """`<job>/<instance>` of the scrape (schema.RAW_KUBE_SCHEMA), null when the series has neither."""
        job, instance = labels.get("job", ""), labels.get("instance", "")
        return f"{job}/{instance}" if job or instance else None

    def _kube_table(self, cluster: str, series: list[_Series]) -> pa.Table:
        if not series:
            return RAW_KUBE_SCHEMA.empty_table()
        ts, values, index = _stack(series)
        table = pa.table(
            {
                "cluster": pa.array([self._cluster_of(s.labels, cluster) for s in series], pa.string()).take(
                    index
                ),
                "ts_ms": pa.array(ts, pa.int64()),
                "metric": pa.array([s.labels["__name__"] for s in series], pa.string()).take(index),
                "value": pa.array(values, pa.float64()),
                "labels": pa.array([self._kube_labels(s.labels) for s in series], pa.string()).take(index),
                "target": pa.array([self._kube_target(s.labels) for s in series], pa.string()).take(index),
            }
        ).cast(RAW_KUBE_SCHEMA)
        return table.sort_by([(name, "ascending") for name in ("ts_ms", "metric", "labels", "target")])

    # --- Kubernetes objects (DRA) ------------------------------------------------------------

    def _k8s_objects(self, cluster: str, start_ms: int, end_ms: int) -> tuple[pa.Table, pa.Table]:
        """The DRA objects of the window [start_ms, end_ms) (R5). `claims_file` / `slices_file` are snapshots
        of unknown time: their objects are valid for the whole window. `k8s_snapshots_dir` holds the
        snapshots the `snapshot_k8s_objects` job keeps (gpumeter.ingest.k8s_objects: day folders of time-named
        files): those of the days the window touches and of the day before, each with its time. Without that
        folder, `kubeconfig` lists the API now for the kinds no file gives, read as a snapshot of unknown time
        as before snapshots were kept (a claim deleted before now is not seen)."""
        from gpumeter.ingest.k8s_objects import read_kept_snapshots

        spec = self.spec
        snapshot: dict[str, Any] = {}
        claims_doc = slices_doc = None
        claims_src = slices_src = ""
        snapshots_dir = spec.k8s_snapshots_dir
        try:
            if spec.claims_file:
                claims_doc, claims_src = load_k8s_json(Path(spec.claims_file)), spec.claims_file
            if spec.slices_file:
                slices_doc, slices_src = load_k8s_json(Path(spec.slices_file)), spec.slices_file
            kept = (
                read_kept_snapshots(Path(snapshots_dir), cluster, start_ms, end_ms) if snapshots_dir else None
            )
        except K8sObjectError as exc:
            raise SourceError(str(exc)) from exc
        if kept is not None and not kept.files:
            log.warning(
                "%s: no DRA snapshot of cluster %s in %s for the days of this window: claims and slices are "
                "not known then (is the snapshot_k8s_objects schedule running?)",
                snapshots_dir,
                cluster,
                snapshots_dir,
            )
        if spec.kubeconfig and kept is None and (claims_doc is None or slices_doc is None):
            api = _KubeApi(spec.kubeconfig)
            if claims_doc is None:
                claims_doc, claims_src = api.list("resourceclaims"), f"{spec.kubeconfig} (resourceclaims)"
            if slices_doc is None:
                slices_doc, slices_src = api.list("resourceslices"), f"{spec.kubeconfig} (resourceslices)"
        try:
            allocations = (
                parse_resource_claims(claims_doc, cluster, claims_src)
                if claims_doc is not None
                else RAW_TABLES["raw_dra_allocations"].empty_table()
            )
            devices = (
                parse_resource_slices(slices_doc, cluster, slices_src)
                if slices_doc is not None
                else RAW_TABLES["raw_dra_devices"].empty_table()
            )
        except K8sObjectError as exc:
            raise SourceError(str(exc)) from exc
        if claims_doc is not None or slices_doc is not None or kept is not None:
            snapshot = {
                "fetched_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                "resourceclaims": claims_doc,
                "resourceslices": slices_doc,
            }
        if kept is not None:
            # The kept snapshots are files already: their paths, for the pipeline to copy beside the raw day.
            snapshot["snapshot_files"] = [str(f.path) for f in kept.files if f.taken_ms is not None]
            allocations = pa.concat_tables([allocations, kept.allocations])
            devices = pa.concat_tables([devices, kept.devices])
        self.last_k8s_snapshot = snapshot
        return allocations, devices


class _KubeApi:
    """resource.k8s.io lists through the official `kubernetes` client (optional dependency). Also what the
    snapshot job (gpumeter/pipelines/k8s_snapshots.py) lists with: `snapshot` is a list with the time it was taken."""

    VERSIONS = ("v1", "v1beta2", "v1beta1")

    def __init__(self, kubeconfig: str) -> None:
        try:
            from kubernetes import client, config
        except ImportError:
            raise SourceError(
                f"kubeconfig {kubeconfig} is set on a prometheus source, but the `kubernetes` package is not "
                "installed: pip install kubernetes (or give claims_file/slices_file instead)"
            ) from None
        self.kubeconfig = kubeconfig
        self.listed_at_ms: dict[str, int] = {}
        try:
            self.api = client.CustomObjectsApi(config.new_client_from_config(config_file=kubeconfig))
        except Exception as exc:  # the client raises ConfigException, OSError, yaml errors...
            raise SourceError(f"kubeconfig {kubeconfig}: cannot be loaded ({exc}); check the file") from None

    def snapshot(self, plural: str) -> tuple[int, dict[str, Any]]:
        """(taken_ms, the list): the time, epoch ms, at which the first page of the served version was asked
        for. The API server answers a list, all its `continue` pages included, at the one resourceVersion it
        reads when the first request arrives, so that is the moment the snapshot shows."""
        doc = self.list(plural)
        return self.listed_at_ms[plural], doc

    def list(self, plural: str) -> dict[str, Any]:
        last: Exception | None = None
        for version in self.VERSIONS:
            items: list[Any] = []
            token: str | None = None
            asked_ms = time.time_ns() // 1_000_000
            try:
                while True:
                    kwargs: dict[str, Any] = {"limit": 500}
                    if token:
                        kwargs["_continue"] = token
                    page = self.api.list_cluster_custom_object("resource.k8s.io", version, plural, **kwargs)
                    items.extend(page.get("items") or [])
                    token = (page.get("metadata") or {}).get("continue")
                    if not token:
                        break
            except Exception as exc:
                if getattr(exc, "status", None) == 404:
                    last = exc
                    continue
                raise SourceError(
                    f"kubeconfig {self.kubeconfig}: listing {plural}.resource.k8s.io/{version} failed "
                    f"({_api_reason(exc)}); "
                    f"check access (`kubectl get {plural} -A`) and RBAC (list {plural} in resource.k8s.io)"
                ) from None
            self.listed_at_ms[plural] = asked_ms
            return {"apiVersion": "v1", "kind": "List", "items": items}
        raise SourceError(
            f"kubeconfig {self.kubeconfig}: the API server serves no resource.k8s.io {plural} "
            f"({', '.join(self.VERSIONS)}: {_api_reason(last) if last else 'not found'}); is DRA enabled on this "
            "cluster?"
        )


# --- helpers ---------------------------------------------------------------------------------


def _validated(doc: Any, result_type: str = "matrix") -> list[dict[str, Any]]:
    def bad(problem: str) -> _Retryable:
        return _Retryable(
            f"unexpected response ({problem})", "check that `url` is a Prometheus-compatible API root"
        )

    if not isinstance(doc, dict):
        raise bad("not a JSON object")
    if doc.get("status") != "success":
        raise bad(f"status {doc.get('status')!r}: {doc.get('error', '')}")
    data = doc.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise bad("no data.result list")
    if data.get("resultType") != result_type:
        raise bad(f"resultType {data.get('resultType')!r}, expected {result_type!r}")
    for item in data["result"]:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            raise bad("a series without a `metric` object")
        if result_type == "vector":
            continue  # an aggregate: labels only are used, and they carry no __name__
        if not isinstance(item.get("values"), list):
            raise bad("a series without a `values` list")
        if "__name__" not in item["metric"]:
            raise bad("a series without __name__")
    return data["result"]


def _samples(values: list[Any], w0: int, w1: int) -> tuple[np.ndarray, np.ndarray]:
    """The samples with w0 <= ts < w1 (the half-open window, R1/R2), as int64 ms and float64."""
    try:
        ts = np.fromiter((parse_timestamp_ms(v[0]) for v in values), np.int64, len(values))
        vals = np.fromiter((float(v[1]) for v in values), np.float64, len(values))
    except (TypeError, ValueError, IndexError, OverflowError) as exc:
        raise _Retryable(
            f'unexpected response (a sample is not [seconds, "value"]: {exc})',
            "check that `url` is a Prometheus-compatible API root",
        ) from None
    keep = (ts >= w0) & (ts < w1)
    return ts[keep], vals[keep]


def _append_series(
    into: dict[tuple[tuple[str, str], ...], _Series],
    labels: dict[str, str],
    ts: np.ndarray,
    values: np.ndarray,
) -> None:
    """Samples of one series (by its whole label set) added to what is already gathered for it."""
    key = tuple(sorted(labels.items()))
    entry = into.get(key)
    if entry is None:
        into[key] = entry = _Series(labels, [], [])
    entry.ts.append(ts)
    entry.values.append(values)


def _stack(series: list[_Series]) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    ts = np.concatenate([s.ts[0] for s in series])
    values = np.concatenate([s.values[0] for s in series])
    lengths = [len(s.ts[0]) for s in series]
    index = pa.array(np.repeat(np.arange(len(series), dtype=np.int32), lengths))
    return ts, values, index


def _first(labels: dict[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return None


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _short(exc: BaseException | None) -> str:
    # One line: errors are printed as one line (and Dagster keeps a failure's last line).
    text = " ".join(str(exc).split()) if exc is not None else ""
    return text if len(text) <= 300 else text[:300] + "..."


def _api_reason(exc: BaseException) -> str:
    """An API server failure in one line: `HTTP 403 Forbidden: <the Status message>` (the client's own
    text carries every response header), else the exception's text."""
    status = getattr(exc, "status", None)
    if not status:
        return _short(exc).replace("\n", " ")
    message = ""
    try:
        doc = json.loads(getattr(exc, "body", None) or "")
        message = doc.get("message", "") if isinstance(doc, dict) else ""
    except (ValueError, TypeError):
        pass
    reason = getattr(exc, "reason", "") or ""
    return f"HTTP {status} {reason}" + (f": {_short(message)}" if message else "")


_READ_CHUNK = 64 * 1024


def _read_within(response: requests.Response, deadline: float) -> bytes:
    """The whole body, or requests.Timeout once the deadline has passed between two reads."""
    parts = []
    try:
        for chunk in response.iter_content(_READ_CHUNK):
            parts.append(chunk)
            if time.monotonic() > deadline:
                raise requests.Timeout("the response body took longer than timeout_seconds")
    except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError):
        # A read that outlived the deadline and then broke off: the attempt had timed out first.
        if time.monotonic() > deadline:
            raise requests.Timeout("the response body took longer than timeout_seconds") from None
        raise
    finally:
        response.close()
    return b"".join(parts)


def _error_text(body: bytes) -> str:
    try:
        doc = json.loads(body)
        if isinstance(doc, dict) and doc.get("error"):
            return f"({doc.get('errorType', 'error')}: {_short(doc['error'])})"
    except (ValueError, UnicodeDecodeError):
        pass
    text = " ".join(body[:200].decode("utf-8", errors="replace").split())
    return f"({text})" if text else ""


__all__ = ["DCGM_LABEL_COLUMNS", "PrometheusRawSource", "parse_timestamp_ms"]
