"""A small typed builder of hand-made RawDay inputs, for tests that check hand-computed numbers.

Times are sample indices: index `i` is `day_start + i × Δ`. Negative indices fall in the lookback before the
day, index `samples_per_day` is exactly the next midnight (R2).

    f = FactoryBuilder("c1", date(2026, 11, 1), scrape_s=60)
    f.gpu("n1", "GPU-1", H100)
    f.sample("GPU-1", 0, util=50, pod=("ns-a", "p1", "main"))
    raw = f.build()

A sample with no metric value given still needs one row to exist, of a field that makes an observation (R4):
it is written as a `DCGM_FI_DEV_GPU_UTIL` reading of NaN, a sample whose value the accounting ignores (and
reports as `non_finite_value`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import yaml

from gpumeter.ingest.contract import RawDay, day_bounds_ms
from gpumeter.ingest.schema import (
    DCGM_ENERGY,
    DCGM_FB_USED,
    DCGM_GPU_UTIL,
    DCGM_GR_ENGINE_ACTIVE,
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
        for metric, value in (given or {DCGM_GPU_UTIL: math.nan}).items():
            self._dcgm.append({**labels, "metric": metric, "value": float(value)})
        return self

    def samples(self, uuid: str, ts_indices: range | list[int], **kwargs: Any) -> FactoryBuilder:
        """`sample` at each index, with the same values."""
        for index in ts_indices:
            self.sample(uuid, index, **kwargs)
        return self

    # --- kube-state-metrics ----------------------------------------------------------------

    def _kube_row(
        self,
        ts_index: int,
        metric: str,
        value: float,
        labels: dict[str, str],
        *,
        offset_ms: int = 0,
        target: str | None = None,
    ) -> None:
        """One kube-state-metrics / OpenCost / Kueue sample at sample index `ts_index` plus `offset_ms` (scrapes
        of different targets are not aligned, R1a: e.g. `offset_ms=-20_000` stamps it 20 s before the DCGM
        grid). `target`: the scrape target `<job>/<instance>` (schema.RAW_KUBE_SCHEMA), null by default."""
        self._kube.append(
            {
                "cluster": self.cluster,
                "ts_ms": self.ts(ts_index) + offset_ms,
                "metric": metric,
                "value": float(value),
                "labels": json.dumps(labels, sort_keys=True),
                "target": target,
            }
        )

    def pod_phase(
        self,
        namespace: str,
        pod: str,
        ts_index: int,
        phase: str = "Running",
        *,
        uid: str | None = None,
        offset_ms: int = 0,
        target: str | None = None,
    ) -> FactoryBuilder:
        """kube_pod_status_phase: one 0/1 series per phase, 1 for `phase`. `uid` defaults to `uid-<pod>` (give
        another for a pod recreated under the same name); `offset_ms`, `target` as for `_kube_row`."""
        for candidate in PHASES:
            labels = {"namespace": namespace, "pod": pod, "uid": uid or f"uid-{pod}", "phase": candidate}
            value = 1.0 if candidate == phase else 0.0
            self._kube_row(
                ts_index, "kube_pod_status_phase", value, labels, offset_ms=offset_ms, target=target
            )
        return self

    def pod_labels(
        self,
        namespace: str,
        pod: str,
        labels: dict[str, str],
        ts_index: int = 0,
        *,
        uid: str | None = None,
        offset_ms: int = 0,
        target: str | None = None,
    ) -> FactoryBuilder:
        """kube_pod_labels with Kubernetes label keys (`team`, `vcluster.loft.sh/managed-by`), sanitized here.
        `uid`, `offset_ms`, `target` as for `pod_phase`."""
        series = {"namespace": namespace, "pod": pod, "uid": uid or f"uid-{pod}"}
        series.update({_label_key(k): v for k, v in labels.items()})
        self._kube_row(ts_index, "kube_pod_labels", 1.0, series, offset_ms=offset_ms, target=target)
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
        offset_ms: int = 0,
        target: str | None = None,
    ) -> FactoryBuilder:
        """A node's kube-state-metrics at one sample: cordon, Ready, `nvidia_com_gpu` capacity (`gpus`), the GPU
        feature discovery label `nvidia.com/gpu.count`, allocatable CPU and the CPU requested by its pods.
        `offset_ms`, `target` as for `_kube_row`."""
        at: dict[str, Any] = {"offset_ms": offset_ms, "target": target}
        self._kube_row(
            ts_index, "kube_node_spec_unschedulable", 1.0 if cordoned else 0.0, {"node": node}, **at
        )
        for status in ("true", "false", "unknown"):
            value = 1.0 if (status == "true") == ready and status != "unknown" else 0.0
            labels = {"node": node, "condition": "Ready", "status": status}
            self._kube_row(ts_index, "kube_node_status_condition", value, labels, **at)
        if gpus is not None:
            labels = {"node": node, "resource": "nvidia_com_gpu", "unit": "integer"}
            self._kube_row(ts_index, "kube_node_status_capacity", gpus, labels, **at)
        if gpu_count_label is not None:
            labels = {"node": node, "label_nvidia_com_gpu_count": str(gpu_count_label)}
            self._kube_row(ts_index, "kube_node_labels", 1.0, labels, **at)
        if allocatable_cpu is not None:
            labels = {"node": node, "resource": "cpu", "unit": "core"}
            self._kube_row(ts_index, "kube_node_status_allocatable", allocatable_cpu, labels, **at)
        if requested_cpu is not None:
            labels = {
                "namespace": "busy",
                "pod": "cpu-hog",
                "container": "c",
                "node": node,
                "resource": "cpu",
            }
            self._kube_row(ts_index, "kube_pod_container_resource_requests", requested_cpu, labels, **at)
        return self

    def pod_info(
        self, namespace: str, pod: str, node: str, ts_index: int, *, target: str | None = None
    ) -> FactoryBuilder:
        """kube_pod_info: the node kube-state-metrics places a pod on."""
        labels = {"namespace": namespace, "pod": pod, "uid": f"uid-{pod}", "node": node}
        self._kube_row(ts_index, "kube_pod_info", 1.0, labels, target=target)
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
        offset_ms: int = 0,
        target: str | None = None,
    ) -> FactoryBuilder:
        """Kueue's ClusterQueue gauges at one sample: `kueue_cluster_queue_nominal_quota`, `_resource_usage`
        and `_borrowing_limit` (`resource` raw, as Kueue labels it). `offset_ms`, `target` as for
        `_kube_row`."""
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
                self._kube_row(ts_index, metric, value, labels, offset_ms=offset_ms, target=target)
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

    # --- the built day as a source writes it (appended for tests/test_changing_pool.py) --------

    def write_openmetrics(self, path: Path) -> Path:
        """The day's dcgm-exporter and kube-state-metrics rows as one OpenMetrics file for `promtool tsdb
        create-blocks-from openmetrics` (gpumeter_sim/openmetrics.py: seconds, one block per family, `# EOF`).
        DCGM series are labelled as the GPU Operator's ServiceMonitor stores them (the exporter pod's own labels
        on every series, its holder labels renamed `exported_*`, an `up` per target); kube rows their `target`
        as job and instance, else kube-state-metrics' usual ones. DRA objects are not metrics: see
        `k8s_documents`."""
        from gpumeter_sim.openmetrics import write_openmetrics

        raw = self.build()
        write_openmetrics([(raw.dcgm, raw.kube)], Path(path))
        return Path(path)

    def k8s_documents(self) -> dict[int | None, tuple[dict[str, Any], dict[str, Any]]]:
        """The DRA objects as `kubectl get resourceclaims,resourceslices -A -o json` lists, per snapshot:
        {snapshot time in epoch ms (None: of unknown time): (ResourceClaim list, ResourceSlice list)}.
        gpumeter.ingest.k8s_objects.parse_resource_claims / parse_resource_slices read them back into the rows
        `claim` and `slice_device` wrote (marker rows included for a snapshot of known time)."""
        times = {r.get("snapshot_ms") for r in (*self._claims, *self._slices)}
        out: dict[int | None, tuple[dict[str, Any], dict[str, Any]]] = {}
        for at in sorted(times, key=lambda t: -1 if t is None else t):
            claims = [r for r in self._claims if r.get("snapshot_ms") == at and r.get("claim_name")]
            slices = [r for r in self._slices if r.get("snapshot_ms") == at and r.get("device")]
            out[at] = (_claims_document(claims), _slices_document(slices))
        return out

    def write_parquet_source(self, root: Path) -> Path:
        """The day as a `kind: parquet` source folder (gpumeter.ingest.sources.ParquetRawSource):
        `<table>/cluster=<c>/day=<d>/data.parquet` (rows before the day in the day before's folder, as a
        simulated fleet writes them), DRA objects of unknown time as `k8s/cluster=<c>/day=<d>/
        resourceclaims.json` / `resourceslices.json`, timed ones as time-named snapshot files."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from gpumeter.ingest.k8s_objects import write_snapshot

        root = Path(root)
        raw = self.build()
        before = self.day - timedelta(days=1)
        for name, table in (("raw_dcgm_samples", raw.dcgm), ("raw_kube_samples", raw.kube)):
            early = pc.less(table.column("ts_ms"), self.day_start_ms)
            for day, rows in ((before, table.filter(early)), (self.day, table.filter(pc.invert(early)))):
                if rows.num_rows:
                    folder = root / name / f"cluster={self.cluster}" / f"day={day.isoformat()}"
                    folder.mkdir(parents=True, exist_ok=True)
                    pq.write_table(rows, folder / "data.parquet")
        k8s = root / "k8s"
        for at, (claims, slices) in self.k8s_documents().items():
            if at is None:
                folder = k8s / f"cluster={self.cluster}" / f"day={self.day.isoformat()}"
                folder.mkdir(parents=True, exist_ok=True)
                (folder / "resourceclaims.json").write_text(json.dumps(claims, indent=1), encoding="utf-8")
                (folder / "resourceslices.json").write_text(json.dumps(slices, indent=1), encoding="utf-8")
            else:
                write_snapshot(k8s, self.cluster, "resourceclaims", claims, at)
                write_snapshot(k8s, self.cluster, "resourceslices", slices, at)
        return root


def _rfc3339(ms: int) -> str:
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{ms % 1000:03d}Z" if ms % 1000 else "Z")


def _claims_document(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """ResourceClaims (resource.k8s.io/v1) of builder rows: one claim per (namespace, name, uid), its
    allocation results and its reservedFor pods."""
    claims: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["claim_namespace"], r["claim_name"], r["claim_uid"])
        claim = claims.get(key)
        if claim is None:
            meta: dict[str, Any] = {"namespace": key[0], "name": key[1], "uid": key[2]}
            if r.get("created_ms") is not None:
                meta["creationTimestamp"] = _rfc3339(r["created_ms"])
            claim = claims[key] = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": meta,
                "status": {"allocation": {"devices": {"results": []}}, "reservedFor": []},
            }
        result = {k: r[k] for k in ("request", "driver", "pool", "device") if r.get(k) is not None}
        if r.get("share_id") is not None:
            result["shareID"] = r["share_id"]
        results = claim["status"]["allocation"]["devices"]["results"]
        if result not in results:
            results.append(result)
        if r.get("reserved_pod") is not None:
            ref = {"resource": "pods", "name": r["reserved_pod"]}
            if r.get("reserved_pod_uid") is not None:
                ref["uid"] = r["reserved_pod_uid"]
            if ref not in claim["status"]["reservedFor"]:
                claim["status"]["reservedFor"].append(ref)
    return {"apiVersion": "v1", "kind": "List", "items": list(claims.values())}


def _slices_document(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """ResourceSlices (resource.k8s.io/v1) of builder rows: one slice per (driver, pool, node), its devices
    with NVIDIA's attributes (`type`, `uuid`, `parentUUID`, `profile`, `productName`)."""
    slices: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["driver"], r["pool"], r["node"])
        item = slices.get(key)
        if item is None:
            meta: dict[str, Any] = {"name": f"{key[2]}-{key[0]}-{len(slices)}"}
            if r.get("created_ms") is not None:
                meta.update(creationTimestamp=_rfc3339(r["created_ms"]), generation=1)
            item = slices[key] = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": meta,
                "spec": {"driver": key[0], "nodeName": key[2], "pool": {"name": key[1]}, "devices": []},
            }
        names = {
            "type": "device_type",
            "uuid": "uuid",
            "parentUUID": "parent_uuid",
            "profile": "profile",
            "productName": "product_name",
        }
        attributes = {a: {"string": r[c]} for a, c in names.items() if r.get(c) is not None}
        item["spec"]["devices"].append({"name": r["device"], "attributes": attributes})
    return {"apiVersion": "v1", "kind": "List", "items": list(slices.values())}


def edit_config(path: Path, change: Callable[[dict[str, Any]], None], to: Path | None = None) -> Path:
    """A config file changed as YAML data, the way a person edits it, written to `to` (default: in place)."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    change(doc)
    target = to or path
    target.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return target


def invoiced_by_hand(daily: pl.DataFrame, minor_unit: int) -> dict[str, Decimal]:
    """Each tenant's amount as its invoice says it, from the mart by hand: per (month, tenant, charge type,
    GPU model, MIG profile) the exact Σ units ÷ units per currency, rounded half to even once, then summed."""
    lines: dict[tuple, Fraction] = {}
    for r in daily.to_dicts():
        key = (r["day"].strftime("%Y-%m"), r["tenant"], r["charge_type"], r["gpu_model"], r["mig_profile"])
        lines[key] = lines.get(key, Fraction(0)) + Fraction(
            int(r["amount_units"]), int(r["units_per_currency"])
        )
    totals: dict[str, Decimal] = {}
    for (_, tenant, *_), exact in lines.items():
        rounded = Decimal(round(exact * 10**minor_unit)).scaleb(-minor_unit)
        totals[tenant] = totals.get(tenant, Decimal(0)) + rounded
    return totals
