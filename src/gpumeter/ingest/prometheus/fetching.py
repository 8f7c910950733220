"""The fetching half of the Prometheus source (PrometheusRawSource in source.py): the raw samples of the
half-open windows of a span, asked by one fetch's pool of query threads, each window cut where the server
says it is too large (windows.py), XID screened by an aggregate where the push-down is on (promql.py), with the
margins the replica dedupe needs; and the scrape targets' `up` series that tell a holder from the exporter's
pod (raw_tables.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np

from gpumeter.config import PrometheusSource
from gpumeter.ingest.prometheus.answers import LabelSet, UnexpectedAnswer, matrix_samples
from gpumeter.ingest.prometheus.promql import nonzero_screen_query, raw_samples_query, up_query
from gpumeter.ingest.prometheus.raw_tables import SeriesByLabels, SeriesMapping, append_series
from gpumeter.ingest.prometheus.transport import PrometheusTransport, PullAborted, TooLarge
from gpumeter.ingest.prometheus.windows import (
    ReplicaDedupe,
    SharedGpus,
    Span,
    chunks,
    margins,
    split_when_too_large,
)
from gpumeter.ingest.schema import DCGM_XID

# The samples of one window: (a series' label set, its timestamps in ms, its values), per series answered.
WindowSamples = list[tuple[LabelSet, np.ndarray, np.ndarray]]


class Queries(NamedTuple):
    """A fetch's query threads and the event that stops them (SampleFetching._queries)."""

    pool: ThreadPoolExecutor
    stop: threading.Event


class Fetched(NamedTuple):
    """A window's answers by series, with their margins, and the GPUs seen through more than one stream of
    scrapes among them (ReplicaDedupe.shared_gpus): worked out once per window, for the margins and the
    dedupe both."""

    series: SeriesByLabels
    shared: SharedGpus


def failure_cause(errors: Iterable[BaseException | None], otherwise: BaseException) -> BaseException:
    """The failure itself among `errors`, not a query or part that stopped because of it (PullAborted)."""
    return next((e for e in errors if e is not None and not isinstance(e, PullAborted)), otherwise)


class SampleFetching:
    """What PrometheusRawSource fetches with: the queries of a window, the fetch's pool of query threads and
    the samples they bring. A base of PrometheusRawSource, whose __init__ sets the attributes below."""

    spec: PrometheusSource
    transport: PrometheusTransport
    mapping: SeriesMapping
    replicas: ReplicaDedupe
    selector: str
    chunk_ms: int
    min_chunk_ms: int
    dcgm_metrics: tuple[str, ...]
    kube_metrics: tuple[str, ...]
    samples_received: int
    _count_lock: threading.Lock

    def query_for(self, metric: str, window_ms: int, series: dict[str, str] | None = None) -> str:
        """The PromQL of one window of `metric` (promql.raw_samples_query), with this source's selector."""
        return raw_samples_query(
            metric, window_ms, selector=self.selector, pushdown=self.spec.pushdown, series=series
        )

    def screen_query_for(self, metric: str, window_ms: int) -> str:
        """The PromQL of the series of `metric` with some value != 0 in one window (promql.nonzero_screen_query)."""
        return nonzero_screen_query(metric, window_ms, selector=self.selector, pushdown=self.spec.pushdown)

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
            raise failure_cause(errors, errors[0])
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


__all__ = ["Fetched", "Queries", "SampleFetching", "WindowSamples", "failure_cause"]
