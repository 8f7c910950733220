"""The server's answers as raw rows: the JSON checked for the shape of a PromQL API answer, each series'
samples as arrays (only those of the half-open window), and the series of a pull as the raw DCGM and kube
tables (gpumeter/ingest/schema.py), their labels normalized to the tables' columns (docs/telemetry.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from gpumeter.ingest.schema import RAW_DCGM_SCHEMA, RAW_KUBE_SCHEMA

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


class UnexpectedAnswer(Exception):
    """The server answered, but not in the shape of a PromQL API's answer."""

    hint = "check that `url` is a Prometheus-compatible API root"

    def __init__(self, problem: str) -> None:
        super().__init__(f"unexpected response ({problem})")
        self.reason = str(self)


@dataclass
class Series:
    """The samples of one series (its whole label set) gathered so far, as arrays in the order they came."""

    labels: dict[str, str]
    ts: list[np.ndarray]
    values: list[np.ndarray]


SeriesByLabels = dict[tuple[tuple[str, str], ...], Series]


def append_series(into: SeriesByLabels, labels: dict[str, str], ts: np.ndarray, values: np.ndarray) -> None:
    """Samples of one series (by its whole label set) added to what is already gathered for it."""
    key = tuple(sorted(labels.items()))
    entry = into.get(key)
    if entry is None:
        into[key] = entry = Series(labels, [], [])
    entry.ts.append(ts)
    entry.values.append(values)


def validated(doc: Any, result_type: str = "matrix") -> list[dict[str, Any]]:
    """`data.result` of an instant query's answer, once the answer is seen to be one of `result_type`:
    `matrix` (raw samples of range selectors, every series named) or `vector` (an aggregate: labels only)."""
    if not isinstance(doc, dict):
        raise UnexpectedAnswer("not a JSON object")
    if doc.get("status") != "success":
        raise UnexpectedAnswer(f"status {doc.get('status')!r}: {doc.get('error', '')}")
    data = doc.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise UnexpectedAnswer("no data.result list")
    if data.get("resultType") != result_type:
        raise UnexpectedAnswer(f"resultType {data.get('resultType')!r}, expected {result_type!r}")
    for item in data["result"]:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            raise UnexpectedAnswer("a series without a `metric` object")
        if result_type == "vector":
            continue  # an aggregate: labels only are used, and they carry no __name__
        if not isinstance(item.get("values"), list):
            raise UnexpectedAnswer("a series without a `values` list")
        if "__name__" not in item["metric"]:
            raise UnexpectedAnswer("a series without __name__")
    return data["result"]


def parse_timestamp_ms(ts: Any) -> int:
    """Prometheus' float seconds (e.g. 1700000000.123) -> int ms. round(), never int(): 0.123 * 1000 is
    122.99999999999999 in binary floating point."""
    return round(float(ts) * 1000)


def samples(values: list[Any], w0: int, w1: int) -> tuple[np.ndarray, np.ndarray]:
    """The samples with w0 <= ts < w1 (the half-open window, R1/R2), as int64 ms and float64."""
    try:
        ts = np.fromiter((parse_timestamp_ms(v[0]) for v in values), np.int64, len(values))
        vals = np.fromiter((float(v[1]) for v in values), np.float64, len(values))
    except (TypeError, ValueError, IndexError, OverflowError) as exc:
        raise UnexpectedAnswer(f'a sample is not [seconds, "value"]: {exc}') from None
    keep = (ts >= w0) & (ts < w1)
    return ts[keep], vals[keep]


def _stack(series: list[Series]) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """Every series' samples end to end, with each sample's series index (to repeat its labels)."""
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


@dataclass(frozen=True)
class SeriesMapping:
    """How one source's series become raw rows: `cluster_label` names the cluster (a series without it is of
    the configured cluster), `replica_labels` say which HA replica stored it and are not the series' own."""

    cluster_label: str
    replica_labels: tuple[str, ...]

    def cluster_of(self, labels: dict[str, str], configured: str) -> str:
        return labels.get(self.cluster_label) or configured

    def foreign_clusters(self, cluster: str, series: Iterable[Series]) -> set[str]:
        """The clusters other than `cluster` that series are labelled with (a selector that lets them in)."""
        return {v for s in series if (v := s.labels.get(self.cluster_label)) and v != cluster}

    def dcgm_table(self, cluster: str, series: list[Series]) -> pa.Table:
        """raw_dcgm_samples of merged series (one array of samples each)."""
        if not series:
            return RAW_DCGM_SCHEMA.empty_table()
        ts, values, index = _stack(series)
        columns: dict[str, pa.Array] = {
            "cluster": pa.array([self.cluster_of(s.labels, cluster) for s in series], pa.string()).take(
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

    def kube_labels(self, labels: dict[str, str]) -> str:
        """The `labels` column: the series' own labels as compact sorted JSON, without its name, cluster,
        replica and scrape target, the exporter's own `exported_` labels under their own names."""
        drop = {"__name__", self.cluster_label, *self.replica_labels, *TARGET_LABELS}
        kept = {
            k: v for k, v in labels.items() if k not in drop and not k.startswith("exported_") and v != ""
        }
        for key, value in labels.items():  # the exporter's own label, renamed by a conflicting target label
            if key.startswith("exported_") and value != "" and key[len("exported_") :] not in drop:
                kept[key[len("exported_") :]] = value
        return json.dumps(kept, separators=(",", ":"), sort_keys=True)

    @staticmethod
    def kube_target(labels: dict[str, str]) -> str | None:
        """`<job>/<instance>` of the scrape (schema.RAW_KUBE_SCHEMA), null when the series has neither."""
        job, instance = labels.get("job", ""), labels.get("instance", "")
        return f"{job}/{instance}" if job or instance else None

    def kube_table(self, cluster: str, series: list[Series]) -> pa.Table:
        """raw_kube_samples of merged series (one array of samples each)."""
        if not series:
            return RAW_KUBE_SCHEMA.empty_table()
        ts, values, index = _stack(series)
        table = pa.table(
            {
                "cluster": pa.array([self.cluster_of(s.labels, cluster) for s in series], pa.string()).take(
                    index
                ),
                "ts_ms": pa.array(ts, pa.int64()),
                "metric": pa.array([s.labels["__name__"] for s in series], pa.string()).take(index),
                "value": pa.array(values, pa.float64()),
                "labels": pa.array([self.kube_labels(s.labels) for s in series], pa.string()).take(index),
                "target": pa.array([self.kube_target(s.labels) for s in series], pa.string()).take(index),
            }
        ).cast(RAW_KUBE_SCHEMA)
        return table.sort_by([(name, "ascending") for name in ("ts_ms", "metric", "labels", "target")])


__all__ = [
    "DCGM_LABEL_COLUMNS",
    "TARGET_LABELS",
    "Series",
    "SeriesByLabels",
    "SeriesMapping",
    "UnexpectedAnswer",
    "append_series",
    "parse_timestamp_ms",
    "samples",
    "validated",
]
