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

The labels are what the NVIDIA GPU Operator and kube-prometheus-stack store (Prometheus' target rule: `attach`):

- dcgm-exporter (4.x) labels each series `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`,
  `DCGM_FI_DRIVER_VERSION`, MIG `GPU_I_PROFILE`/`GPU_I_ID`, its holder's `pod`/`namespace`/`container`, `vgpu`,
  `dra_*`, and XID series `err_code`/`err_msg`. Its DaemonSet pod on each node (`nvidia-dcgm-exporter-xxxxx` in
  `gpu-operator`, named and addressed from the node name) is scraped by the GPU Operator's ServiceMonitor with
  `honorLabels: false`: every series carries the target's `job`, `instance`, `namespace`, `pod`, `container`,
  `service`, `endpoint`, and the holder's labels become `exported_namespace`, `exported_pod`,
  `exported_container` (a free GPU's series carries only the exporter's own pod).
- kube-state-metrics and OpenCost are scraped with `honorLabels: true`: a pod's series keeps its own
  `namespace`/`pod`, a node's series (none of its own) gains the target's. A row's `target` column
  (`<job>/<instance>`) names its target; a null one is the exporter's usual target. Kueue's series are written
  under OpenCost's target, as before (tests read that target back).
- `up` for every target, with exactly the target's labels: 1 at each scrape it answered (the distinct times
  of its samples), and for a dcgm-exporter target 0 at the scrapes missing from its regular grid within a
  table (the simulator's exporter outage); the scrapes of a kube target are gathered over the whole input and
  written at the end, since every node group's part holds some of them.
"""

from __future__ import annotations

import hashlib
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
from gpumeter.ingest.schema import DCGM_METRICS, DCGM_XID, KUBE_METRICS
from gpumeter_sim.spec import KSM_INSTANCES, KSM_JOB

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

# dcgm-exporter as the GPU Operator deploys it (DaemonSet, ServiceMonitor `jobLabel: app`, port `gpu-metrics`).
DCGM_JOB = "nvidia-dcgm-exporter"
DCGM_NAMESPACE = "gpu-operator"
DCGM_PORT = 9400
DRIVER_VERSION = "550.54.15"
# DGX H100's GPU bus ids, by GPU index; further GPUs get made-up ones of the same form.
_BUS_IDS = ("1B", "43", "52", "61", "9D", "C3", "D1", "DF")
# nvidia-smi's XID texts for a few codes (dcgm-exporter's `err_msg`); any other code gets a generic one.
XID_MESSAGES = {
    0: "No Error",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    48: "Double Bit ECC Error",
    63: "ECC page retirement or row remapping recording event",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
}
# kube-state-metrics (kube-prometheus-stack) and OpenCost: their ServiceMonitor targets, less job and instance.
# The usual instances are kept as they were (tests read them back as the rows' `target`).
KSM_DEFAULT_INSTANCE = "kube-state-metrics.kube-system:8080"
OPENCOST_JOB = "opencost"
OPENCOST_INSTANCE = "opencost.opencost:9003"
_KSM_RELEASE = "kube-prometheus-stack-kube-state-metrics"
_KSM_TARGET = {"namespace": "monitoring", "container": "kube-state-metrics", "service": _KSM_RELEASE}
_OPENCOST_TARGET = {"namespace": "opencost", "container": "opencost", "service": "opencost"}
# Kubernetes' alphabet for generated name suffixes (k8s.io/apimachinery/pkg/util/rand): no vowels, no 0/1/3.
_K8S_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def attach(exposed: dict[str, str], target: dict[str, str], honor_labels: bool) -> dict[str, str]:
    """Prometheus' rule for a scraped series' labels: the target's labels set on it, a clash resolved by
    `honor_labels` (the series' label renamed `exported_<name>` where the target's wins); an empty value is no
    label. The rule of tests/scrape_paths.py, which proves it against a real Prometheus."""
    out = {k: v for k, v in exposed.items() if v != ""}
    for name, value in target.items():
        if value == "":
            continue
        if name in out:
            if honor_labels:
                continue
            renamed = "exported_" + name
            while renamed in out:
                renamed = "exported_" + renamed
            out[renamed] = out[name]
        out[name] = value
    return out


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\x1f".join(parts).encode()).digest()


def _k8s_suffix(digest: bytes, n: int) -> str:
    return "".join(_K8S_ALPHABET[b % len(_K8S_ALPHABET)] for b in digest[:n])


def _pod_ip(digest: bytes) -> str:
    """An address of a pod network (10.128.0.0/9), from a name's digest."""
    return f"10.{128 + digest[0] % 128}.{digest[1]}.{2 + digest[2] % 252}"


def _deployment_pod(name: str, key: str) -> str:
    """`<deployment>-<pod-template-hash>-<suffix>`, from `key` (a target's instance)."""
    digest = _digest(name, key)
    return f"{name}-{_k8s_suffix(digest, 10)}-{_k8s_suffix(digest[10:], 5)}"


class _Targets:
    """The scrape targets of one file: each node's dcgm-exporter pod (named and addressed from the node name,
    another address where two nodes' would clash), and the kube targets' labels."""

    def __init__(self) -> None:
        self._dcgm: dict[tuple[str | None, str], dict[str, str]] = {}
        self._ips: dict[tuple[str | None, str], str] = {}  # (cluster, ip) -> node

    def dcgm(self, cluster: str | None, node: str) -> dict[str, str]:
        """The target labels of the dcgm-exporter pod on `node`, as the GPU Operator's ServiceMonitor sets them."""
        found = self._dcgm.get((cluster, node))
        if found is None:
            salt = 0  # another address only where two nodes' would clash (rare, and deterministic per input)
            ip = _pod_ip(_digest(DCGM_JOB, node))
            while self._ips.setdefault((cluster, ip), node) != node:
                salt += 1
                ip = _pod_ip(_digest(DCGM_JOB, node, str(salt)))
            found = self._dcgm[(cluster, node)] = {
                "job": DCGM_JOB,
                "instance": f"{ip}:{DCGM_PORT}",
                "namespace": DCGM_NAMESPACE,
                "pod": f"{DCGM_JOB}-{_k8s_suffix(_digest(DCGM_JOB, node), 5)}",
                "container": DCGM_JOB,
                "service": DCGM_JOB,
                "endpoint": "gpu-metrics",
            }
        return found

    @staticmethod
    def kube(job: str, instance: str) -> dict[str, str]:
        """A kube target's labels: the whole ServiceMonitor target for kube-state-metrics' and OpenCost's
        usual instances (and the simulator's rollout's); only `job` and `instance` for any other (a pull
        written back: its target's other labels are not known)."""
        base = {"job": job, "instance": instance} if instance else {"job": job}
        if job == KSM_JOB and instance in (KSM_DEFAULT_INSTANCE, *KSM_INSTANCES):
            pod = _deployment_pod(_KSM_RELEASE, instance)
            return {**base, **_KSM_TARGET, "pod": pod, "endpoint": "http"}
        if job == OPENCOST_JOB and instance == OPENCOST_INSTANCE:
            pod = _deployment_pod("opencost", instance)
            return {**base, **_OPENCOST_TARGET, "pod": pod, "endpoint": "http"}
        return base


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


def _bus_id(index: int) -> str:
    bus = _BUS_IDS[index] if index < len(_BUS_IDS) else f"{(index * 17 + 7) % 256:02X}"
    return f"00000000:{bus}:{(index // 256) % 32:02X}.0"


def _xid_message(code: str) -> str:
    try:
        return XID_MESSAGES.get(int(float(code)), "Unknown Error")
    except (ValueError, OverflowError):
        return "Unknown Error"


def _dcgm_exposed(columns: dict[str, str | None], err_code: str | None) -> dict[str, str]:
    """The labels dcgm-exporter 4.x writes on a series, in its order, from the raw row's label columns."""
    label = {column: columns.get(column) for column, _ in DCGM_LABELS}
    out: dict[str, str | None] = {"gpu": label["gpu"], "UUID": label["uuid"]}
    gpu = label["gpu"]
    if gpu is not None and gpu.isdigit():
        out["pci_bus_id"] = _bus_id(int(gpu))
        out["device"] = f"nvidia{gpu}"
    out["modelName"] = label["model_name"]
    out["GPU_I_PROFILE"] = label["gpu_i_profile"]
    out["GPU_I_ID"] = label["gpu_i_id"]
    out["Hostname"] = label["hostname"]
    out["DCGM_FI_DRIVER_VERSION"] = DRIVER_VERSION
    if err_code is not None:
        out["err_code"] = err_code
        out["err_msg"] = _xid_message(err_code)
    for column, name in DCGM_LABELS:
        if name not in out and column not in ("hostname", "uuid", "gpu", "model_name"):
            out[name] = label[column]
    return {k: v for k, v in out.items() if v is not None}


def _dcgm_label_strings(rows: pa.Table, cluster_label: str, targets: _Targets, xid: bool) -> pa.Array:
    """Label text per row, built once per distinct series (rows are keyed by their label columns, XID rows
    also by their value: dcgm-exporter's `err_code`): the exporter's labels under its ServiceMonitor target."""
    columns = ["cluster", *(c for c, _ in DCGM_LABELS)]
    parts = [rows.column(c).combine_chunks() for c in columns]
    if xid:
        parts.append(_values(rows.column("value").combine_chunks()))
    key = pc.binary_join_element_wise(*parts, "\x1f", null_handling="replace", null_replacement="\x00")
    encoded = pc.dictionary_encode(key)
    strings = []
    for text in encoded.dictionary.to_pylist():
        values = [None if v == "\x00" else v for v in text.split("\x1f")]
        found = dict(zip(columns, values, strict=False))
        exposed = _dcgm_exposed(found, values[-1] if xid else None)
        cluster = found["cluster"]
        labels = {cluster_label: cluster} if cluster is not None else {}
        labels.update(attach(exposed, targets.dcgm(cluster, found["hostname"] or ""), honor_labels=False))
        strings.append(_label_string(labels))
    return pa.array(strings, type=pa.string()).take(encoded.indices)


def _kube_label_strings(
    rows: pa.Table, cluster_label: str, metric: str, targets: _Targets
) -> tuple[pa.Array, pa.Array]:
    """Label text per row and its scrape target's label text (for `up`), built once per distinct (labels,
    target). The target comes from the `target` column (`<job>/<instance>`, schema.RAW_KUBE_SCHEMA) where it is
    not null, so that a pull from Prometheus written back keeps its scrape targets; a null target (the
    simulator's, or a table written before the column existed) is the exporter's usual one: kube-state-metrics
    for `kube_*`, else OpenCost. The target's `job` and `instance` replace the series' own; its other labels
    are attached with `honor_labels: true` (kube-prometheus-stack's and OpenCost's ServiceMonitors)."""
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
    default = (
        (KSM_JOB, KSM_DEFAULT_INSTANCE) if metric.startswith("kube_") else (OPENCOST_JOB, OPENCOST_INSTANCE)
    )
    strings = []
    target_strings = []
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
        else:  # the series' own job and instance, if it has them, win (honor_labels: true)
            job, instance = labels.pop("job", default[0]), labels.pop("instance", default[1])
        own = targets.kube(job, instance) if job else ({"instance": instance} if instance else {})
        scraped = attach(labels, {k: v for k, v in own.items() if k not in ("job", "instance")}, True)
        scraped.update((k, own[k]) for k in ("job", "instance") if k in own)
        strings.append(_label_string(scraped))
        target_strings.append(_label_string(own))
    clusters = pc.dictionary_encode(cluster, null_encoding="encode")
    prefixes = [
        f'{cluster_label}="{escape_label_value(c)}",' if c is not None else ""
        for c in clusters.dictionary.to_pylist()
    ]
    cluster_part = pa.array(prefixes, type=pa.string()).take(clusters.indices)
    label_part = pa.array(strings, type=pa.string()).take(encoded.indices)
    target_part = pa.array(target_strings, type=pa.string()).take(encoded.indices)
    return (
        pc.binary_join_element_wise(cluster_part, label_part, ""),
        pc.binary_join_element_wise(cluster_part, target_part, ""),
    )


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


def _write_family(
    files: _FamilyFiles,
    metric: str,
    labels: pa.Array,
    values: pa.Array,
    ts_ms: pa.Array,
    replicas: Sequence[Replica],
    replica_label: str,
) -> None:
    """Sample lines of one family, once per replica (each series in time order, as the rows come)."""
    labels = pc.utf8_rtrim(labels, ",")
    for replica in replicas or (None,):
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


def _scrapes(codes: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (code, ts) pairs, sorted by code then time."""
    order = np.lexsort((ts, codes))
    codes, ts = codes[order], ts[order]
    first = np.ones(len(ts), dtype=bool)
    first[1:] = (codes[1:] != codes[:-1]) | (ts[1:] != ts[:-1])
    return codes[first], ts[first]


def _missed(ts: np.ndarray) -> np.ndarray:
    """The scrapes missing from a target's regular grid (its sorted distinct sample times): its step is the
    shortest gap, at least a second, and every gap a multiple of it; none if the times are not such a grid."""
    if len(ts) < 3:
        return ts[:0]
    gaps = np.diff(ts)
    step = int(gaps.min())
    if step < 1000 or np.any(gaps % step) or not np.any(gaps > step):
        return ts[:0]
    return np.setdiff1d(np.arange(ts[0], ts[-1], step, dtype=np.int64), ts, assume_unique=True)


class _Up:
    """The `up` series of the file's targets. A dcgm-exporter target (one node) lies in one table per day, so
    its scrapes are written table by table, with 0 where its grid misses a scrape (the exporter was down); a
    kube target's scrapes are spread over every node group's table, so they are gathered and written at the end."""

    def __init__(self, cluster_label: str, targets: _Targets) -> None:
        self.cluster_label = cluster_label
        self.targets = targets
        self.kube: dict[str, list[np.ndarray]] = {}

    def dcgm(
        self, files: _FamilyFiles, table: pa.Table, replicas: Sequence[Replica], replica_label: str
    ) -> None:
        if table.num_rows == 0:
            return
        key = pc.binary_join_element_wise(
            table.column("cluster").combine_chunks(),
            table.column("hostname").combine_chunks(),
            "\x1f",
            null_handling="replace",
            null_replacement="\x00",
        )
        encoded = pc.dictionary_encode(key)
        codes, ts = _scrapes(
            encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64),
            table.column("ts_ms").to_numpy().astype(np.int64),
        )
        bounds = np.flatnonzero(np.diff(codes)) + 1
        texts = encoded.dictionary.to_pylist()
        strings, which, all_ts, all_up = [], [], [], []
        for code_ts, code in zip(np.split(ts, bounds), codes[np.r_[0, bounds]], strict=True):
            cluster, node = (None if v == "\x00" else v for v in texts[code].split("\x1f"))
            labels = {self.cluster_label: cluster} if cluster is not None else {}
            labels.update(self.targets.dcgm(cluster, node or ""))
            missed = _missed(code_ts)
            both = np.concatenate([code_ts, missed])
            order = np.argsort(both, kind="stable")
            all_ts.append(both[order])
            all_up.append(np.concatenate([np.ones(len(code_ts)), np.zeros(len(missed))])[order])
            which.append(np.full(len(both), len(strings), dtype=np.int32))
            strings.append(_label_string(labels))
        _write_family(
            files,
            "up",
            pa.array(strings, type=pa.string()).take(pa.array(np.concatenate(which))),
            _values(pa.array(np.concatenate(all_up))),
            pa.array(np.concatenate(all_ts)),
            replicas,
            replica_label,
        )

    def add_kube(self, target_labels: pa.Array, ts_ms: pa.Array) -> None:
        encoded = pc.dictionary_encode(target_labels)
        codes, ts = _scrapes(
            encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64),
            ts_ms.to_numpy(zero_copy_only=False).astype(np.int64),
        )
        bounds = np.flatnonzero(np.diff(codes)) + 1
        texts = encoded.dictionary.to_pylist()
        for code_ts, code in zip(np.split(ts, bounds), codes[np.r_[0, bounds]], strict=True):
            self.kube.setdefault(texts[code], []).append(code_ts)

    def flush_kube(self, files: _FamilyFiles, replicas: Sequence[Replica], replica_label: str) -> None:
        for text in sorted(self.kube):
            ts = np.unique(np.concatenate(self.kube[text]))
            labels = pa.array([text]).take(pa.array(np.zeros(len(ts), dtype=np.int32)))
            ones = _values(pa.array(np.ones(len(ts))))
            _write_family(files, "up", labels, ones, pa.array(ts), replicas, replica_label)
        self.kube.clear()


def _append(
    files: _FamilyFiles,
    table: pa.Table,
    kind: str,
    cluster_label: str,
    up: _Up,
    replicas: Sequence[Replica] = (),
    replica_label: str = "prometheus_replica",
) -> None:
    if table.num_rows == 0:
        return
    if kind == "dcgm":
        up.dcgm(files, table, replicas, replica_label)
    metrics = pc.unique(table.column("metric").combine_chunks()).to_pylist()
    for metric in sorted(m for m in metrics if m is not None):
        rows = table.filter(pc.equal(table.column("metric"), metric))
        for start in range(0, rows.num_rows, _BATCH):
            batch = rows.slice(start, _BATCH)
            ts_ms = batch.column("ts_ms").combine_chunks()
            if kind == "dcgm":
                labels = _dcgm_label_strings(batch, cluster_label, up.targets, metric == DCGM_XID)
            else:
                labels, target_labels = _kube_label_strings(batch, cluster_label, metric, up.targets)
                up.add_kube(pc.utf8_rtrim(target_labels, ","), ts_ms)
            values = _values(batch.column("value").combine_chunks())
            _write_family(files, metric, labels, values, ts_ms, replicas, replica_label)


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
        up = _Up(cluster_label, _Targets())
        try:
            for dcgm, kube in tables:
                for table, kind in ((dcgm, "dcgm"), (kube, "kube")):
                    rows = table.sort_by("ts_ms") if _unsorted(table) else table
                    _append(files, rows, kind, cluster_label, up, replicas, replica_label)
            up.flush_kube(files, replicas, replica_label)
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
