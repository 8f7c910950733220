"""The series of a pull as raw rows: each series' samples gathered by label set, and the series as the raw
DCGM and kube tables (gpumeter/ingest/schema.py), their labels normalized to the tables' columns
(docs/telemetry.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpumeter.ingest.kube_series import KubeSeries
from gpumeter.ingest.prometheus.targets import (
    HOLDER_LABELS,
    KUBERNETES_TARGET_MARKS,
    RENAMED_PREFIX,
    TARGET_POD_LABELS,
    HolderReading,
    ScrapeTargets,
    scrape_target_labels,
)
from gpumeter.ingest.row_order import DCGM_ROW_ORDER, lexicographic_order
from gpumeter.ingest.schema import KUBE_OBJECT_LABELS, RAW_DCGM_SCHEMA, RAW_KUBE_SCHEMA, dcgm_series_key

# raw_dcgm_samples column -> label names that carry it, most preferred first (docs/telemetry.md). The holder's
# columns (namespace, pod, container) are read by ScrapeTargets.holder, which tells the exporter's pod labels
# from the scrape target's: HOLDER_LABELS lists their spellings.
DCGM_LABEL_COLUMNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("hostname", ("Hostname", "hostname")),
    ("uuid", ("UUID", "uuid")),
    ("gpu", ("gpu",)),
    ("model_name", ("modelName",)),
    ("gpu_i_id", ("GPU_I_ID",)),
    ("gpu_i_profile", ("GPU_I_PROFILE",)),
    *HOLDER_LABELS,
    ("vgpu", ("vgpu",)),
    ("dra_claim_name", ("dra_claim_name",)),
    ("dra_claim_namespace", ("dra_claim_namespace",)),
    ("dra_driver_name", ("dra_driver_name",)),
    ("dra_pool_name", ("dra_pool_name",)),
    ("dra_device_name", ("dra_device_name",)),
)
# Labels that Prometheus adds and that say where a sample was scraped, not what it describes.
TARGET_LABELS = ("instance", "job")


@dataclass
class Series:
    """The samples of one series gathered so far, as arrays in the order they came. `key` stands for its
    label set: the LabelSet it was answered with, or its labels' sorted items."""

    labels: dict[str, str]
    ts: list[np.ndarray]
    values: list[np.ndarray]
    key: Hashable


SeriesByLabels = dict[Hashable, Series]


def append_series(
    into: SeriesByLabels,
    labels: dict[str, str],
    ts: np.ndarray,
    values: np.ndarray,
    key: Hashable | None = None,
) -> None:
    """Samples of one series added to what is already gathered for it: by `key` (the LabelSet it was
    answered with: one object per label set of a source), else by its labels' sorted items."""
    if key is None:
        key = tuple(sorted(labels.items()))
    entry = into.get(key)
    if entry is None:
        into[key] = entry = Series(labels, [], [], key)
    entry.ts.append(ts)
    entry.values.append(values)


def _sorted_rows(
    series: list[Series], keys: pa.Table, major: str | None = None
) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """Every series' samples end to end, in the order of a stable sort by (ts_ms, the series' `keys`
    columns), with each row's series index (to repeat its labels); with `major` (the first of `keys`), by
    (major, ts_ms, the other keys). The same order as sorting the rows so in Arrow, but the strings are
    compared once per series, not once per sample: a series' rank is its place in a stable sort of `keys`
    (ties by series order, as the rows' own tie order), and the rows are sorted by (ts_ms, rank), or by
    (major's rank, ts_ms, rank), as integers."""
    ts = np.concatenate([s.ts[0] for s in series])
    values = np.concatenate([s.values[0] for s in series])
    lengths = [len(s.ts[0]) for s in series]
    by_keys = keys.sort_by([(name, "ascending") for name in keys.column_names]).column("series").to_numpy()
    rank = np.empty(len(series), np.int64)
    rank[by_keys] = np.arange(len(series), dtype=np.int64)
    index = np.repeat(np.arange(len(series), dtype=np.int32), lengths)
    by_time = [ts - (int(ts.min()) if len(ts) else 0), rank[index]]
    if major is None:
        order = lexicographic_order(by_time)
    else:  # the major column's dense rank: it steps where the sorted keys' major value changes
        codes = pc.dictionary_encode(keys.column(major)).combine_chunks().indices.fill_null(-1).to_numpy()
        in_order = codes[by_keys]
        lead = np.empty(len(series), np.int64)
        lead[by_keys] = np.cumsum(np.r_[False, in_order[1:] != in_order[:-1]])
        order = lexicographic_order([lead[index], *by_time])
    return ts[order], values[order], pa.array(index[order])


def _column(per_series: list[str | None], index: pa.Array) -> pa.Array:
    """A per-series value repeated for each of its rows; a value shared by all series (often: the cluster,
    the model, a null MIG id) without a gather."""
    first = per_series[0]
    if all(v == first for v in per_series):
        if first is None:
            return pa.nulls(len(index), pa.string())
        return pa.repeat(pa.scalar(first, pa.string()), len(index))
    return pa.array(per_series, pa.string()).take(index)


def _dictionary_column(per_series: list[str | None], index: pa.Array) -> pa.DictionaryArray:
    """A per-series value for each of its rows, as indices into the distinct values (nulls as null indices)."""
    encoded = pa.array(per_series, pa.string()).dictionary_encode()
    return pa.DictionaryArray.from_arrays(encoded.indices.take(index), encoded.dictionary)


# raw_dcgm_samples with its string columns dictionary-encoded (dcgm_table(dictionary=True)).
RAW_DCGM_DICTIONARY_SCHEMA = pa.schema(
    [
        pa.field(f.name, pa.dictionary(pa.int32(), pa.string()) if f.type == pa.string() else f.type)
        for f in RAW_DCGM_SCHEMA
    ]
)


def _first(labels: dict[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return None


@dataclass(frozen=True)
class SeriesMapping:
    """How one source's series become raw rows: `cluster_label` names the cluster (a series without it is of
    the configured cluster), `replica_labels` say which HA replica stored it and are not the series' own."""

    cluster_label: str
    replica_labels: tuple[str, ...]
    # Label set -> the series' constant columns: each series' labels are converted once per source.
    _rows: dict[tuple[Any, ...], tuple[Any, ...]] = field(default_factory=dict, compare=False, repr=False)
    # The scrape targets' own pods (learn_targets): what tells a holder from the exporter's pod.
    targets: ScrapeTargets = field(init=False, compare=False, repr=False)
    # The targets whose DCGM series carried pod labels that could not be told from the target's.
    unknown_holder_targets: set[str] = field(default_factory=set, compare=False, repr=False)
    # The label sets learn_renamed has read.
    _learned_from: set[Hashable] = field(default_factory=set, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", ScrapeTargets(self.cluster_label))

    def learn_targets(self, up_labels: Iterable[dict[str, str]]) -> None:
        """The scrape targets of a pull, from their `up` series' labels. Rows worked out before are worked out
        again: what a label set's pod labels mean may change."""
        targets = ScrapeTargets(self.cluster_label)
        targets.learn_up(up_labels)
        object.__setattr__(self, "targets", targets)
        object.__setattr__(self, "_learned_from", set())
        self._rows.clear()
        self.unknown_holder_targets.clear()

    def learn_renamed(self, series: Iterable[Series]) -> None:
        """The targets' own pods that the pull's DCGM series tell by their renamed (or old) holder labels, learned
        from each label set once; the rows worked out before are worked out again where a pod was learned."""
        seen: set[Hashable] = self._learned_from
        new = [s for s in series if s.key not in seen]
        seen.update(s.key for s in new)
        if self.targets.learn_renamed(s.labels for s in new):
            self._rows.clear()

    def cluster_of(self, labels: dict[str, str], configured: str) -> str:
        return labels.get(self.cluster_label) or configured

    def foreign_clusters(self, cluster: str, series: Iterable[Series]) -> set[str]:
        """The clusters other than `cluster` that series are labelled with (a selector that lets them in)."""
        return {v for s in series if (v := s.labels.get(self.cluster_label)) and v != cluster}

    def dcgm_table(self, cluster: str, series: list[Series], dictionary: bool = False) -> pa.Table:
        """raw_dcgm_samples of merged series (one array of samples each), in the raw zone's GPU order
        (gpumeter.ingest.row_order.DCGM_ROW_ORDER: uuid, ts_ms, series_key, metric). With `dictionary`, each
        string column is dictionary-encoded by series (RAW_DCGM_DICTIONARY_SCHEMA): no string is copied per
        sample, and a Parquet writer takes the dictionary as it is."""
        if not series:
            return (RAW_DCGM_DICTIONARY_SCHEMA if dictionary else RAW_DCGM_SCHEMA).empty_table()
        rows = [self._dcgm_row(s, cluster) for s in series]
        per_series = {"cluster": [r[0] or cluster for r in rows], "metric": [r[1] for r in rows]}
        for i, (column, _) in enumerate(DCGM_LABEL_COLUMNS, start=2):
            per_series[column] = [r[i] for r in rows]
        series_keys = pa.array([r[-2] for r in rows], pa.uint64())
        unverified = pa.array([r[-1] for r in rows], pa.bool_())
        by_series = {"series_key": series_keys} | {
            name: pa.array(values, pa.string()) for name, values in per_series.items()
        }
        major, _time, *minor = DCGM_ROW_ORDER
        keys = pa.table(
            {name: by_series[name] for name in (major, *minor)}
            | {"series": pa.array(np.arange(len(series), dtype=np.int64))}
        )
        ts, values, index = _sorted_rows(series, keys, major=major)
        column = _dictionary_column if dictionary else _column
        columns = {name: column(per_series[name], index) for name in per_series}
        columns["series_key"] = series_keys.take(index)
        columns["holder_unverified"] = (
            pa.nulls(len(index), pa.bool_())
            if unverified.null_count == len(unverified)
            else unverified.take(index)
        )
        columns["ts_ms"] = pa.array(ts, pa.int64())
        columns["value"] = pa.array(values, pa.float64())
        schema = RAW_DCGM_DICTIONARY_SCHEMA if dictionary else RAW_DCGM_SCHEMA
        return pa.table(columns).select(schema.names).cast(schema)

    def _dcgm_row(self, series: Series, cluster: str) -> tuple[Any, ...]:
        """A series' constant columns (its cluster label, name, and DCGM_LABEL_COLUMNS), then its stored key
        (dcgm_series_key) and last whether its holder is unverified (true, else null), worked out once per label set, pull source and configured cluster: the same
        series comes back in every window and part."""

        def make() -> tuple[Any, ...]:
            row = {column: _first(series.labels, names) for column, names in DCGM_LABEL_COLUMNS}
            holder, reading = self.targets.holder(series.labels)
            row.update(zip(TARGET_POD_LABELS, holder, strict=True))
            unverified = reading is HolderReading.UNKNOWN
            if unverified:
                self.unknown_holder_targets.add(self.kube_target(series.labels) or "?")
            label = series.labels.get(self.cluster_label) or None
            key = dcgm_series_key(row | {"cluster": label or cluster})
            return (label, series.labels["__name__"], *row.values(), key, True if unverified else None)

        return self._constant_row(("dcgm", cluster), series, make)

    def _constant_row(
        self, table: Hashable, series: Series, make: Callable[[], tuple[Any, ...]]
    ) -> tuple[Any, ...]:
        """`make()`'s row of a series' constant columns for `table`, kept per label set."""
        key = (table, series.key)
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = make()
        return row

    def kube_labels(self, labels: dict[str, str]) -> str:
        """The `labels` column: the series' own labels as compact sorted JSON, without its name, cluster,
        replica and scrape target, the exporter's own `exported_` labels under their own names. The pod labels a
        Kubernetes-discovered target attaches (the exporter's own pod) are dropped from a family that carries
        none of its own (a node's series), so that a series is the same whichever exporter pod showed it."""
        own = KUBE_OBJECT_LABELS.get(labels.get("__name__", ""), ())
        drop = {
            "__name__",
            self.cluster_label,
            *self.replica_labels,
            *TARGET_LABELS,
            *KUBERNETES_TARGET_MARKS,
            *(name for name in TARGET_POD_LABELS if name not in own),
        }
        kept = {
            k: v for k, v in labels.items() if k not in drop and not k.startswith(RENAMED_PREFIX) and v != ""
        }
        for key, value in labels.items():  # the exporter's own label, renamed by a conflicting target label
            if key.startswith(RENAMED_PREFIX) and value != "" and key[len(RENAMED_PREFIX) :] not in drop:
                kept[key[len(RENAMED_PREFIX) :]] = value
        return json.dumps(kept, separators=(",", ":"), sort_keys=True)

    @staticmethod
    def kube_target(labels: dict[str, str]) -> str | None:
        """`<job>/<instance>` of the scrape (schema.RAW_KUBE_SCHEMA), null when the series has neither."""
        job, instance = scrape_target_labels(labels)
        return f"{job}/{instance}" if job or instance else None

    def kube_table(self, cluster: str, series: list[Series]) -> pa.Table:
        """raw_kube_samples of merged series (one array of samples each), sorted by (ts_ms, metric, labels,
        target)."""
        if not series:
            return RAW_KUBE_SCHEMA.empty_table()
        rows = [self._kube_row(s) for s in series]
        per_series = {
            "cluster": [r[0] or cluster for r in rows],
            "metric": [r[1] for r in rows],
            "labels": [r[2] for r in rows],
            "target": [r[3] for r in rows],
        }
        keys = pa.table(
            {
                **{k: pa.array(per_series[k], pa.string()) for k in ("metric", "labels", "target")},
                "series": pa.array(np.arange(len(series), dtype=np.int64)),
            }
        )
        ts, values, index = _sorted_rows(series, keys)
        table = pa.table(
            {
                "cluster": _column(per_series["cluster"], index),
                "ts_ms": pa.array(ts, pa.int64()),
                "metric": _column(per_series["metric"], index),
                "value": pa.array(values, pa.float64()),
                "labels": _column(per_series["labels"], index),
                "target": _column(per_series["target"], index),
            }
        )
        return table.cast(RAW_KUBE_SCHEMA)

    def kube_series(self, cluster: str, series: list[Series]) -> KubeSeries:
        """The kube samples of merged series (one array of samples each) as series: each series' key
        (cluster, metric, `labels`, `target`) and its samples, without building rows."""
        keys = []
        for s in series:
            row = self._kube_row(s)
            keys.append((row[0] or cluster, row[1], row[2], row[3]))
        return KubeSeries(keys, [s.ts[0] for s in series], [s.values[0] for s in series])

    def _kube_row(self, series: Series) -> tuple[str | None, ...]:
        """A series' constant columns (cluster label, name, `labels` JSON, `target`), once per label set."""
        return self._constant_row(
            "kube",
            series,
            lambda: (
                series.labels.get(self.cluster_label) or None,
                series.labels["__name__"],
                self.kube_labels(series.labels),
                self.kube_target(series.labels),
            ),
        )


__all__ = [
    "DCGM_LABEL_COLUMNS",
    "RAW_DCGM_DICTIONARY_SCHEMA",
    "TARGET_LABELS",
    "Series",
    "SeriesByLabels",
    "SeriesMapping",
    "append_series",
]
