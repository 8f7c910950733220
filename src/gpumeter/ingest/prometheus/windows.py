"""Which windows the Prometheus source asks for, and which of their samples it keeps (docs/prometheus.md).

- Windows. A pull's span is cut into `chunk_seconds` windows so that one answer stays small on big fleets; a
  window the server refuses as too large (HTTP 422, e.g. `query.max-samples`) is split in two and asked
  again, down to `min_chunk_seconds`. A day is handed over in parts of `dedupe_bucket_seconds`.
- HA pairs (R1: every scrape once). Series identical but for a replica label (`prometheus_replica`,
  `replica`) are one series seen by several scrapers, at timestamps a fraction of Δ apart. The UNION of the
  replicas' scrapes is kept, one sample per scrape, decided per scrape target (`job`, `instance`) for all
  series of the target at once: replicas in name order, every scrape of the first kept, a scrape of a later
  one kept only where no kept scrape of the target lies in [t - Δ/2, t + Δ/2) (it fills a gap). So when both
  replicas have gaps (rolling restarts) nothing is lost, and the metrics, MIG instances and vgpu copies of
  one GPU at one scrape always come from one scraper's scrape. The rule looks at most a few Δ away, so a
  window is deduped exactly by fetching a margin of a few Δ around it: the parts of a day yield exactly the
  day's rows, and a day exactly the whole stream's.
- One GPU scraped by two targets (dcgm-exporter in two scrape jobs, say), or reported by one target both with
  and without a replica label (a querier that deduplicates some stores only): the same rule, per GPU, with
  its streams (target, replica) taken like replicas. Every scrape of the first stream in name order is kept,
  a later stream's only where it fills a gap. A GPU whose exporter moved to a new target (a restarted pod's
  new `instance`) keeps both targets' scrapes, which do not overlap.
"""

from __future__ import annotations

import itertools
import logging
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

import numpy as np

from gpumeter.ingest.contract import SLOW_SCRAPE_INTERVALS
from gpumeter.ingest.prometheus.raw_tables import (
    DCGM_LABEL_COLUMNS,
    Series,
    SeriesByLabels,
    append_series,
)
from gpumeter.ingest.prometheus.targets import scrape_target_labels
from gpumeter.ingest.prometheus.transport import TooLarge

log = logging.getLogger(__name__)

Span = tuple[int, int]  # [start_ms, end_ms)
T = TypeVar("T")


def chunks(spans: Sequence[Span], chunk_ms: int) -> list[Span]:
    """The half-open spans cut into windows of at most `chunk_ms`, each span from its own start."""
    return [(w, min(w + chunk_ms, s1)) for s0, s1 in spans if s0 < s1 for w in range(s0, s1, chunk_ms)]


def day_parts(start_ms: int, end_ms: int, part_ms: int) -> list[Span]:
    """[start_ms, end_ms) cut at every multiple of `part_ms`: the parts keep to the clock whatever the
    lookback (only the first may be shorter)."""
    inner = range(start_ms - start_ms % part_ms + part_ms, end_ms, part_ms)
    return list(itertools.pairwise(sorted({start_ms, end_ms, *inner})))


def margins(start_ms: int, end_ms: int, fetched_ms: int, needed_ms: int) -> list[Span]:
    """What is still to fetch on both sides of [start_ms, end_ms) so that `needed_ms` around it are fetched,
    when `fetched_ms` around it are."""
    return [(start_ms - needed_ms, start_ms - fetched_ms), (end_ms + fetched_ms, end_ms + needed_ms)]


def split_when_too_large(
    fetch: Callable[[int, int], list[T]],
    w0: int,
    w1: int,
    min_ms: int,
    refused: Callable[[int, int, TooLarge], Exception],
) -> list[T]:
    """fetch(w0, w1); where the server refuses the window as too large, its two halves fetched alike, down to
    windows of `min_ms`, which raise refused(w0, w1, the refusal)."""
    try:
        return fetch(w0, w1)
    except TooLarge as exc:
        if w1 - w0 <= min_ms:
            raise refused(w0, w1, exc) from None
        mid = w0 + (w1 - w0) // 2
        return split_when_too_large(fetch, w0, mid, min_ms, refused) + split_when_too_large(
            fetch, mid, w1, min_ms, refused
        )


Target = tuple[str, ...]
Replica = tuple[str, ...]
Gpu = tuple[str, ...]  # (cluster, host, UUID)
# What the dedupe decides together: an HA target's series (0, its target), or a shared GPU's series (1, the
# GPU: ReplicaDedupe.shared_gpus).
Group = tuple[int, tuple[str, ...]]
# The GPUs seen through more than one stream of scrapes, with their streams (ReplicaDedupe.shared_gpus).
SharedGpus = dict[Gpu, set[tuple[Target, Replica]]]
_HOST_LABELS = dict(DCGM_LABEL_COLUMNS)["hostname"]
_UUID_LABELS = dict(DCGM_LABEL_COLUMNS)["uuid"]


@dataclass(frozen=True)
class ReplicaDedupe:
    """The union of HA replicas' scrapes, one sample per scrape (R1; see the module docstring).

    `scrape_interval_ms` is the cluster's Δ (`Config.scrape_interval_of`): two replicas' samples of one target
    less than Δ/2 apart are one scrape. `url` names the server in warnings. `gpu_metrics` are the DCGM
    metrics: a GPU whose series of them come from several targets, or from one both with and without a
    replica label, is deduped across those streams too (shared_gpus)."""

    replica_labels: tuple[str, ...]
    cluster_label: str
    scrape_interval_ms: int
    url: str
    gpu_metrics: frozenset[str] = frozenset()
    # Label set (a Series' key) -> its replica, and its GPU and target: each label set's are worked out once
    # per source.
    _replicas: dict[Hashable, Replica | None] = field(default_factory=dict, compare=False, repr=False)
    _gpu_targets: dict[Hashable, tuple[Gpu, Target] | None] = field(
        default_factory=dict, compare=False, repr=False
    )

    def replica_of(self, labels: dict[str, str]) -> Replica | None:
        if labels.keys().isdisjoint(self.replica_labels):
            return None
        values = tuple(labels.get(name, "") for name in self.replica_labels)
        return values if any(values) else None

    def _replica(self, series: Series) -> Replica | None:
        """replica_of a series' labels, worked out once per label set (its key)."""
        try:
            return self._replicas[series.key]
        except KeyError:
            replica = self._replicas[series.key] = self.replica_of(series.labels)
            return replica

    def _gpu_target(self, series: Series) -> tuple[Gpu, Target] | None:
        """The GPU a series of a DCGM metric reports on (cluster, host, UUID) and its scrape target; None
        for any other series, or one with no UUID. Worked out once per label set."""
        try:
            return self._gpu_targets[series.key]
        except KeyError:
            labels = series.labels
            found = None
            uuid = next((labels[n] for n in _UUID_LABELS if labels.get(n)), None)
            if uuid is not None and labels.get("__name__") in self.gpu_metrics:
                host = next((labels[n] for n in _HOST_LABELS if labels.get(n)), "")
                found = ((labels.get(self.cluster_label, ""), host, uuid), self.target_of(labels))
            self._gpu_targets[series.key] = found
            return found

    def shared_gpus(self, series: Iterable[Series]) -> SharedGpus:
        """The GPUs seen through more than one stream of scrapes that HA dedupe alone would not merge, with
        their streams (target, replica; () for a series without a replica label): from more than one
        target, or from one target both with and without a replica label (a querier that deduplicates some
        stores and not others)."""
        if not self.gpu_metrics:
            return {}
        streams: dict[Gpu, set[tuple[Target, Replica]]] = defaultdict(set)
        for s in series:
            found = self._gpu_target(s)
            if found is not None:
                replica = self._replica(s) if self.replica_labels else None
                streams[found[0]].add((found[1], replica or ()))
        return {
            gpu: seen
            for gpu, seen in streams.items()
            if len({t for t, _ in seen}) > 1 or len({bool(r) for _, r in seen}) > 1
        }

    def _group(self, series: Series, shared: SharedGpus) -> tuple[Group, Replica] | None:
        """What a series is deduped with, and as which replica; None for a series that is not deduped. A
        shared GPU (shared_gpus) is one group whose replicas are its streams: its target (instance, job), then
        its replica labels' values, in name order (a series without a replica label first)."""
        replica = self._replica(series) if self.replica_labels else None
        if shared:
            found = self._gpu_target(series)
            if found is not None and found[0] in shared:
                return (1, found[0]), (*found[1][1:], *(replica or ()))
        if replica is None:
            return None
        return (0, self.target_of(series.labels)), replica

    def has_replicas(self, series: Iterable[Series], shared: SharedGpus) -> bool:
        """Whether any series is deduped with others (HA replicas, or a shared GPU's streams: `shared`, the
        series' shared_gpus)."""
        if self.replica_labels and any(self._replica(s) for s in series):
            return True
        return bool(shared)

    def target_of(self, labels: dict[str, str]) -> Target:
        """The scrape target of a series: (cluster, job, instance). A series without either (federated, or
        backfilled without them) stands for its node's dcgm-exporter when it names a host, else for the
        exporter its metric comes from, named by the metric's namespace (`kube`, `kueue`, `node`: its name up
        to the first `_`), as the accounting reads a null target (schema.RAW_KUBE_SCHEMA)."""
        job, instance = scrape_target_labels(labels)
        target = (labels.get(self.cluster_label, ""), instance, job)
        if any(target[1:]):
            return target
        host = labels.get("Hostname") or labels.get("hostname")
        if host:
            return (target[0], "", "", f"host={host}")
        namespace = labels.get("__name__", "").split("_", 1)[0]
        return (target[0], "", "", f"exporter={namespace}")

    def _replicas_per_group(self, series: Iterable[Series], shared: SharedGpus) -> dict[Group, set[Replica]]:
        out: dict[Group, set[Replica]] = defaultdict(set)
        for s in series:
            found = self._group(s, shared)
            if found is not None:
                out[found[0]].add(found[1])
        return out

    def margin_ms(self, series: Iterable[Series], shared: SharedGpus) -> int:
        """How far beyond a window the dedupe of its samples looks: the n-th replica of a group (0-based)
        is decided from the kept scrapes within Δ/2 of it, which were decided from within Δ/2 of them...:
        n × Δ/2. At least Δ (two or three replicas)."""
        most = max((len(r) for r in self._replicas_per_group(series, shared).values()), default=1)
        return max(self.scrape_interval_ms, (most - 1) * (self.scrape_interval_ms // 2))

    def dedupe(
        self,
        series: list[Series],
        start_ms: int,
        end_ms: int,
        warned: set[tuple[str, str]],
        shared: SharedGpus,
    ) -> list[Series]:
        """The samples with start_ms <= ts < end_ms of the union of the replicas' scrapes (R1), one sample
        per scrape, decided per scrape target (docs/prometheus.md, "HA pairs"), one array per series:

        - a target's scrapes by replica r are the timestamps of r's series of that target (every series of
          a scrape carries the scrape's timestamp);
        - replicas are taken in name order; every scrape of the first is kept; a scrape of a later replica
          at t is kept only where no scrape kept so far lies in [t - Δ/2, t + Δ/2) (it fills a gap);
        - a series' sample is kept where its replica's scrape at that timestamp is kept, so every series
          of a target has the kept scrapes' timestamps, each from one replica's complete scrape.

        `series` holds one entry per label set (SeriesByLabels' values). A series without a replica label is
        not deduped. `series` may reach beyond the window (its
        margins): they inform the decision and are dropped after it. `warned` holds what this pull has
        warned about already; `shared` is the series' shared_gpus."""

        def window(ts: np.ndarray) -> np.ndarray:
            return (ts >= start_ms) & (ts < end_ms)

        out: SeriesByLabels = {}

        def add(labels: dict[str, str], ts: np.ndarray, values: np.ndarray) -> None:
            if len(ts):
                append_series(out, labels, ts, values)

        by_group: dict[Group, dict[Replica, list[Series]]] = defaultdict(lambda: defaultdict(list))
        single: list[Series] = []  # the series deduped with no other, in the window
        for s in series:
            found = self._group(s, shared)
            if found is None:
                single.append(Series(s.labels, [_joined(s.ts)], [_joined(s.values)], s.key))
            else:
                by_group[found[0]][found[1]].append(s)
        if single and not window(np.concatenate([s.ts[0] for s in single])).all():  # margins: cut them off
            cut = []
            for s in single:
                keep = window(s.ts[0])
                if keep.any():
                    cut.append(Series(s.labels, [s.ts[0][keep]], [s.values[0][keep]], s.key))
            single = cut
        if not by_group:  # `series` has one entry per label set: nothing to merge
            return single
        for s in single:
            add(s.labels, s.ts[0], s.values[0])
        half = self.scrape_interval_ms // 2
        overlapping: set[Gpu] = set()  # shared GPUs with a scrape seen twice
        for (kind, key), replicas in sorted(by_group.items()):
            kept = np.empty(0, np.int64)  # the group's kept scrapes so far, sorted
            for replica in sorted(replicas):
                members = [(s, _joined(s.ts), _joined(s.values)) for s in replicas[replica]]
                scrapes = np.unique(np.concatenate([ts for _, ts, _ in members]))
                if len(replicas) > 1:
                    self._warn_interval(*self._stream(kind, key, replica, members[0][0]), scrapes, warned)
                if len(kept):
                    # A kept scrape k covers [k - Δ/2, k + Δ/2): k in [t - Δ/2, t + Δ/2) covers t.
                    lo = np.searchsorted(kept, scrapes - half, side="left")
                    hi = np.searchsorted(kept, scrapes + half, side="left")
                    if kind == 1 and (lo != hi).any():
                        overlapping.add(key)
                    scrapes = scrapes[lo == hi]
                kept = np.union1d(kept, scrapes)
                for s, ts, values in members:
                    at = np.searchsorted(scrapes, ts)
                    keep = (at < len(scrapes)) & window(ts)
                    keep[keep] = scrapes[at[keep]] == ts[keep]
                    labels = {k: v for k, v in s.labels.items() if k not in self.replica_labels}
                    add(labels, ts[keep], values[keep])
        if overlapping:
            self._warn_shared(overlapping, shared, (start_ms, end_ms), warned)
        return [Series(s.labels, [_joined(s.ts)], [_joined(s.values)], s.key) for s in out.values()]

    def _stream(
        self, kind: int, key: tuple[str, ...], replica: Replica, member: Series
    ) -> tuple[Target, Replica]:
        """The stream of scrapes a group's replica stands for: an HA target's replica, or a shared GPU's stream
        (its target and replica labels, of any one of its series)."""
        if kind == 0:
            return key, replica
        found = self._gpu_target(member)
        assert found is not None  # a shared GPU's series are those _gpu_target finds (_group)
        return found[1], self._replica(member) or ()

    def _warn_shared(
        self,
        gpus: set[Gpu],
        shared: SharedGpus,
        span: Span,
        warned: set[tuple[str, str]],
    ) -> None:
        """GPUs seen through two streams of scrapes at once (shared_gpus): a scrape or query configuration
        that would bill them twice. Said once per pull, with one of them as the example."""
        if ("shared", "") in warned:
            return
        warned.add(("shared", ""))
        example = min(gpus)
        _cluster, host, uuid = example

        streams = ", ".join(sorted(_stream_name(t, r) for t, r in shared[example]))
        start, end = (datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M") for ms in span)
        log.warning(
            "Prometheus %s: %d GPU(s) are reported more than once at the same time between %s and %s UTC, "
            "by two scrape targets or with and without a replica label (e.g. %s on %s: %s); each scrape is "
            "counted once, the first one's where both have it. Scrape each dcgm-exporter in one job, and "
            "query through one deduplicating querier.",
            self.url,
            len(gpus),
            start,
            end,
            uuid,
            host or "an unnamed node",
            streams,
        )

    def _warn_interval(
        self, target: Target, replica: Replica, scrapes: np.ndarray, warned: set[tuple[str, str]]
    ) -> None:
        """A stream scraped much less often than Δ (an HA target's replica, a shared GPU's target): two
        streams' samples of one scrape can then be more than Δ/2 apart and would count as two scrapes. Said
        once per pull and target."""
        if len(scrapes) < 3:
            return
        interval = float(np.median(np.diff(scrapes)))
        name = _target_name(target)
        if interval <= SLOW_SCRAPE_INTERVALS * self.scrape_interval_ms or ("interval", name) in warned:
            return
        warned.add(("interval", name))
        log.warning(
            "Prometheus %s: target %s is scraped every %g s, but scrape_interval_seconds is %g: "
            "two streams' samples of one scrape (two replicas, or two targets of one GPU) may then lie more "
            "than half of scrape_interval_seconds apart and count twice; set scrape_interval_seconds (the "
            "cluster's own, or the pool's) to the scrape interval",
            self.url,
            _stream_name(target, replica),
            interval / 1000,
            self.scrape_interval_ms / 1000,
        )


def _stream_name(target: Target, replica: Replica) -> str:
    """A stream of scrapes as warnings name it: its target, and its replica labels' values."""
    labels = ",".join(v for v in replica if v)
    return f"{_target_name(target)} ({'replica ' + labels if labels else 'no replica label'})"


def _target_name(target: Target) -> str:
    """A target (ReplicaDedupe.target_of) as warnings name it: `<job>/<instance>`, as the kube table's `target`
    column writes it (SeriesMapping.kube_target), else what stands for it (`host=...`, `exporter=...`)."""
    _cluster, instance, job, *stand_in = target
    return f"{job}/{instance}" if job or instance else stand_in[0]


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    """One array of a series' gathered arrays (no copy where there is one)."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


__all__ = ["ReplicaDedupe", "SharedGpus", "Span", "chunks", "day_parts", "margins", "split_when_too_large"]
