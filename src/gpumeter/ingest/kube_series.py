"""A day's kube samples handed over as series (the Prometheus pull) rather than as rows, and made into value
spans part by part with arrays (SpanBuilder): the same spans as kube_spans.create_spans makes of the same
samples as rows. gpumeter.ingest.kube_spans says what a span is and stores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpumeter.ingest.schema import RAW_KUBE_SCHEMA, RAW_KUBE_SPANS_SCHEMA

# A kube series' constant columns: (cluster, metric, labels, target) as raw_kube_samples holds them.
SeriesKey = tuple[str, str, str, str | None]


@dataclass(frozen=True)
class KubeSeries:
    """One part of a day's kube samples as the series they came in (the Prometheus pull), rather than as rows:
    each series' key and its samples (timestamps in ms, values). The parts of a day come in time order, each
    of a window that no other part overlaps, so a target's scrapes in one part all come before those of the
    next: the spans of the day are made part by part (SpanBuilder), never from per-sample rows. `rows()`:
    the same samples as raw_kube_samples rows."""

    keys: Sequence[SeriesKey]
    ts: Sequence[np.ndarray]
    values: Sequence[np.ndarray]

    def rows(self) -> pa.Table:
        """raw_kube_samples rows of these samples: what a source hands over where rows are asked for."""
        if not self.keys:
            return RAW_KUBE_SCHEMA.empty_table()
        lengths = [len(t) for t in self.ts]
        index = pa.array(np.repeat(np.arange(len(self.keys), dtype=np.int64), lengths))
        keys = list(zip(*self.keys, strict=True))
        columns = {
            name: pa.array(list(keys[i]), pa.string()).take(index)
            for i, name in enumerate(("cluster", "metric", "labels", "target"))
        }
        columns["ts_ms"] = pa.array(np.concatenate(self.ts), pa.int64())
        columns["value"] = pa.array(np.concatenate(self.values), pa.float64())
        return pa.table(columns).select(RAW_KUBE_SCHEMA.names).cast(RAW_KUBE_SCHEMA)


def _scrape_target(key: SeriesKey) -> tuple[str, str]:
    """(cluster, scrape target) of a series: its target, or the exporter its metric comes from (as
    kube_spans._TARGET reads it)."""
    cluster, metric, _, target = key
    return cluster, target if target is not None else metric.split("_", 1)[0]


def _same_value(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a == b, NaN equal to NaN (as a GROUP BY on the value groups them)."""
    return (a == b) | (np.isnan(a) & np.isnan(b))


class SpanBuilder:
    """The spans (RAW_KUBE_SPANS_SCHEMA) of a day's kube samples handed over as KubeSeries parts in time order,
    made part by part with arrays, with the result of `create_spans` on the same samples as rows: a run of a
    target's consecutive scrapes that shows a (series, value) as many times each is one span; one row per
    scrape of each target. Each part's runs are made against the part's scrapes; runs of the same (series,
    value, copies) that meet across a part's edge (the last scrape of a target in one part, its next in the
    next) are joined at the end. Only the runs and the scrape times are held, not the samples."""

    def __init__(self) -> None:
        self._keys: dict[SeriesKey, int] = {}
        self._targets: dict[tuple[str, str], int] = {}
        self._key_target: list[int] = []
        self._runs: list[tuple[np.ndarray, ...]] = []  # (key, value, copies, ts_ms, last_ms) per part
        self._scrapes: list[np.ndarray] = []  # (target, ts_ms) of each part's scrapes, as _scrape_id
        self._last_scrape: dict[int, int] = {}
        self.samples = 0

    def _key_id(self, key: SeriesKey) -> int:
        found = self._keys.get(key)
        if found is None:
            found = self._keys[key] = len(self._keys)
            target = _scrape_target(key)
            self._key_target.append(self._targets.setdefault(target, len(self._targets)))
        return found

    def add(self, part: KubeSeries) -> None:
        series = [i for i, t in enumerate(part.ts) if len(t)]
        if not series:
            return
        key_ids = np.fromiter((self._key_id(part.keys[i]) for i in series), np.int64, len(series))
        lengths = np.fromiter((len(part.ts[i]) for i in series), np.int64, len(series))
        key = np.repeat(key_ids, lengths)
        ts = np.concatenate([part.ts[i] for i in series]).astype(np.int64, copy=False)
        value = np.concatenate([part.values[i] for i in series]).astype(np.float64, copy=False)
        self.samples += len(ts)
        target = np.asarray(self._key_target, np.int64)[key]
        scrape = _scrape_id(target, ts)
        grid = np.sort(pc.unique(pa.array(scrape)).to_numpy())
        self._check_order(grid)
        self._scrapes.append(grid)
        scrape_no = np.searchsorted(grid, scrape)
        starts = np.zeros(len(ts), bool)
        starts[np.cumsum(lengths)[:-1]] = True
        one_each = len(np.unique(key_ids)) == len(key_ids) and bool(np.all(np.diff(ts)[~starts[1:]] > 0))
        if one_each:  # every series its own key, one sample per scrape, in time order: no copies
            copies = np.ones(len(ts), np.int64)
        else:  # copies: the samples of a (series, value) at one scrape; then in (series, value, copies, time) order
            order = np.lexsort((scrape_no, value, key))
            key, value, ts, scrape_no = key[order], value[order], ts[order], scrape_no[order]
            first = np.ones(len(ts), bool)
            first[1:] = (
                (key[1:] != key[:-1])
                | ~_same_value(value[1:], value[:-1])
                | (scrape_no[1:] != scrape_no[:-1])
            )
            at = np.flatnonzero(first)
            copies = np.diff(np.append(at, len(ts)))
            key, value, ts, scrape_no = key[at], value[at], ts[at], scrape_no[at]
            order = np.lexsort((scrape_no, copies, value, key))
            key, value, ts, scrape_no, copies = (a[order] for a in (key, value, ts, scrape_no, copies))
        self._runs.append(_runs(key, value, copies, ts, ts, scrape_no, scrape_no))

    def _check_order(self, grid: np.ndarray) -> None:
        """A part's scrapes all come after the parts before's (KubeSeries' contract), target by target."""
        targets = grid >> _TS_BITS
        change = targets[1:] != targets[:-1]
        firsts = np.flatnonzero(np.insert(change, 0, True))
        lasts = np.flatnonzero(np.append(change, True))
        for first, last in zip(firsts.tolist(), lasts.tolist(), strict=True):
            target = int(targets[first])
            before = self._last_scrape.get(target)
            if before is not None and int(grid[first]) <= before:
                raise ValueError(
                    "kube series parts out of time order: a target's scrapes overlap a part before"
                )
            self._last_scrape[target] = int(grid[last])

    def table(self) -> pa.Table:
        """The day's spans, in the order KubeSpanStaging.spans_of stores them."""
        if not self._runs:
            return RAW_KUBE_SPANS_SCHEMA.empty_table()
        key, value, copies, ts, last = (np.concatenate(c) for c in zip(*self._runs, strict=True))
        grid = np.concatenate(self._scrapes)  # sorted: parts in time order, targets in id order within each
        grid.sort()
        target = np.asarray(self._key_target, np.int64)[key]
        first_no = np.searchsorted(grid, _scrape_id(target, ts))
        last_no = np.searchsorted(grid, _scrape_id(target, last))
        # Runs that meet across a part's edge: same (series, value, copies), the next scrape of the target.
        order = np.lexsort((first_no, copies, value, key))
        key, value, copies, ts, last, first_no, last_no = (
            a[order] for a in (key, value, copies, ts, last, first_no, last_no)
        )
        key, value, copies, ts, last = _runs(key, value, copies, ts, last, first_no, last_no)
        keys = list(zip(*self._keys, strict=True))
        index = pa.array(key)
        spans = {
            "cluster": pa.array(keys[0], pa.string()).take(index),
            "ts_ms": pa.array(ts, pa.int64()),
            "last_ms": pa.array(last, pa.int64()),
            "metric": pa.array(keys[1], pa.string()).take(index),
            "value": pa.array(value, pa.float64()),
            "labels": pa.array(keys[2], pa.string()).take(index),
            "target": pa.array(keys[3], pa.string()).take(index),
            "copies": pa.array(copies, pa.int32()),
        }
        targets = list(self._targets)
        scrape_target = pa.array(grid >> _TS_BITS)
        scrape_ts = pa.array((grid & _TS_MASK) + _TS_BASE, pa.int64())
        markers = {
            "cluster": pa.array([c for c, _ in targets], pa.string()).take(scrape_target),
            "ts_ms": scrape_ts,
            "last_ms": scrape_ts,
            "metric": pa.nulls(len(grid), pa.string()),
            "value": pa.nulls(len(grid), pa.float64()),
            "labels": pa.nulls(len(grid), pa.string()),
            "target": pa.array([t for _, t in targets], pa.string()).take(scrape_target),
            "copies": pa.nulls(len(grid), pa.int32()),
        }
        table = pa.concat_tables(
            [pa.table(spans, schema=RAW_KUBE_SPANS_SCHEMA), pa.table(markers, schema=RAW_KUBE_SPANS_SCHEMA)]
        )
        return table.sort_by([(name, "ascending") for name in SPAN_ORDER])


# A scrape as one integer: its target's id above _TS_BITS bits of its time since _TS_BASE (2001-09-09):
# times up to 2^40 ms (~34 years) after it.
_TS_BITS = 40
_TS_MASK = (1 << _TS_BITS) - 1
_TS_BASE = 1_000_000_000_000


def _scrape_id(target: np.ndarray, ts: np.ndarray) -> np.ndarray:
    offset = ts - _TS_BASE
    if len(offset) and (int(offset.min()) < 0 or int(offset.max()) > _TS_MASK):
        raise ValueError("kube sample time out of range (2001-09-09 to 2036)")
    return (target << _TS_BITS) | offset


def _runs(
    key: np.ndarray,
    value: np.ndarray,
    copies: np.ndarray,
    ts: np.ndarray,
    last_ms: np.ndarray,
    first_no: np.ndarray,
    last_no: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """Samples or runs (from `ts`, scrape `first_no`, to `last_ms`, scrape `last_no`) in (series, value,
    copies, time) order, joined where one begins at the scrape after the one before ends: (key, value,
    copies, ts_ms, last_ms) of each joined run."""
    starts = np.ones(len(key), bool)
    starts[1:] = (
        (key[1:] != key[:-1])
        | ~_same_value(value[1:], value[:-1])
        | (copies[1:] != copies[:-1])
        | (first_no[1:] != last_no[:-1] + 1)
    )
    at = np.flatnonzero(starts)
    ends = np.append(at[1:], len(key)) - 1
    return key[at], value[at], copies[at], ts[at], last_ms[ends]


# The stored order of spans: total, so that a re-pull stores the same bytes (R15).
SPAN_ORDER = ("ts_ms", "last_ms", "cluster", "target", "metric", "labels", "value", "copies")


__all__ = ["SPAN_ORDER", "KubeSeries", "SeriesKey", "SpanBuilder"]
