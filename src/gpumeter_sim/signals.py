"""The series the factory's exporters publish on a day, in the raw-samples schema (gpumeter.ingest.schema):
dcgm-exporter's per GPU and MIG instance, kube-state-metrics', OpenCost's and Kueue's per node, pod and
queue; with the day's DRA objects, `simulate_day`. `iter_day_parts` gives the same day by node groups."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import date
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpumeter.ingest.row_order import lexicographic_order
from gpumeter.ingest.schema import (
    DCGM_ENERGY,
    DCGM_FB_FREE,
    DCGM_FB_USED,
    DCGM_GPU_UTIL,
    DCGM_GR_ENGINE_ACTIVE,
    DCGM_POWER,
    DCGM_TEMP,
    DCGM_XID,
    RAW_DCGM_SCHEMA,
    RAW_KUBE_SCHEMA,
    dcgm_series_key,
)
from gpumeter_sim.activity import (
    DayContext,
    Device,
    GpuDay,
    build_day,
    energy_base,
    energy_counter,
    gpu_day,
    record_energy,
)
from gpumeter_sim.catalog import GIB, KINDS, KUEUE_CLUSTER_QUEUES, KUEUE_COHORT, KUEUE_FLAVOR, MODELS
from gpumeter_sim.dra import claim_snapshots, resource_claims, resource_slices, slice_snapshots
from gpumeter_sim.layout import GpuInfo, Lane, MigInstance, factory_layout, lane_index
from gpumeter_sim.pods import Pod, day_pods
from gpumeter_sim.spec import DAY_S, KSM_INSTANCES, KSM_JOB, ROLLOUT_S, FactorySpec


class _Rows:
    """Samples of many series, gathered as numpy arrays: sample index, metric code, value and label-set code
    (label sets and metrics are numbered as they come)."""

    def __init__(self) -> None:
        self.idx: list[np.ndarray] = []
        self.metric: list[np.ndarray] = []
        self.value: list[np.ndarray] = []
        self.label: list[np.ndarray] = []
        self.labels: dict[Any, int] = {}
        self.metrics: dict[str, int] = {}

    def label_code(self, key: Any) -> int:
        code = self.labels.get(key)
        if code is None:
            code = self.labels[key] = len(self.labels)
        return code

    def add(self, idx: np.ndarray, metric: str, values: np.ndarray | float, labels: np.ndarray | int) -> None:
        if len(idx) == 0:
            return
        m = self.metrics.setdefault(metric, len(self.metrics))
        self.idx.append(idx.astype(np.int32, copy=False))
        self.metric.append(np.full(len(idx), m, dtype=np.int16))
        self.value.append(np.broadcast_to(np.asarray(values, dtype=np.float64), idx.shape))
        self.label.append(np.broadcast_to(np.asarray(labels, dtype=np.int32), idx.shape))

    def table(
        self,
        ctx: DayContext,
        schema: pa.Schema,
        label_columns: dict[str, pa.Array],
        phase_s: int = 0,
        by_label: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> pa.Table:
        """The rows as a raw-schema table; sample i is at d0 + phase_s + i * step. In time order, or with
        `by_label` (each label set's major and minor rank) by (major, time, minor, metric name): the raw
        zone's order of DCGM rows (gpumeter.ingest.row_order), made from small integers, no string compared."""
        if not self.idx:
            return schema.empty_table()
        idx = np.concatenate(self.idx)
        if by_label is None:
            order = np.argsort(idx, kind="stable")
        else:
            major, minor = (rank[np.concatenate(self.label)] for rank in by_label)
            metric_rank = np.empty(len(self.metrics), np.int64)
            metric_rank[np.argsort(np.array(list(self.metrics), dtype=object))] = np.arange(len(self.metrics))
            metric = metric_rank[np.concatenate(self.metric)]
            order = lexicographic_order([major, idx.astype(np.int64) - int(idx.min()), minor, metric])
        idx = idx[order]
        metric = pa.array(list(self.metrics)).take(pa.array(np.concatenate(self.metric)[order]))
        labels = pa.array(np.concatenate(self.label)[order])
        columns: dict[str, pa.Array] = {
            "cluster": pa.array([ctx.spec.cluster]).take(pa.array(np.zeros(len(idx), dtype=np.int32))),
            "ts_ms": pa.array((ctx.d0 + phase_s) * 1000 + idx.astype(np.int64) * (ctx.step * 1000)),
            "metric": metric,
            "value": pa.array(np.concatenate(self.value)[order]),
        }
        for name, col in label_columns.items():
            columns[name] = col.take(labels)
        # A column the simulator does not write (e.g. the kube scrape target) is null.
        return pa.table([columns.get(f.name, pa.nulls(len(idx), f.type)) for f in schema], schema=schema)


_DCGM_LABEL_COLUMNS = RAW_DCGM_SCHEMA.names[
    4 : RAW_DCGM_SCHEMA.get_field_index("series_key")
]  # hostname ... dra_device_name
WHOLE_METRICS = (
    DCGM_GPU_UTIL, DCGM_GR_ENGINE_ACTIVE, DCGM_FB_USED, DCGM_FB_FREE, DCGM_POWER, DCGM_ENERGY, DCGM_XID, DCGM_TEMP,
)  # fmt: skip
MIG_INSTANCE_METRICS = (DCGM_GR_ENGINE_ACTIVE, DCGM_FB_USED)
MIG_PARENT_METRICS = (DCGM_POWER, DCGM_ENERGY, DCGM_XID, DCGM_TEMP)


# --- dcgm-exporter -------------------------------------------------------------------------------


def _dcgm_key(
    gpu: GpuInfo, inst: MigInstance | None, pod: Pod | None, vgpu: int | None
) -> tuple[str | None, ...]:
    return (
        gpu.node, gpu.uuid, str(gpu.index), MODELS[gpu.model].model_name,
        str(inst.gi_id) if inst else None, inst.profile if inst else None,
        pod.namespace if pod else None, pod.name if pod else None, pod.container if pod else None,
        str(vgpu) if vgpu is not None else None,
        None, None, None, None, None,
    )  # fmt: skip


def _holder_codes(
    rows: _Rows,
    ctx: DayContext,
    gpu: GpuInfo,
    inst: MigInstance | None,
    holder: np.ndarray,
    vgpu: int | None,
    dra: bool,
) -> np.ndarray:
    codes = np.full(ctx.n, rows.label_code(_dcgm_key(gpu, inst, None, None)), dtype=np.int32)
    if dra:  # dcgm-exporter without --kubernetes-enable-dra: no pod labels on DRA devices
        return codes
    for pi in np.unique(holder[holder >= 0]):
        codes[holder == pi] = rows.label_code(_dcgm_key(gpu, inst, ctx.pods[int(pi)], vgpu))
    return codes


def _dcgm_rows(ctx: DayContext, rows: _Rows, gpu: GpuInfo, gd: GpuDay, energy: np.ndarray) -> None:
    n = ctx.n
    observed = np.zeros(n, dtype=bool)
    for seg in gd.segments:  # a GPU reset between two layouts: no series at all
        observed[seg.i0 : seg.i1] = True
    ow = ctx.layout.outage
    if ow is not None and ctx.layout.outage_node == gpu.node and ow.day == ctx.day:
        observed[ow.start_s // ctx.step : ow.end_s // ctx.step] = False
    # autoscale: no series of a GPU while its node is not in the pool.
    alive_s, gone_s = ctx.layout.node_lifetime(gpu.node, ctx.day)
    observed[: -(-alive_s // ctx.step)] = False
    observed[-(-gone_s // ctx.step) :] = False
    rng = np.random.default_rng([ctx.spec.seed, ctx.day.toordinal(), 6, gpu.gidx])
    for seg in gd.segments:
        seen = observed
        if seg.i0 > 0 or seg.i1 < n:
            seen = np.zeros(n, dtype=bool)
            seen[seg.i0 : seg.i1] = observed[seg.i0 : seg.i1]
        devices = [d for d in gd.devices if d.segment is seg]
        if seg.instances is None:
            _whole_rows(ctx, rows, gpu, gd, energy, devices[0], seen, rng)
        else:
            _mig_rows(ctx, rows, gpu, gd, energy, devices, seen, rng)


def _whole_rows(
    ctx: DayContext, rows: _Rows, gpu: GpuInfo, gd: GpuDay, energy: np.ndarray, device: Device,
    observed: np.ndarray, rng: np.random.Generator,
) -> None:  # fmt: skip
    n = ctx.n
    model = MODELS[gpu.model]
    holders, busy, mem = device.holders, device.busy, device.mem
    held = np.any(np.stack(holders) >= 0, axis=0)
    fb_used = np.where(
        held, np.rint(np.clip(mem * (1 + 0.002 * rng.normal(size=n)), 0, 1) * model.fb_mib), 0.0
    )
    values = {
        DCGM_GPU_UTIL: np.rint(busy * 100.0),
        DCGM_GR_ENGINE_ACTIVE: np.round(np.clip(busy - np.abs(0.008 * rng.normal(size=n)), 0.0, 1.0), 4),
        DCGM_FB_USED: fb_used,
        DCGM_FB_FREE: model.fb_mib - fb_used,
        DCGM_POWER: gd.power,
        DCGM_ENERGY: energy.astype(np.float64),
        DCGM_XID: gd.xid,
        DCGM_TEMP: gd.temp,
    }
    if gpu.timesliced:
        series: list[tuple[np.ndarray, np.ndarray]] = []
        for s, holder in enumerate(holders):
            codes = _holder_codes(rows, ctx, gpu, None, holder, s, False)
            series.append((observed & (holder >= 0), codes))
        unheld = rows.label_code(_dcgm_key(gpu, None, None, None))
        series.append((observed & ~held, np.full(n, unheld, dtype=np.int32)))
    else:
        series = [(observed, _holder_codes(rows, ctx, gpu, None, holders[0], None, gpu.dra))]
    for mask, codes in series:
        where = np.flatnonzero(mask)
        for metric in WHOLE_METRICS:
            rows.add(where, metric, values[metric][where], codes[where])


def _mig_rows(
    ctx: DayContext, rows: _Rows, gpu: GpuInfo, gd: GpuDay, energy: np.ndarray, devices: list[Device],
    observed: np.ndarray, rng: np.random.Generator,
) -> None:  # fmt: skip
    """The GPU-level series (no GPU_I_ID, no pod: power, energy, XID, temperature) and one series per MIG
    instance (GR_ENGINE_ACTIVE and FB_USED, with its pod)."""
    n = ctx.n
    model = MODELS[gpu.model]
    where = np.flatnonzero(observed)
    parent = rows.label_code(_dcgm_key(gpu, None, None, None))
    parent_values = {
        DCGM_POWER: gd.power,
        DCGM_ENERGY: energy.astype(np.float64),
        DCGM_XID: gd.xid,
        DCGM_TEMP: gd.temp,
    }
    for metric in MIG_PARENT_METRICS:
        rows.add(where, metric, parent_values[metric][where], parent)
    for device in devices:
        inst = device.inst
        assert inst is not None
        codes = _holder_codes(rows, ctx, gpu, inst, device.holders[0], None, gpu.dra)
        inst_fb = model.fb_mib * inst.memory_slices / 8
        held = device.holders[0] >= 0
        gr = np.round(np.clip(device.busy - np.abs(0.008 * rng.normal(size=n)), 0.0, 1.0), 4)
        fb_used = np.where(held, np.rint(device.mem * inst_fb), 0.0)
        rows.add(where, DCGM_GR_ENGINE_ACTIVE, gr[where], codes[where])
        rows.add(where, DCGM_FB_USED, fb_used[where], codes[where])


# --- kube-state-metrics, OpenCost and Kueue ------------------------------------------------------


def _json(labels: dict[str, str]) -> str:
    return json.dumps(labels, separators=(",", ":"), sort_keys=True)


PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def _gpu_layout_pieces(ctx: DayContext, gpus: list[GpuInfo]) -> list[tuple[int, int, bool]]:
    """[k0, k1) ranges of the day's kube scrapes and whether the re-partition's new layouts hold then: the
    device plugin reports the new MIG capacity from the end of the re-partition."""
    rw = ctx.layout.repartition
    if rw is None or not any(g.mig_after is not None for g in gpus) or ctx.day < rw.day:
        return [(0, ctx.n, False)]
    if ctx.day > rw.day:
        return [(0, ctx.n, True)]
    k = ctx.kidx(ctx.d0 + rw.end_s)
    return [(0, k, False), (k, ctx.n, True)]


def _node_capacity(gpus: list[GpuInfo], after: bool) -> dict[str, float]:
    """The device plugin's GPU capacity of a node: whole GPUs, time-sliced replicas, MIG instances by
    profile (mixed strategy); DRA-managed GPUs are not in it."""

    def mig(g: GpuInfo) -> tuple[MigInstance, ...]:
        return g.mig_after if after and g.mig_after is not None else g.mig

    capacity: dict[str, float] = {}
    whole = [g for g in gpus if not mig(g) and not g.dra and not g.timesliced]
    capacity["nvidia_com_gpu"] = float(len(whole))
    for g in gpus:
        if g.timesliced:
            capacity["nvidia_com_gpu_shared"] = capacity.get("nvidia_com_gpu_shared", 0.0) + 3.0
        if mig(g) and not g.dra:
            for m in mig(g):
                key = f"nvidia_com_mig_{m.profile.replace('.', '_')}"
                capacity[key] = capacity.get(key, 0.0) + 1.0
    return capacity


def _alive_scrapes(ctx: DayContext, node: str) -> tuple[int, int]:
    """[first, end) kube scrape indices of the day at which the node is in the pool (autoscale)."""
    alive_s, gone_s = ctx.layout.node_lifetime(node, ctx.day)
    return ctx.kidx(ctx.d0 + alive_s), ctx.kidx(ctx.d0 + gone_s)


def _kube_rows(ctx: DayContext, rows: _Rows) -> None:
    n = ctx.n
    every = np.arange(n, dtype=np.int32)
    layout = ctx.layout
    alive = {node.name: _alive_scrapes(ctx, node.name) for node in layout.nodes}
    for node in layout.nodes:
        model = MODELS[node.model]
        gpus = [g for g in layout.gpus if g.node == node.name]
        units = {"cpu": "core", "memory": "byte"}
        # autoscale: a node's series (and its pods', below) exist only while it is in the pool.
        a0, a1 = alive[node.name]
        for k0, k1, after in _gpu_layout_pieces(ctx, gpus):
            k0, k1 = max(k0, a0), min(k1, a1)
            if k1 <= k0:
                continue
            capacity = _node_capacity(gpus, after)
            for metric, cpu, memory in (
                ("kube_node_status_capacity", model.node_cpu_cores, model.node_memory_bytes),
                (
                    "kube_node_status_allocatable",
                    model.node_cpu_cores - 2,
                    model.node_memory_bytes - 16 * GIB,
                ),
            ):
                for resource, value in (
                    *sorted(capacity.items()),
                    ("cpu", float(cpu)),
                    ("memory", float(memory)),
                ):
                    unit = units.get(resource, "integer")
                    code = rows.label_code(_json({"node": node.name, "resource": resource, "unit": unit}))
                    rows.add(every[k0:k1], metric, value, code)
            node_labels = {
                "node": node.name,
                "label_nvidia_com_gpu_count": str(node.gpus),
                "label_nvidia_com_gpu_product": model.product_label,
                "label_node_kubernetes_io_instance_type": model.instance_type,
            }
            if any(g.mig_after if after and g.mig_after is not None else g.mig for g in gpus):
                node_labels["label_nvidia_com_mig_strategy"] = "mixed"
            rows.add(every[k0:k1], "kube_node_labels", 1.0, rows.label_code(_json(node_labels)))
        lived = every[a0:a1]
        rows.add(
            lived, "kube_node_spec_unschedulable", 1.0 if node.cordoned else 0.0,
            rows.label_code(_json({"node": node.name})),
        )  # fmt: skip
        for status in ("true", "false", "unknown"):
            code = rows.label_code(_json({"node": node.name, "condition": "Ready", "status": status}))
            rows.add(lived, "kube_node_status_condition", 1.0 if status == "true" else 0.0, code)
        cost_labels = {
            "node": node.name,
            "instance_type": model.instance_type,
            "region": "us-east-1",
            "provider_id": f"aws:///us-east-1a/i-{hashlib.sha256(node.name.encode()).hexdigest()[:17]}",
        }
        rows.add(lived, "node_gpu_hourly_cost", model.price_per_gpu_hour, rows.label_code(_json(cost_labels)))
    for pod in ctx.pods:
        # A pod's series exist from its creation until its deletion (then they vanish: R1a staleness), and
        # only while its node is in the pool.
        a0, a1 = alive.get(pod.node, (0, ctx.n))
        e0, e1 = max(ctx.kidx(pod.created), a0), min(ctx.kidx(pod.deleted), a1)
        if e1 <= e0:
            continue
        idx = every[e0:e1]
        r0, r1 = ctx.kidx(pod.running), ctx.kidx(pod.finished)
        base = {"namespace": pod.namespace, "pod": pod.name, "uid": pod.uid}
        info = {
            **base,
            "node": pod.node,
            "created_by_kind": pod.owner_kind,
            "created_by_name": pod.owner_name,
        }
        rows.add(idx, "kube_pod_info", 1.0, rows.label_code(_json(info)))
        cut = e0 if pod.relabel_at is None else min(max(ctx.kidx(pod.relabel_at), e0), e1)
        if cut > e0:  # relabelled: the old label set's series ends, the new one's starts
            rows.add(
                every[e0:cut], "kube_pod_labels", 1.0, rows.label_code(_json({**base, **dict(pod.labels)}))
            )
        after = pod.labels if pod.relabel_at is None else pod.labels_after
        rows.add(every[cut:e1], "kube_pod_labels", 1.0, rows.label_code(_json({**base, **dict(after)})))
        phase_of = {
            "Pending": idx < r0,
            "Running": (idx >= r0) & (idx < r1),
            pod.end_phase: idx >= r1,
        }
        for phase in PHASES:
            mask = phase_of.get(phase)
            values = mask.astype(np.float64) if mask is not None else 0.0
            rows.add(idx, "kube_pod_status_phase", values, rows.label_code(_json({**base, "phase": phase})))
        for resource, unit, value in pod.requests:
            labels = {
                **base,
                "container": pod.container,
                "node": pod.node,
                "resource": resource,
                "unit": unit,
            }
            rows.add(idx, "kube_pod_container_resource_requests", value, rows.label_code(_json(labels)))
        if pod.claim_name:
            labels = {**base, "claim_name": "gpu", "resourceclaim_name": pod.claim_name}
            rows.add(idx, "kube_pod_resourceclaim_info", 1.0, rows.label_code(_json(labels)))
        if pod.annotations:  # kube-state-metrics with --metric-annotations-allowlist=pods=[gpu-fraction]
            annotated = {**base, **dict(pod.annotations)}
            rows.add(idx, "kube_pod_annotations", 1.0, rows.label_code(_json(annotated)))
    _kueue_rows(ctx, rows)


def _kueue_rows(ctx: DayContext, rows: _Rows) -> None:
    """kueue_cluster_queue_nominal_quota / _borrowing_limit / _resource_usage and
    kueue_local_queue_resource_usage. Cluster-wide series: written once per day, by the part of the day
    (`iter_day_parts`) that holds the first node, from every pod of the day (queues: catalog.KUEUE_*)."""
    full = factory_layout(ctx.spec)
    names = {node.name for node in ctx.layout.nodes}
    if full.nodes[0].name not in names:
        return
    pods = ctx.pods if len(names) == len(full.nodes) else day_pods(ctx.spec, ctx.day)
    # Nominal quota: the whole GPUs of the lanes whose pods the queue admits (usage never exceeds it).
    quota = dict.fromkeys(sorted(set(KUEUE_CLUSTER_QUEUES.values())), 0.0)
    for lane in full.lanes:
        if lane.kind in ("free", "timesliced", "kai") or lane.dra or lane.devices[0][1] is not None:
            continue
        for kind_name in lane.slot_kinds:
            queue = KUEUE_CLUSTER_QUEUES.get(KINDS[kind_name].namespaces[0])
            if queue is not None:
                quota[queue] += len(lane.devices)
    every = np.arange(ctx.n, dtype=np.int32)
    cq_usage = {queue: np.zeros(ctx.n) for queue in quota}
    lq_usage: dict[str, np.ndarray] = {}
    for pod in pods:
        queue = KUEUE_CLUSTER_QUEUES.get(pod.namespace)
        gpus = sum(value for resource, _, value in pod.requests if resource == "nvidia_com_gpu")
        if queue is None or not gpus:
            continue
        r0, r1 = ctx.kidx(pod.running), ctx.kidx(pod.finished)  # admitted and holding its GPUs
        cq_usage[queue][r0:r1] += gpus
        lq_usage.setdefault(pod.namespace, np.zeros(ctx.n))[r0:r1] += gpus
    for queue, nominal in quota.items():
        labels = {"cohort": KUEUE_COHORT, "cluster_queue": queue, "flavor": KUEUE_FLAVOR}
        code = rows.label_code(_json({**labels, "resource": "nvidia.com/gpu"}))
        rows.add(every, "kueue_cluster_queue_nominal_quota", nominal, code)
        rows.add(every, "kueue_cluster_queue_borrowing_limit", float(nominal // 2), code)
        rows.add(every, "kueue_cluster_queue_resource_usage", cq_usage[queue], code)
    for namespace in sorted(lq_usage):
        labels = {"namespace": namespace, "local_queue": f"{namespace}-queue", "flavor": KUEUE_FLAVOR}
        code = rows.label_code(_json({**labels, "resource": "nvidia.com/gpu"}))
        rows.add(every, "kueue_local_queue_resource_usage", lq_usage[namespace], code)


# --- a day, whole or by node groups --------------------------------------------------------------


def _dcgm_table(
    ctx: DayContext,
    gpus: Iterable[GpuInfo],
    lanes: dict[tuple[int, int | None], Lane],
    base: np.ndarray,
    incs: dict[int, np.ndarray],
    gpu_order: bool = False,
) -> pa.Table:
    """dcgm-exporter's series of `gpus` for the day (`base`: their energy counters at midnight), in time order
    or with `gpu_order` in the raw zone's order; each GPU's energy increments go to `incs`."""
    rows = _Rows()
    for gpu in gpus:
        gd = gpu_day(ctx, gpu, lanes)
        incs[gpu.gidx] = gd.energy_inc
        _dcgm_rows(ctx, rows, gpu, gd, energy_counter(ctx, gpu.gidx, gd.energy_inc, base))
    columns = {
        name: pa.array([key[i] for key in rows.labels], type=pa.string())
        for i, name in enumerate(_DCGM_LABEL_COLUMNS)
    }
    # Each series' key, as the pull writes it (one per label set, not per row).
    keys = [
        dcgm_series_key(dict(zip(_DCGM_LABEL_COLUMNS, key, strict=True), cluster=ctx.spec.cluster))
        for key in rows.labels
    ]
    columns["series_key"] = pa.array(keys, pa.uint64())
    if not gpu_order:
        return rows.table(ctx, RAW_DCGM_SCHEMA, columns)
    # Each label set's GPU, as the rank of its UUID among the part's (a null last), and its series key's rank.
    at = _DCGM_LABEL_COLUMNS.index("uuid")
    uuids = [key[at] for key in rows.labels]
    gpu_rank = {u: r for r, u in enumerate(sorted(set(uuids), key=lambda u: (u is None, u or "")))}
    by_key = np.empty(len(keys), np.int64)
    by_key[np.argsort(np.array(keys, dtype=np.uint64), kind="stable")] = np.arange(len(keys))
    by_gpu = np.array([gpu_rank[u] for u in uuids], np.int64)
    return rows.table(ctx, RAW_DCGM_SCHEMA, columns, by_label=(by_gpu, by_key))


def _kube_table(ctx: DayContext) -> pa.Table:
    """kube-state-metrics', OpenCost's and Kueue's series of the context's nodes and pods for the day."""
    rows = _Rows()
    _kube_rows(ctx, rows)
    columns = {"labels": pa.array(list(rows.labels), type=pa.string())}
    table = rows.table(ctx, RAW_KUBE_SCHEMA, columns, ctx.phase)
    return _rolled_out(ctx, table) if ctx.spec.ksm_rollout else table


def _rolled_out(ctx: DayContext, kube: pa.Table) -> pa.Table:
    """kube-state-metrics' rows under its scrape targets (FactorySpec.ksm_rollout): the old instance before
    the rollout day, the new one after it; on that day the old one until ROLLOUT_S[1], the new one from
    ROLLOUT_S[0], both in between (a Deployment's surge). OpenCost and Kueue keep no target (their exporter)."""
    rollout_day = ctx.spec.changing_day
    d0_ms = ctx.d0 * 1000
    old_until, new_from = d0_ms, d0_ms  # a day after the rollout: the new instance all day
    if ctx.day < rollout_day:
        old_until = new_from = d0_ms + DAY_S * 1000
    elif ctx.day == rollout_day:
        new_from, old_until = (d0_ms + t * 1000 for t in ROLLOUT_S)
    ksm = pc.starts_with(kube["metric"], "kube_")
    times = kube["ts_ms"]
    old = kube.filter(pc.and_(ksm, pc.less(times, old_until)))
    new = kube.filter(pc.and_(ksm, pc.greater_equal(times, new_from)))
    old_target, new_target = (f"{KSM_JOB}/{instance}" for instance in KSM_INSTANCES)
    at = kube.schema.get_field_index("target")
    parts = [
        kube.filter(pc.invert(ksm)),
        old.set_column(at, "target", pa.array([old_target] * old.num_rows, pa.string())),
        new.set_column(at, "target", pa.array([new_target] * new.num_rows, pa.string())),
    ]
    table = pa.concat_tables(parts)
    return table.take(pc.sort_indices(table, [("ts_ms", "ascending")]))


@dataclass(frozen=True)
class SimulatedDay:
    dcgm: pa.Table  # RAW_DCGM_SCHEMA, sorted by ts_ms
    kube: pa.Table  # RAW_KUBE_SCHEMA, sorted by ts_ms
    resource_claims: dict[str, Any]  # kubectl get resourceclaims -A -o json: every claim of the day
    resource_slices: dict[str, Any]  # kubectl get resourceslices -o json: every device ever published
    day: date
    # With dra_snapshots_s: the snapshot job's lists, (time taken in epoch ms, list), every dra_snapshots_s.
    claim_snapshots: tuple[tuple[int, dict[str, Any]], ...] = ()
    slice_snapshots: tuple[tuple[int, dict[str, Any]], ...] = ()


def simulate_day(spec: FactorySpec, day: date) -> SimulatedDay:
    """One UTC day [day 00:00Z, day+1 00:00Z) of the factory. Pure: depends only on (spec, day)."""
    ctx = build_day(spec, day)
    incs: dict[int, np.ndarray] = {}
    dcgm = _dcgm_table(ctx, ctx.layout.gpus, lane_index(ctx.layout), energy_base(spec, day), incs)
    record_energy(ctx, incs)
    return SimulatedDay(
        dcgm=dcgm,
        kube=_kube_table(ctx),
        resource_claims=resource_claims(spec, ctx.pods),
        resource_slices=resource_slices(spec),
        day=day,
        claim_snapshots=claim_snapshots(spec, day, ctx.pods),
        slice_snapshots=slice_snapshots(spec, day),
    )


def iter_days(spec: FactorySpec) -> Iterator[SimulatedDay]:
    """Every day of the spec, in order."""
    for day in spec.day_list:
        yield simulate_day(spec, day)


@dataclass(frozen=True)
class DayPart:
    """The raw samples of a group of nodes for one day: what `write_parquet` stores as one file."""

    dcgm: pa.Table
    kube: pa.Table


def iter_day_parts(spec: FactorySpec, day: date, nodes_per_part: int = 16) -> Iterator[DayPart]:
    """The day of `simulate_day`, node group by node group, so that a fleet's day (hundreds of millions of
    rows) is never whole in memory. With every node in one part, the part is `simulate_day`'s tables."""
    yield from day_parts(build_day(spec, day), nodes_per_part)


def day_parts(ctx: DayContext, nodes_per_part: int, gpu_order: bool = False) -> Iterator[DayPart]:
    """`iter_day_parts` of a day already built (`activity.build_day`); with `gpu_order`, each part's DCGM rows
    in the raw zone's order (gpumeter.ingest.row_order) instead of time order."""
    layout = ctx.layout
    lanes = lane_index(layout)
    base = energy_base(ctx.spec, ctx.day)
    incs: dict[int, np.ndarray] = {}
    for first in range(0, len(layout.nodes), nodes_per_part):
        nodes = layout.nodes[first : first + nodes_per_part]
        names = {node.name for node in nodes}
        dcgm = _dcgm_table(ctx, (g for g in layout.gpus if g.node in names), lanes, base, incs, gpu_order)
        # The part's nodes and the pods placed on them: kube rows are per node and per pod.
        part = replace(
            ctx, layout=replace(layout, nodes=nodes), pods=[pod for pod in ctx.pods if pod.node in names]
        )
        yield DayPart(dcgm, _kube_table(part))
    record_energy(ctx, incs)
