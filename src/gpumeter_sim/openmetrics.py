"""OpenMetrics text for `promtool tsdb create-blocks-from openmetrics FILE DIR` (backfilling Prometheus).

What promtool needs (docs/telemetry.md): timestamps in SECONDS (milliseconds would silently be read as
seconds), the file ending with `# EOF`, every metric family contiguous (one `# TYPE` line, then all of
its samples), and each series' samples in time order. Input comes day by day, so each family is first
streamed into its own temporary file and the families are concatenated at the end: memory stays at
one day of input, whatever the length of the period.

HA pairs (`replicas`): every series written once per replica, with the replica label (default
`prometheus_replica`, as Prometheus' `external_labels` of an HA pair name it), each replica's samples
stamped `offset_ms` after the input's and missing where that replica was down (`gaps_ms`): what two
Prometheus servers scraping the same targets record, and what the Prometheus source dedupes (R1).

Every family is declared `gauge`, including the energy counter DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
an OpenMetrics `counter` must expose its samples as `<name>_total`, which would rename the series that
the Prometheus source queries by its dcgm-exporter name. Prometheus stores both types alike, and
`increase()`/`rate()` work on it either way.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpumeter.ingest.prometheus.promql import escape_label_value
from gpumeter.ingest.schema import DCGM_METRICS, KUBE_METRICS

# raw_dcgm_samples column -> the label name dcgm-exporter puts on the series.
DCGM_LABELS: tuple[tuple[str, str], ...] = (
    ("hostname", "Hostname"),
    ("uuid", "UUID"),
    ("gpu", "gpu"),
    ("model_name", "modelName"),
    ("gpu_i_id", "GPU_I_ID"),
    ("gpu_i_profile", "GPU_I_PROFILE"),
    ("namespace", "namespace"),
    ("pod", "pod"),
    ("container", "container"),
    ("vgpu", "vgpu"),
    ("dra_claim_name", "dra_claim_name"),
    ("dra_claim_namespace", "dra_claim_namespace"),
    ("dra_driver_name", "dra_driver_name"),
    ("dra_pool_name", "dra_pool_name"),
    ("dra_device_name", "dra_device_name"),
)

_BATCH = 500_000  # rows formatted at once: keeps string buffers well under 2 GiB


class OpenMetricsError(ValueError):
    pass


@dataclass(frozen=True)
class Replica:
    """One Prometheus of an HA pair: its replica label value, how much later than the input's timestamps it
    stamps its samples, and the [start_ms, end_ms) windows (of its own timestamps) in which it was down."""

    name: str
    offset_ms: int = 0
    gaps_ms: tuple[tuple[int, int], ...] = ()

    def keep(self, ts_ms: np.ndarray) -> np.ndarray:
        """Which of its (shifted) timestamps it recorded."""
        kept = np.ones(len(ts_ms), dtype=bool)
        if len(ts_ms):
            lo, hi = ts_ms.min(), ts_ms.max()
            for start, end in self.gaps_ms:
                if start <= hi and end > lo:
                    kept &= (ts_ms < start) | (ts_ms >= end)
        return kept


def _label_string(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{escape_label_value(str(v))}"' for k, v in labels.items())


def _timestamps(ts_ms: pa.Array) -> pa.Array:
    """Epoch milliseconds -> 'seconds.mmm' (exact, no float rounding)."""
    ts = ts_ms.to_numpy(zero_copy_only=False)
    if len(ts) and ts.min() < 0:
        raise OpenMetricsError("negative timestamps cannot be written")
    seconds = pc.cast(pa.array(ts // 1000), pa.string())
    millis = pc.utf8_lpad(pc.cast(pa.array(ts % 1000), pa.string()), 3, "0")
    return pc.binary_join_element_wise(seconds, millis, ".")


def _values(values: pa.Array) -> pa.Array:
    text = pc.cast(values, pa.string())  # shortest round-trip form: 1, 0.25, 1.5e+12
    text = pc.replace_substring(text, "nan", "NaN")
    text = pc.replace_substring(text, "inf", "Inf")
    return text


def _write_strings(fh: IO[bytes], arr: pa.Array) -> None:
    """Write a string array's characters (no separators) straight from its data buffer."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.null_count:
        raise OpenMetricsError("internal: null line")
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + len(arr) + 1]
    if len(offsets) and offsets[-1] > offsets[0]:
        fh.write(memoryview(arr.buffers()[2])[offsets[0] : offsets[-1]])


def _dcgm_label_strings(rows: pa.Table, cluster_label: str, job: str) -> pa.Array:
    """Label text per row, built once per distinct series (rows are keyed by their label columns)."""
    columns = ["cluster", *(c for c, _ in DCGM_LABELS)]
    names = [cluster_label, *(label for _, label in DCGM_LABELS)]
    key = pc.binary_join_element_wise(
        *(rows.column(c).combine_chunks() for c in columns),
        "\x1f",
        null_handling="replace",
        null_replacement="\x00",
    )
    encoded = pc.dictionary_encode(key)
    strings = []
    for text in encoded.dictionary.to_pylist():
        values = text.split("\x1f")
        labels = {name: value for name, value in zip(names, values, strict=True) if value != "\x00"}
        labels["instance"] = f"{labels.get('Hostname', '')}:9400"
        labels["job"] = job
        strings.append(_label_string(labels))
    return pa.array(strings, type=pa.string()).take(encoded.indices)


def _kube_label_strings(rows: pa.Table, cluster_label: str, metric: str) -> pa.Array:
    """Label text per row, built once per distinct (labels, target). `job` and `instance` come from the
    `target` column (`<job>/<instance>`, schema.RAW_KUBE_SCHEMA) where it is not null, so that a pull from
    Prometheus written back keeps its scrape targets; a null target (the simulator's, or a table written
    before the column existed) gets the exporter's usual job and instance."""
    n = rows.num_rows
    labels_col = rows.column("labels").combine_chunks()
    target = (
        rows.column("target").combine_chunks() if "target" in rows.column_names else pa.nulls(n, pa.string())
    )
    # JSON text never holds a raw \x1f (control characters are escaped), so the first one splits the key;
    # the target part is "0" for null, "1<target>" otherwise.
    target_part = pc.if_else(
        pc.is_null(target), pa.scalar("0"), pc.binary_join_element_wise(pa.scalar("1"), target, "")
    )
    key = pc.binary_join_element_wise(
        labels_col, target_part, "\x1f", null_handling="replace", null_replacement=""
    )
    encoded = pc.dictionary_encode(key)
    cluster = rows.column("cluster").combine_chunks()
    default_job, default_instance = (
        ("opencost", "opencost.opencost:9003")
        if not metric.startswith("kube_")
        else ("kube-state-metrics", "kube-state-metrics.kube-system:8080")
    )
    strings = []
    for text in encoded.dictionary.to_pylist():
        label_text, _, target_text = text.partition("\x1f")
        labels = json.loads(label_text) if label_text else {}
        if not isinstance(labels, dict):
            raise OpenMetricsError(f"labels of {metric} are not a JSON object: {label_text!r}")
        labels.pop("__name__", None)
        if target_text.startswith("1"):
            job, instance = _split_target(target_text[1:])
            labels.pop("job", None)
            labels.pop("instance", None)
            if job:
                labels["job"] = job
            if instance:
                labels["instance"] = instance
        else:
            labels.setdefault("job", default_job)
            labels.setdefault("instance", default_instance)
        strings.append(_label_string(labels))
    label_part = pa.array(strings, type=pa.string()).take(encoded.indices)
    clusters = pc.dictionary_encode(cluster, null_encoding="encode")
    prefixes = [
        f'{cluster_label}="{escape_label_value(c)}",' if c is not None else ""
        for c in clusters.dictionary.to_pylist()
    ]
    cluster_part = pa.array(prefixes, type=pa.string()).take(clusters.indices)
    return pc.binary_join_element_wise(cluster_part, label_part, "")


def _split_target(target: str) -> tuple[str, str]:
    """`<job>/<instance>` -> (job, instance), split at the LAST slash: job names may hold slashes
    (Prometheus Operator PodMonitors: `<namespace>/<name>`), instances are `host:port`. A target without
    a slash is a job."""
    if "/" not in target:
        return target, ""
    job, _, instance = target.rpartition("/")
    return job, instance


class _FamilyFiles:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.files: dict[str, IO[bytes]] = {}
        self.counts: dict[str, int] = {}

    def get(self, family: str) -> IO[bytes]:
        fh = self.files.get(family)
        if fh is None:
            fh = self.files[family] = open(self.folder / f"{len(self.files):05d}.om", "wb")  # noqa: SIM115
            self.counts[family] = 0
        return fh

    def close(self) -> None:
        for fh in self.files.values():
            fh.close()

    def ordered(self) -> list[str]:
        known = [m for m in (*DCGM_METRICS, *KUBE_METRICS) if m in self.files]
        return known + sorted(set(self.files) - set(known))


def _append(
    files: _FamilyFiles,
    table: pa.Table,
    kind: str,
    cluster_label: str,
    replicas: Sequence[Replica] = (),
    replica_label: str = "prometheus_replica",
) -> None:
    if table.num_rows == 0:
        return
    metrics = pc.unique(table.column("metric").combine_chunks()).to_pylist()
    for metric in sorted(m for m in metrics if m is not None):
        rows = table.filter(pc.equal(table.column("metric"), metric))
        for start in range(0, rows.num_rows, _BATCH):
            batch = rows.slice(start, _BATCH)
            if kind == "dcgm":
                labels = _dcgm_label_strings(batch, cluster_label, "dcgm-exporter")
            else:
                labels = _kube_label_strings(batch, cluster_label, metric)
            labels = pc.utf8_rtrim(labels, ",")
            values = _values(batch.column("value").combine_chunks())
            ts_ms = batch.column("ts_ms").combine_chunks()
            for replica in replicas or (None,):  # one copy per replica, each series in time order
                if replica is None:
                    part_labels, part_values, part_ts = labels, values, ts_ms
                else:
                    shifted = ts_ms.to_numpy(zero_copy_only=False) + replica.offset_ms
                    kept = pa.array(replica.keep(shifted))
                    suffix = f'{replica_label}="{escape_label_value(replica.name)}"'
                    part_labels = labels.filter(kept)
                    comma = pc.if_else(pc.equal(part_labels, ""), pa.scalar(""), pa.scalar(","))
                    part_labels = pc.binary_join_element_wise(part_labels, comma, suffix, "")
                    part_values = values.filter(kept)
                    part_ts = pa.array(shifted).filter(kept)
                if len(part_ts) == 0:
                    continue
                lines = pc.binary_join_element_wise(
                    pa.array([metric + "{"]).take(pa.array(np.zeros(len(part_ts), dtype=np.int32))),
                    part_labels,
                    "} ",
                    part_values,
                    " ",
                    _timestamps(part_ts),
                    "\n",
                    "",
                )
                _write_strings(files.get(metric), lines)
                files.counts[metric] += len(part_ts)


def write_openmetrics(
    tables: Iterable[tuple[pa.Table, pa.Table]],
    path: Path,
    cluster_label: str = "cluster",
    replicas: Sequence[Replica] = (),
    replica_label: str = "prometheus_replica",
) -> dict[str, int]:
    """Write (dcgm, kube) raw-schema tables, e.g. one pair per day in time order, as one OpenMetrics file.

    Rows of one series must come in time order across the pairs (the simulator's days do). With `replicas`,
    every series is written once per replica (labelled `replica_label`, shifted and thinned as the replica
    says). The file is replaced atomically. Returns the number of samples written per metric family."""
    names = [r.name for r in replicas]
    if len(set(names)) != len(names) or any(not n for n in names):
        raise OpenMetricsError(f"replica names must be distinct and non-empty: {names}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".openmetrics.", dir=path.parent) as tmp:
        files = _FamilyFiles(Path(tmp))
        try:
            for dcgm, kube in tables:
                for table, kind in ((dcgm, "dcgm"), (kube, "kube")):
                    rows = table.sort_by("ts_ms") if _unsorted(table) else table
                    _append(files, rows, kind, cluster_label, replicas, replica_label)
        finally:
            files.close()
        out_tmp = Path(tmp) / "out.om"
        with open(out_tmp, "wb") as out:
            for family in files.ordered():
                out.write(f"# TYPE {family} gauge\n".encode())
                with open(files.files[family].name, "rb") as part:
                    shutil.copyfileobj(part, out, 1 << 20)
            out.write(b"# EOF\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(out_tmp, path)
    return dict(files.counts)


def _unsorted(table: pa.Table) -> bool:
    ts = table.column("ts_ms").to_numpy()
    return bool(len(ts) > 1 and np.any(ts[1:] < ts[:-1]))
