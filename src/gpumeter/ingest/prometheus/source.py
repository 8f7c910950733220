"""PrometheusRawSource: the raw samples of a (cluster, day) from any PromQL API, with the DRA objects that
say who held which device. It composes the parts of the package: the windows to ask for (windows.py), the
PromQL of each (promql.py), the transport that asks (transport.py), the fetching of the windows' samples
(fetching.py), the replica dedupe of the answers (windows.py) and their rows (raw_tables.py); the DRA objects
come from files, the kept snapshots or the Kubernetes API (dra_objects.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import date

import pyarrow as pa

from gpumeter.config import PrometheusSource
from gpumeter.ingest.contract import RawDay, day_bounds_ms
from gpumeter.ingest.kube_series import KubeSeries
from gpumeter.ingest.prometheus.dra_objects import dra_objects
from gpumeter.ingest.prometheus.fetching import Fetched, SampleFetching, failure_cause
from gpumeter.ingest.prometheus.raw_tables import Series, SeriesMapping
from gpumeter.ingest.prometheus.transport import PrometheusTransport, PullAborted
from gpumeter.ingest.prometheus.windows import ReplicaDedupe, day_parts
from gpumeter.ingest.schema import (
    DCGM_METRICS,
    KUBE_METRICS,
    RAW_DCGM_SCHEMA,
    RAW_KUBE_SCHEMA,
)

log = logging.getLogger(__name__)


class PrometheusRawSource(SampleFetching):
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

    # --- public (query_for, screen_query_for: SampleFetching) --------------------------------

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
                        raise failure_cause((f.exception() for f in fetched.values()), exc) from None
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
        allocations, devices, snapshot = dra_objects(self.spec, cluster, start, end_ms)
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
        allocations, devices, snapshot = dra_objects(self.spec, cluster, start_ms, end_ms)
        return RawDay(dcgm, kube, allocations, devices, snapshot)

    # --- samples -----------------------------------------------------------------------------
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


__all__ = ["PrometheusRawSource"]
