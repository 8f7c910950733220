"""PrometheusRawSource: the raw samples of a (cluster, day) from any PromQL API, with the DRA objects that
say who held which device. It composes the parts of the package: the windows to ask for (windows.py), the
PromQL of each (promql.py), the transport that asks (transport.py), the replica dedupe of the answers
(windows.py) and their rows (raw_tables.py); the DRA objects come from files, the kept snapshots or the
Kubernetes API (gpumeter.ingest.kube_api).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from gpumeter.config import PrometheusSource
from gpumeter.ingest.contract import K8sSnapshot, RawDay, SourceError, day_bounds_ms
from gpumeter.ingest.k8s_objects import (
    K8sObjectError,
    load_k8s_json,
    parse_resource_claims,
    parse_resource_slices,
    read_kept_snapshots,
)
from gpumeter.ingest.kube_api import KubeApi
from gpumeter.ingest.kube_series import KubeSeries
from gpumeter.ingest.prometheus.answers import LabelSet, UnexpectedAnswer, matrix_samples
from gpumeter.ingest.prometheus.promql import nonzero_screen_query, raw_samples_query, up_query
from gpumeter.ingest.prometheus.raw_tables import Series, SeriesByLabels, SeriesMapping, append_series
from gpumeter.ingest.prometheus.transport import PrometheusTransport, PullAborted, TooLarge
from gpumeter.ingest.prometheus.windows import (
    ReplicaDedupe,
    SharedGpus,
    Span,
    chunks,
    day_parts,
    margins,
    split_when_too_large,
)
from gpumeter.ingest.schema import (
    DCGM_METRICS,
    DCGM_XID,
    KUBE_METRICS,
    RAW_DCGM_SCHEMA,
    RAW_KUBE_SCHEMA,
    RAW_TABLES,
)
from gpumeter.storage import paths

log = logging.getLogger(__name__)

# The samples of one window: (a series' label set, its timestamps in ms, its values), per series answered.
WindowSamples = list[tuple[LabelSet, np.ndarray, np.ndarray]]


class Queries(NamedTuple):
    """A fetch's query threads and the event that stops them (PrometheusRawSource._queries)."""

    pool: ThreadPoolExecutor
    stop: threading.Event


class Fetched(NamedTuple):
    """A window's answers by series, with their margins, and the GPUs seen through more than one stream of
    scrapes among them (ReplicaDedupe.shared_gpus): worked out once per window, for the margins and the
    dedupe both."""

    series: SeriesByLabels
    shared: SharedGpus


def _cause(errors: Iterable[BaseException | None], otherwise: BaseException) -> BaseException:
    """The failure itself among `errors`, not a query or part that stopped because of it (PullAborted)."""
    return next((e for e in errors if e is not None and not isinstance(e, PullAborted)), otherwise)


class PrometheusRawSource:
    """A `RawSource` reading raw samples from a PromQL HTTP API (docs/prometheus.md).

    `cluster` is the configured cluster name (the `cluster` column where a series has no `cluster_label`
    label). `scrape_interval_seconds` is the cluster's Δ (`Config.scrape_interval_of`, R1): the replica dedupe's
    unit. The other keyword arguments tune the pull and are not config fields yet. One `fetch_day` at a time
    per instance (it runs its own pool of `max_concurrent_queries` threads).

    `queries`, `bytes_received` (decoded), `wire_bytes` (as they travelled, compressed per `encoding`) and
    `samples_received` say what the last fetch moved over HTTP (attempts included; raw samples, plus one
    per series of an aggregate answer)."""

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
        self.transport = PrometheusTransport(spec, backoff_seconds=backoff_seconds, sleep=sleep)
        self.url = self.transport.url
        self.chunk_ms = spec.chunk_seconds * 1000
        self.min_chunk_ms = spec.min_chunk_seconds * 1000
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
        self.mapping = SeriesMapping(cluster_label, self.replica_labels)
        self.replicas = ReplicaDedupe(
            self.replica_labels,
            cluster_label,
            self.scrape_interval_ms,
            self.url,
            frozenset(self.dcgm_metrics),
        )
        self.samples_received = 0
        self._count_lock = threading.Lock()

    @property
    def queries(self) -> int:
        return self.transport.queries

    @property
    def bytes_received(self) -> int:
        return self.transport.bytes_received

    @property
    def wire_bytes(self) -> int:
        return self.transport.wire_bytes

    # --- public ------------------------------------------------------------------------------

    def query_for(self, metric: str, window_ms: int, series: dict[str, str] | None = None) -> str:
        """The PromQL of one window of `metric` (promql.raw_samples_query), with this source's selector."""
        return raw_samples_query(
            metric, window_ms, selector=self.selector, pushdown=self.spec.pushdown, series=series
        )

    def screen_query_for(self, metric: str, window_ms: int) -> str:
        """The PromQL of the series of `metric` with some value != 0 in one window (promql.nonzero_screen_query)."""
        return nonzero_screen_query(metric, window_ms, selector=self.selector, pushdown=self.spec.pushdown)

    def fetch_day(self, cluster: str, day: date, lookback_ms: int) -> RawDay:
        """Raw samples with day start − lookback <= ts < day end (R2), plus the DRA objects."""
        start_ms, end_ms = day_bounds_ms(day)
        return self.fetch_window(cluster, start_ms - max(0, int(lookback_ms)), end_ms)

    def fetch_day_parts(self, cluster: str, day: date, lookback_ms: int) -> Iterator[RawDay]:
        """The same rows as `fetch_day` (in another order), one part of `dedupe_bucket_seconds` (an hour by
        default) at a time, the DRA objects last: a pull holds three parts' samples at most, not the day's
        (ingest.pull writes each part as it comes). Replica dedupe looks a few Δ beyond each part (its
        margins are fetched with it) and keeps exactly the samples the whole stream's dedupe keeps, so the
        parts together are the day, also where a scrape's replica samples straddle a part edge."""
        return self._day_parts(cluster, day, lookback_ms, pull_form=False)

    def fetch_day_series_parts(self, cluster: str, day: date, lookback_ms: int) -> Iterator[RawDay]:
        """`fetch_day_parts` in the pull's form (KubeSeriesSource): each part's kube samples as series
        (RawDay.kube_series; the parts are hours in time order, so the pull makes the kube spans part by
        part), its DCGM string columns dictionary-encoded by series."""
        return self._day_parts(cluster, day, lookback_ms, pull_form=True)

    def _day_parts(self, cluster: str, day: date, lookback_ms: int, pull_form: bool) -> Iterator[RawDay]:
        start_ms, end_ms = day_bounds_ms(day)
        start = start_ms - max(0, int(lookback_ms))
        self._reset_counts()
        warned: set[tuple[str, str]] = set()
        parts = list(day_parts(start, end_ms, self.bucket_ms))
        # Pipelined: while the caller writes part i, part i + 1's answers are made into tables and the
        # queries of parts i + 1 and i + 2 are in flight, so the server is not left idle while the client
        # works. At most three parts are held. Two threads fetch (each a part's queries, all of them
        # through the fetch's one pool of max_concurrent_queries threads: the next part's queries wait
        # behind the last ones of the part before, and take each thread that part no longer needs);
        # another makes the tables.
        fetcher = ThreadPoolExecutor(2, thread_name_prefix="gpumeter-prom-fetch")
        maker = ThreadPoolExecutor(1, thread_name_prefix="gpumeter-prom-part")
        fetched: dict[int, Future[Fetched]] = {}
        made: dict[int, Future[tuple[pa.Table, pa.Table | KubeSeries]]] = {}

        failed = threading.Event()
        with self._queries() as queries:
            self._learn_targets(start, end_ms)

            def fetch_part(i: int) -> Fetched:
                if failed.is_set():  # a part before failed: its error is the pull's, nothing more is asked
                    raise PullAborted
                try:
                    return self._fetch_series(*parts[i], queries)
                except BaseException:
                    failed.set()
                    raise

            def fetch(i: int) -> None:
                if i < len(parts):
                    fetched[i] = fetcher.submit(fetch_part, i)

            def make(i: int) -> None:
                if i < len(parts):
                    answers = fetched.pop(i)
                    made[i] = maker.submit(
                        lambda: self._tables(cluster, answers.result(), *parts[i], warned, pull_form)
                    )

            try:
                fetch(0)
                fetch(1)
                make(0)
                for i in range(len(parts)):
                    try:
                        dcgm, kube = made.pop(i).result()
                    except PullAborted as exc:
                        # Stopped by the failure of a part ahead, fetched meanwhile: that failure.
                        raise _cause((f.exception() for f in fetched.values()), exc) from None
                    fetch(i + 2)
                    make(i + 1)
                    if isinstance(kube, KubeSeries):
                        yield RawDay(dcgm, RAW_KUBE_SCHEMA.empty_table(), kube_series=kube)
                    else:
                        yield RawDay(dcgm, kube)
            finally:
                if any(not f.done() for f in (*fetched.values(), *made.values())):
                    # The caller stopped, or a part failed: the parts ahead are not wanted.
                    self.transport.abort()
                maker.shutdown(wait=True, cancel_futures=True)
                fetcher.shutdown(wait=True, cancel_futures=True)
        allocations, devices, snapshot = self._k8s_objects(cluster, start, end_ms)
        yield RawDay(
            RAW_DCGM_SCHEMA.empty_table(), RAW_KUBE_SCHEMA.empty_table(), allocations, devices, snapshot
        )

    def fetch_window(self, cluster: str, start_ms: int, end_ms: int) -> RawDay:
        """Raw samples with start_ms <= ts < end_ms, plus the DRA objects of that window."""
        self._reset_counts()
        with self._queries() as queries:
            self._learn_targets(start_ms, end_ms)
            fetched = self._fetch_series(start_ms, end_ms, queries)
        warned: set[tuple[str, str]] = set()
        dcgm, kube = self._tables(cluster, fetched, start_ms, end_ms, warned, False)
        allocations, devices, snapshot = self._k8s_objects(cluster, start_ms, end_ms)
        return RawDay(dcgm, kube, allocations, devices, snapshot)

    # --- samples -----------------------------------------------------------------------------

    def _reset_counts(self) -> None:
        self.transport.begin_fetch()
        self.transport.reset_counts()
        self.samples_received = 0

    @contextmanager
    def _queries(self) -> Iterator[Queries]:
        """One fetch's pool of `max_concurrent_queries` query threads, each with its own HTTP client, and
        the event that, once set, stops them all (a query failed, or the caller stopped): every window
        and part of a fetch shares them. The auth headers are read again for each fetch, so that a
        rotated token is used."""
        self.transport.load_headers()
        with self.transport.pull() as stop:
            pool = ThreadPoolExecutor(self.spec.max_concurrent_queries, thread_name_prefix="gpumeter-prom")
            try:
                yield Queries(pool, stop)
            finally:
                stop.set()
                pool.shutdown(wait=True, cancel_futures=True)

    def _fetch_series(self, start_ms: int, end_ms: int, queries: Queries) -> Fetched:
        """The answers for [start_ms, end_ms) by series, with the margins the replica dedupe needs.

        Replica dedupe decides a sample from the target's other replicas' scrapes within a few Δ of it
        (docs/prometheus.md, "HA pairs"), so where the window holds replica series, margins on both sides
        are fetched too: the rows of the window are then the whole stored stream's, whatever the window."""
        metrics = [(m, "dcgm") for m in self.dcgm_metrics] + [(m, "kube") for m in self.kube_metrics]
        # R11 reads XID only as "some value != 0": its raw samples are fetched only in windows where an
        # aggregate says a series has one (docs/prometheus.md, "What is pushed down").
        screened = {DCGM_XID} & set(self.dcgm_metrics) if self.spec.pushdown else set()
        series: SeriesByLabels = {}
        self._pull(series, [m for m, _ in metrics], screened, [(start_ms, end_ms)], queries)
        shared = self.replicas.shared_gpus(series.values())
        margin = 0
        while self.replicas.has_replicas(series.values(), shared):
            need = self.replicas.margin_ms(series.values(), shared)
            if need <= margin:
                break
            # The margins carry no screened metric: its samples share the scrapes of the target's other
            # fields (dcgm-exporter stamps a scrape's fields alike), which are what the dedupe reads.
            unscreened = [m for m, _ in metrics if m not in screened]
            self._pull(series, unscreened, set(), margins(start_ms, end_ms, margin, need), queries)
            margin = need
            shared = self.replicas.shared_gpus(series.values())  # the margins may show more streams
        return Fetched(series, shared)

    def _learn_targets(self, start_ms: int, end_ms: int) -> None:
        """The scrape targets' own labels over [start_ms, end_ms), from their `up` series (one query): what
        tells a pod the exporter named from the exporter's own pod, which a Kubernetes-discovered target
        attaches to every series (docs/rules.md R5). Not asked by a pull of no DCGM metric: nothing reads it."""
        if not self.dcgm_metrics:
            return
        answer = self.transport.query(
            up_query(end_ms - start_ms, selector=self.selector), end_ms - 1, "vector"
        )
        self.mapping.learn_targets(item.metric for item in answer)

    def _tables(
        self,
        cluster: str,
        fetched: Fetched,
        start_ms: int,
        end_ms: int,
        warned: set[tuple[str, str]],
        pull_form: bool,
    ) -> tuple[pa.Table, pa.Table | KubeSeries]:
        """The fetched series of [start_ms, end_ms) deduped and made into the DCGM and kube tables; in the
        pull's form (`fetch_day_series_parts`) the kube samples as KubeSeries and the DCGM string columns
        dictionary-encoded, for the staged writer."""
        kinds = {m: "dcgm" for m in self.dcgm_metrics} | {m: "kube" for m in self.kube_metrics}
        series = list(fetched.series.values())
        merged = self.replicas.dedupe(series, start_ms, end_ms, warned, fetched.shared)
        dcgm_series = [s for s in merged if kinds.get(s.labels.get("__name__", "")) == "dcgm"]
        kube_samples = [s for s in merged if kinds.get(s.labels.get("__name__", "")) == "kube"]
        self._warn_foreign_clusters(cluster, merged, warned)
        # A target's own pod is also told by its series whose holder labels were renamed (honorLabels: false):
        # learned as the pull goes, part by part in time order.
        self.mapping.learn_renamed(dcgm_series)
        dcgm = self.mapping.dcgm_table(cluster, dcgm_series, dictionary=pull_form)
        self._warn_unknown_holders(warned)
        kube = (
            self.mapping.kube_series(cluster, kube_samples)
            if pull_form
            else self.mapping.kube_table(cluster, kube_samples)
        )
        return dcgm, kube

    def _pull(
        self,
        series: SeriesByLabels,
        metrics: Sequence[str],
        screened: set[str],
        spans: Sequence[Span],
        queries: Queries,
    ) -> None:
        """Raw samples of `metrics` in the half-open `spans`, each cut into `chunk_seconds` windows, queried
        by the fetch's pool of query threads, added to `series` by label set. Each thread decodes its own
        answer (the others' reads go on meanwhile). The first failure stops the fetch: this pull's queued
        queries are cancelled and every running query ends before its next attempt (PullAborted), so a
        failing server is not asked the rest of the day."""
        tasks = [(metric, w0, w1) for metric in metrics for w0, w1 in chunks(spans, self.chunk_ms)]
        if not tasks:
            return
        stop = queries.stop
        futures = [
            queries.pool.submit(
                self._fetch_screened if metric in screened else self._fetch_window, metric, w0, w1, stop
            )
            for metric, w0, w1 in tasks
        ]
        wait(futures, return_when=FIRST_EXCEPTION)
        if any(f.done() and f.exception() is not None for f in futures):
            stop.set()
            for future in futures:
                future.cancel()
            wait(futures)
            errors = [f.exception() for f in futures if not f.cancelled() and f.exception()]
            raise _cause(errors, errors[0])
        for future in futures:
            for found, ts, values in future.result():
                append_series(series, found.labels, ts, values, found)

    def _fetch_window(
        self,
        metric: str,
        w0: int,
        w1: int,
        stop: threading.Event,
        series: dict[str, str] | None = None,
    ) -> WindowSamples:
        """Raw samples of `metric` (of the series with the labels `series`, if given) in [w0, w1)."""

        def fetch(a: int, b: int) -> WindowSamples:
            if stop.is_set():
                raise PullAborted
            query = self.query_for(metric, b - a, series)
            try:
                received, out = matrix_samples(self.transport.query(query, b), a, b)
            except UnexpectedAnswer as exc:
                raise self.transport.unexpected_answer(query, b, exc) from None
            with self._count_lock:
                self.samples_received += received
            return out

        def refused(a: int, b: int, exc: TooLarge) -> Exception:
            return self.transport.refused_as_too_large(self.query_for(metric, b - a, series), a, b, exc)

        return split_when_too_large(fetch, w0, w1, self.min_chunk_ms, refused)

    def _fetch_screened(self, metric: str, w0: int, w1: int, stop: threading.Event) -> WindowSamples:
        """Raw samples of the series that have a value != 0 in [w0, w1), and nothing else. The screen
        covers at least the half-open window, so it never misses a sample that the raw fetch keeps (R1)."""

        def fetch(a: int, b: int) -> WindowSamples:
            if stop.is_set():
                raise PullAborted
            flagged = self.transport.query(self.screen_query_for(metric, b - a), b - 1, result_type="vector")
            with self._count_lock:
                self.samples_received += len(flagged)
            out = []
            for item in flagged:
                labels = item.metric
                # Matchers also match series with more labels: keep only the flagged series itself.
                wanted = {**labels, "__name__": metric}
                out += [
                    got for got in self._fetch_window(metric, a, b, stop, labels) if got[0].labels == wanted
                ]
            return out

        def refused(a: int, b: int, exc: TooLarge) -> Exception:
            return self.transport.refused_as_too_large(self.screen_query_for(metric, b - a), a, b, exc)

        return split_when_too_large(fetch, w0, w1, self.min_chunk_ms, refused)

    def _warn_foreign_clusters(
        self, cluster: str, series: Iterable[Series], warned: set[tuple[str, str]]
    ) -> None:
        """Series of other clusters in the pull (a selector that lets them in): said once per pull."""
        seen = {name for kind, name in warned if kind == "cluster"}
        others = sorted(self.mapping.foreign_clusters(cluster, series) - seen)
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

    def _warn_unknown_holders(self, warned: set[tuple[str, str]]) -> None:
        """dcgm-exporter targets whose series' pod labels could not be told from the target's own: said once
        per pull and target."""
        new = sorted(self.mapping.unknown_holder_targets - {t for kind, t in warned if kind == "holder"})
        warned.update(("holder", target) for target in new)
        if new:
            log.warning(
                "Prometheus %s: the dcgm-exporter target(s) %s attach their own pod labels and the server holds "
                "no `up` series for them, so a GPU's pod label cannot be told from the exporter's own pod: their "
                "GPUs are metered as held by nobody (never billed to the exporter). Keep `up` in what the "
                "server stores (federate it too), or drop the target's pod labels (docs/deploy.md, "
                '"The exporters as gpumeter reads them exactly"); `gpumeter source check` shows it',
                self.url,
                ", ".join(new),
            )

    # --- Kubernetes objects (DRA) ------------------------------------------------------------

    def _k8s_objects(
        self, cluster: str, start_ms: int, end_ms: int
    ) -> tuple[pa.Table, pa.Table, K8sSnapshot | None]:
        """The DRA objects of the window [start_ms, end_ms) (R5), and the documents they were read from, to
        be kept (None: none read). `claims_file` / `slices_file` are snapshots of unknown time: their objects
        are valid for the whole window. `k8s_snapshots_dir` holds the snapshots the `snapshot_k8s_objects`
        job keeps (gpumeter.ingest.k8s_objects: day folders of time-named files): those of the days the
        window touches and of the day before, each with its time. Without that folder, `kubeconfig` lists the
        API now for the kinds no file gives, read as a snapshot of unknown time (a claim deleted before now is
        not seen)."""
        spec = self.spec
        documents: dict[str, Any] = {}
        sources: dict[str, str] = {}
        snapshots_dir = spec.k8s_snapshots_dir
        try:
            for kind, file in (
                (paths.RESOURCE_CLAIMS, spec.claims_file),
                (paths.RESOURCE_SLICES, spec.slices_file),
            ):
                if file:
                    documents[kind], sources[kind] = load_k8s_json(Path(file)), file
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
        if spec.kubeconfig and kept is None and len(documents) < len(paths.SNAPSHOT_KINDS):
            api = KubeApi(spec.kubeconfig)
            for kind in paths.SNAPSHOT_KINDS:
                if kind not in documents:
                    documents[kind], sources[kind] = api.list(kind), f"{spec.kubeconfig} ({kind})"
        try:
            allocations = (
                parse_resource_claims(
                    documents[paths.RESOURCE_CLAIMS], cluster, sources[paths.RESOURCE_CLAIMS]
                )
                if paths.RESOURCE_CLAIMS in documents
                else RAW_TABLES["raw_dra_allocations"].empty_table()
            )
            devices = (
                parse_resource_slices(
                    documents[paths.RESOURCE_SLICES], cluster, sources[paths.RESOURCE_SLICES]
                )
                if paths.RESOURCE_SLICES in documents
                else RAW_TABLES["raw_dra_devices"].empty_table()
            )
        except K8sObjectError as exc:
            raise SourceError(str(exc)) from exc
        if not documents and kept is None:
            return allocations, devices, None
        timed_files: tuple[Path, ...] = ()
        if kept is not None:
            # The kept snapshots are files already: the pull copies them beside the raw day.
            timed_files = tuple(f.path for f in kept.files if f.taken_ms is not None)
            allocations = pa.concat_tables([allocations, kept.allocations])
            devices = pa.concat_tables([devices, kept.devices])
        return allocations, devices, K8sSnapshot(datetime.now(UTC), documents, timed_files)


__all__ = ["PrometheusRawSource"]
