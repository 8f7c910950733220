"""A small typed builder of hand-made RawDay inputs, for tests that check hand-computed numbers.

Times are sample indices: index `i` is `day_start + i × Δ`. Negative indices fall in the lookback before the
day, index `samples_per_day` is exactly the next midnight (R2).

    f = FactoryBuilder("c1", date(2026, 11, 1), scrape_s=60)
    f.gpu("n1", "GPU-1", H100)
    f.sample("GPU-1", 0, util=50, pod=("ns-a", "p1", "main"))
    raw = f.build()

A sample with no metric value given still needs one row to exist: it is written as a `DCGM_FI_DEV_GPU_TEMP`
reading, a metric the accounting does not read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date
from typing import Any

import pyarrow as pa

from metering.accounting import RawDay, day_bounds_ms
from metering.schema import (
    DCGM_ENERGY,
    DCGM_FB_USED,
    DCGM_GPU_UTIL,
    DCGM_GR_ENGINE_ACTIVE,
    DCGM_TEMP,
    DCGM_XID,
    RAW_DCGM_SCHEMA,
    RAW_DRA_ALLOCATIONS_SCHEMA,
    RAW_DRA_DEVICES_SCHEMA,
    RAW_KUBE_SCHEMA,
)

Pod = tuple[str, str, str | None]  # (namespace, pod, container)

PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


@dataclass(frozen=True)
class Gpu:
    node: str
    uuid: str
    model: str
    index: str


def _label_key(key: str) -> str:
    """kube-state-metrics' sanitized label name (R7): `vcluster.loft.sh/managed-by` -> `label_vcluster_loft_sh_managed_by`."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)


class FactoryBuilder:
    def __init__(self, cluster: str, day: date, scrape_s: int = 30) -> None:
        self.cluster = cluster
        self.day = day
        self.scrape_s = scrape_s
        self.day_start_ms, self.day_end_ms = day_bounds_ms(day)
        self.samples_per_day = 86_400 // scrape_s
        self._gpus: dict[str, Gpu] = {}
        self._dcgm: list[dict[str, Any]] = []
        self._kube: list[dict[str, Any]] = []
        self._claims: list[dict[str, Any]] = []
        self._slices: list[dict[str, Any]] = []

    def ts(self, index: int) -> int:
        """Epoch milliseconds of sample index `index`."""
        return self.day_start_ms + index * self.scrape_s * 1000

    # --- dcgm-exporter ---------------------------------------------------------------------

    def gpu(self, node: str, uuid: str, model: str, index: str = "0") -> FactoryBuilder:
        self._gpus[uuid] = Gpu(node, uuid, model, index)
        return self

    def sample(
        self,
        uuid: str,
        ts_index: int,
        *,
        util: float | None = None,
        gr: float | None = None,
        pod: Pod | None = None,
        gpu_i_id: str | None = None,
        profile: str | None = None,
        energy: float | None = None,
        xid: float | None = None,
        fb: float | None = None,
        vgpu: str | None = None,
    ) -> FactoryBuilder:
        """One scrape of one series: `util` is DCGM_FI_DEV_GPU_UTIL (%), `gr` DCGM_FI_PROF_GR_ENGINE_ACTIVE (0-1),
        `energy` the DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter (mJ), `xid` DCGM_FI_DEV_XID_ERRORS."""
        gpu = self._gpus[uuid]
        namespace, pod_name, container = pod if pod is not None else (None, None, None)
        labels = {
            "cluster": self.cluster,
            "ts_ms": self.ts(ts_index),
            "hostname": gpu.node,
            "uuid": uuid,
            "gpu": gpu.index,
            "model_name": gpu.model,
            "gpu_i_id": gpu_i_id,
            "gpu_i_profile": profile,
            "namespace": namespace,
            "pod": pod_name,
            "container": container,
            "vgpu": vgpu,
        }
        values = {
            DCGM_GPU_UTIL: util,
            DCGM_GR_ENGINE_ACTIVE: gr,
            DCGM_ENERGY: energy,
            DCGM_XID: xid,
            DCGM_FB_USED: fb,
        }
        given = {metric: value for metric, value in values.items() if value is not None}
        for metric, value in (given or {DCGM_TEMP: 40.0}).items():
            self._dcgm.append({**labels, "metric": metric, "value": float(value)})
        return self

    def samples(self, uuid: str, ts_indices: range | list[int], **kwargs: Any) -> FactoryBuilder:
        """`sample` at each index, with the same values."""
        for index in ts_indices:
            self.sample(uuid, index, **kwargs)
        return self

    # --- kube-state-metrics ----------------------------------------------------------------

    def _kube_row(self, ts_index: int, metric: str, value: float, labels: dict[str, str]) -> None:
        self._kube.append(
            {
                "cluster": self.cluster,
                "ts_ms": self.ts(ts_index),
                "metric": metric,
                "value": float(value),
                "labels": json.dumps(labels, sort_keys=True),
            }
        )

    def pod_phase(self, namespace: str, pod: str, ts_index: int, phase: str = "Running") -> FactoryBuilder:
        """kube_pod_status_phase: one 0/1 series per phase, 1 for `phase`."""
        for candidate in PHASES:
            labels = {"namespace": namespace, "pod": pod, "uid": f"uid-{pod}", "phase": candidate}
            self._kube_row(ts_index, "kube_pod_status_phase", 1.0 if candidate == phase else 0.0, labels)
        return self

    def pod_labels(
        self, namespace: str, pod: str, labels: dict[str, str], ts_index: int = 0
    ) -> FactoryBuilder:
        """kube_pod_labels with Kubernetes label keys (`team`, `vcluster.loft.sh/managed-by`), sanitized here."""
        series = {"namespace": namespace, "pod": pod, "uid": f"uid-{pod}"}
        series.update({_label_key(k): v for k, v in labels.items()})
        self._kube_row(ts_index, "kube_pod_labels", 1.0, series)
        return self

    def node_state(
        self,
        node: str,
        ts_index: int,
        *,
        cordoned: bool = False,
        ready: bool = True,
        gpus: int | None = None,
        gpu_count_label: int | None = None,
        allocatable_cpu: float | None = None,
        requested_cpu: float | None = None,
    ) -> FactoryBuilder:
        """A node's kube-state-metrics at one sample: cordon, Ready, `nvidia_com_gpu` capacity (`gpus`), the GPU
        feature discovery label `nvidia.com/gpu.count`, allocatable CPU and the CPU requested by its pods."""
        self._kube_row(ts_index, "kube_node_spec_unschedulable", 1.0 if cordoned else 0.0, {"node": node})
        for status in ("true", "false", "unknown"):
            value = 1.0 if (status == "true") == ready and status != "unknown" else 0.0
            labels = {"node": node, "condition": "Ready", "status": status}
            self._kube_row(ts_index, "kube_node_status_condition", value, labels)
        if gpus is not None:
            labels = {"node": node, "resource": "nvidia_com_gpu", "unit": "integer"}
            self._kube_row(ts_index, "kube_node_status_capacity", gpus, labels)
        if gpu_count_label is not None:
            labels = {"node": node, "label_nvidia_com_gpu_count": str(gpu_count_label)}
            self._kube_row(ts_index, "kube_node_labels", 1.0, labels)
        if allocatable_cpu is not None:
            labels = {"node": node, "resource": "cpu", "unit": "core"}
            self._kube_row(ts_index, "kube_node_status_allocatable", allocatable_cpu, labels)
        if requested_cpu is not None:
            labels = {
                "namespace": "busy",
                "pod": "cpu-hog",
                "container": "c",
                "node": node,
                "resource": "cpu",
            }
            self._kube_row(ts_index, "kube_pod_container_resource_requests", requested_cpu, labels)
        return self

    # --- DRA objects -----------------------------------------------------------------------

    def claim(
        self,
        namespace: str,
        name: str,
        *,
        pool: str,
        device: str,
        reserved_pod: str,
        driver: str = "gpu.nvidia.com",
        seen: list[int] | None = None,
        unseen: tuple[int, ...] | list[int] = (),
        created: int | None = None,
    ) -> FactoryBuilder:
        """A ResourceClaim allocation result (driver, pool, device) reserved for one pod. Without `seen` it is
        in a snapshot of unknown time (valid all day, as before snapshots had a time); with `seen`, in the
        snapshots taken at those sample indices, and `unseen` are snapshots taken that do not show it (their
        marker rows). `created`: its creationTimestamp, a sample index."""
        row = {
            "cluster": self.cluster,
            "claim_namespace": namespace,
            "claim_name": name,
            "claim_uid": f"uid-{name}",
            "request": "gpu",
            "driver": driver,
            "pool": pool,
            "device": device,
            "share_id": None,
            "reserved_pod": reserved_pod,
            "reserved_pod_uid": f"uid-{reserved_pod}",
            "created_ms": None if created is None else self.ts(created),
        }
        # One row per snapshot showing it (one of unknown time without `seen`), one marker row per `unseen`.
        shown = [
            {**row, "snapshot_ms": None if i is None else self.ts(i)}
            for i in ([None] if seen is None else seen)
        ]
        self._claims.extend(shown + [{"cluster": self.cluster, "snapshot_ms": self.ts(i)} for i in unseen])
        return self

    def slice_device(
        self,
        pool: str,
        device: str,
        *,
        uuid: str | None = None,
        parent_uuid: str | None = None,
        profile: str | None = None,
        node: str | None = None,
        driver: str = "gpu.nvidia.com",
        seen: list[int] | None = None,
        unseen: tuple[int, ...] | list[int] = (),
        created: int | None = None,
    ) -> FactoryBuilder:
        """A ResourceSlice device: a whole GPU (`uuid`) or a MIG device (`parent_uuid` + `profile`). `seen`,
        `unseen` and `created` (its slice's creationTimestamp) as for `claim`."""
        mig = parent_uuid is not None
        row = {
            "cluster": self.cluster,
            "driver": driver,
            "pool": pool,
            "node": node or pool,
            "device": device,
            "device_type": "mig" if mig else "gpu",
            "uuid": uuid or (f"MIG-{device}" if mig else None),
            "parent_uuid": parent_uuid,
            "profile": profile,
            "product_name": None,
            "created_ms": None if created is None else self.ts(created),
        }
        shown = [
            {**row, "snapshot_ms": None if i is None else self.ts(i)}
            for i in ([None] if seen is None else seen)
        ]
        self._slices.extend(shown + [{"cluster": self.cluster, "snapshot_ms": self.ts(i)} for i in unseen])
        return self

    def build(self) -> RawDay:
        return RawDay(
            dcgm=pa.Table.from_pylist(self._dcgm, schema=RAW_DCGM_SCHEMA),
            kube=pa.Table.from_pylist(self._kube, schema=RAW_KUBE_SCHEMA),
            dra_allocations=pa.Table.from_pylist(self._claims, schema=RAW_DRA_ALLOCATIONS_SCHEMA),
            dra_devices=pa.Table.from_pylist(self._slices, schema=RAW_DRA_DEVICES_SCHEMA),
        )

    # --- Kueue (appended for the quota report) ---------------------------------------------

    def kueue_cluster_queue(
        self,
        cluster_queue: str,
        ts_index: int,
        *,
        nominal_quota: float | None = None,
        usage: float | None = None,
        borrowing_limit: float | None = None,
        flavor: str = "default-flavor",
        resource: str = "nvidia.com/gpu",
        cohort: str | None = None,
    ) -> FactoryBuilder:
        """Kueue's ClusterQueue gauges at one sample: `kueue_cluster_queue_nominal_quota`, `_resource_usage`
        and `_borrowing_limit` (`resource` raw, as Kueue labels it)."""
        labels = {"cluster_queue": cluster_queue, "flavor": flavor, "resource": resource}
        if cohort is not None:
            labels["cohort"] = cohort
        gauges = {
            "kueue_cluster_queue_nominal_quota": nominal_quota,
            "kueue_cluster_queue_resource_usage": usage,
            "kueue_cluster_queue_borrowing_limit": borrowing_limit,
        }
        for metric, value in gauges.items():
            if value is not None:
                self._kube_row(ts_index, metric, value, labels)
        return self

    def kueue_local_queue(
        self,
        namespace: str,
        local_queue: str,
        ts_index: int,
        usage: float,
        *,
        flavor: str = "default-flavor",
        resource: str = "nvidia.com/gpu",
    ) -> FactoryBuilder:
        """`kueue_local_queue_resource_usage` of one LocalQueue at one sample."""
        labels = {"namespace": namespace, "local_queue": local_queue, "flavor": flavor, "resource": resource}
        self._kube_row(ts_index, "kueue_local_queue_resource_usage", usage, labels)
        return self

    # --- hostile raw rows (tests/test_hostile_telemetry.py) --------------------------------

    def dcgm_row(
        self, ts_ms: int | None, metric: str | None, value: float | None, **labels: Any
    ) -> FactoryBuilder:
        """One raw dcgm-exporter row exactly as given (any timestamp, label or value, null included): for
        telemetry that no well-behaved exporter writes. Unnamed columns are null; `cluster` defaults to this
        factory's."""
        row: dict[str, Any] = dict.fromkeys(RAW_DCGM_SCHEMA.names)
        row.update({"cluster": self.cluster, "ts_ms": ts_ms, "metric": metric, "value": value})
        row.update(labels)
        self._dcgm.append(row)
        return self

    # --- KAI Scheduler (appended for GPU-group sharing) ------------------------------------

    def pod_annotations(
        self, namespace: str, pod: str, annotations: dict[str, str], ts_index: int = 0
    ) -> FactoryBuilder:
        """kube_pod_annotations with Kubernetes annotation keys (`gpu-fraction`), sanitized here as
        kube-state-metrics does (`annotation_gpu_fraction`) for allow-listed keys."""
        series = {"namespace": namespace, "pod": pod, "uid": f"uid-{pod}"}
        series.update(
            {"annotation_" + _label_key(k).removeprefix("label_"): v for k, v in annotations.items()}
        )
        self._kube_row(ts_index, "kube_pod_annotations", 1.0, series)
        return self
