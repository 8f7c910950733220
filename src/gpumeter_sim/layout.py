"""The factory's layout, day-independent: its nodes, GPUs and their MIG instances, the lanes laid over them
(a lane is a group of devices on one node that one job at a time holds: a 4-GPU training job, one MIG
instance, a time-sliced GPU with 3 slots, ...), and where the scenario's events happen. Lane kinds follow a
fixed pattern (`catalog.LANE_PATTERN`), so that the default spec is the demo factory described in the docs
and the tests."""

from __future__ import annotations

import hashlib
import uuid as uuidlib
from dataclasses import dataclass, replace
from datetime import date, timedelta
from functools import lru_cache
from typing import Any

from gpumeter_sim.catalog import (
    KAI_SLOT_KINDS,
    LANE_PATTERN,
    MIG_PATTERN_KINDS,
    MIG_PATTERNS,
    MIG_PROFILE_IDS,
    MODELS,
    TIMESLICED_SLOT_KINDS,
)
from gpumeter_sim.spec import AUTOSCALE_S, DAY_S, DRAIN_S, REPARTITION_S, SHORT_JOB_S, FactorySpec, epoch


@dataclass(frozen=True)
class MigInstance:
    gi_id: int
    profile: str
    compute: int
    memory_slices: int
    start: int
    uuid: str
    dra_device: str | None  # ResourceSlice device name when DRA-managed


@dataclass(frozen=True)
class NodeInfo:
    name: str
    model: str
    ordinal: int
    gpus: int
    cordoned: bool
    kai: bool = False  # every GPU shared through KAI Scheduler (KAI_SLOT_KINDS)


@dataclass(frozen=True)
class GpuInfo:
    gidx: int  # global index
    node: str
    index: int  # `gpu` label
    uuid: str
    model: str
    mig: tuple[MigInstance, ...] = ()
    mig_pattern: int | None = None
    dra: bool = False
    dra_device: str | None = None  # whole-GPU DRA device name
    timesliced: bool = False
    mig_after: tuple[MigInstance, ...] | None = None  # layout after the re-partition (None: never changes)

    @property
    def is_mig(self) -> bool:
        """MIG-partitioned at the spec's start (`mig`); `mig_after` says what it becomes."""
        return bool(self.mig)

    @property
    def instances(self) -> tuple[MigInstance, ...]:
        """Every MIG instance the GPU ever has (before and after a re-partition; GPU_I_IDs differ)."""
        return self.mig + (self.mig_after or ())

    def instance(self, gi_id: int) -> MigInstance:
        return next(m for m in self.instances if m.gi_id == gi_id)


@dataclass(frozen=True)
class Lane:
    lid: int
    kind: str  # a KINDS key, "timesliced" or "free"
    node: str
    devices: tuple[tuple[int, int | None], ...]  # (gidx, gi_id)
    dra: bool = False
    group: int = -1  # lanes of one deployment share a group
    # Epoch seconds: the lane's device exists from then (a re-partition's new instance).
    since: int | None = None
    until: int | None = None  # epoch seconds: its pods are gone by then (drained for a re-partition)

    @property
    def slot_kinds(self) -> tuple[str, ...]:
        if self.kind == "kai":
            return KAI_SLOT_KINDS
        return TIMESLICED_SLOT_KINDS if self.kind == "timesliced" else (self.kind,)


@dataclass(frozen=True)
class Window:
    day: date
    start_s: int  # seconds after midnight
    end_s: int


@dataclass(frozen=True)
class Layout:
    nodes: tuple[NodeInfo, ...]
    gpus: tuple[GpuInfo, ...]
    lanes: tuple[Lane, ...]
    outage_node: str | None
    outage: Window | None
    xid_gpu: int | None
    xid: Window | None
    reset_gpu: int | None
    reset: Window | None  # start_s = reset time
    # The changing pool (FactorySpec.mig_repartition, pod_churn, relabel), all on `events_day`:
    events_day: date | None = None
    repartition: Window | None = None  # [start_s, end_s): no MIG instances (and a whole GPU's reset gap)
    repartition_gpus: tuple[int, ...] = ()  # gidx of the GPUs whose layout changes (GpuInfo.mig_after)
    whole_hold_lane: int | None = None  # the whole GPU's old lane: one pod holds it 02:00-10:00Z that day
    churn_lane: int | None = None  # vllm-0's lane (an inference replica)
    short_job_lane: int | None = None  # the DRA lane of the 20-minute job
    relabel_lane: int | None = None  # the relabelled pod's lane
    joining_node: str | None = None  # FactorySpec.autoscale: in the pool from AUTOSCALE_S[0] on events_day
    leaving_node: str | None = None  # ... and removed at AUTOSCALE_S[1] that day

    def node(self, name: str) -> NodeInfo:
        return next(n for n in self.nodes if n.name == name)

    def node_lifetime(self, name: str, day: date) -> tuple[int, int]:
        """[start, end) seconds after the day's midnight in which the node is in the pool (autoscale)."""
        if self.events_day is None or name not in (self.joining_node, self.leaving_node):
            return 0, DAY_S
        joins = name == self.joining_node
        if day < self.events_day:
            return (DAY_S, DAY_S) if joins else (0, DAY_S)
        if day > self.events_day:
            return (0, DAY_S) if joins else (0, 0)
        return (AUTOSCALE_S[0], DAY_S) if joins else (0, AUTOSCALE_S[1])


# --- names and lookups --------------------------------------------------------------------------


def hash_uuid(*parts: object) -> str:
    """A UUID derived from `parts`: the same spec always names its GPUs, pods and objects alike."""
    return str(
        uuidlib.UUID(bytes=hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:16], version=4)
    )


_ALNUM = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet Kubernetes uses for generated name suffixes


def name_suffix(*parts: object, n: int = 5) -> str:
    """A generated-name suffix (as a ReplicaSet's or a Job's pods have), derived from `parts`."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return "".join(_ALNUM[b % len(_ALNUM)] for b in digest[:n])


def lane_index(layout: Layout) -> dict[tuple[int, int | None], Lane]:
    """The lane of each device, (gidx, GPU_I_ID or None for a whole GPU)."""
    return {dev: lane for lane in layout.lanes for dev in lane.devices}


# --- the layout of a spec -----------------------------------------------------------------------


@lru_cache(maxsize=64)
def factory_layout(spec: FactorySpec) -> Layout:
    """Nodes, GPUs, MIG partitions, lanes and scenario placements of a spec (deterministic, day-independent)."""
    nodes: list[NodeInfo] = []
    for key, count in (("h100", spec.h100_nodes), ("a100", spec.a100_nodes), ("h200", spec.h200_nodes)):
        for i in range(count):
            nodes.append(NodeInfo(f"gpu-{key}-{i + 1:02d}", key, len(nodes), spec.gpus_per_node, False))
    if spec.cordoned_node:
        nodes.append(
            NodeInfo(
                f"gpu-h100-{spec.h100_nodes + 1:02d}",
                "h100",
                len(nodes),
                max(1, spec.gpus_per_node // 2),
                True,
            )
        )
    if spec.kai_gpus:  # last, so that every other node, GPU and lane is the same with or without it
        kai_index = spec.h100_nodes + 1 + int(spec.cordoned_node)
        nodes.append(
            NodeInfo(f"gpu-h100-{kai_index:02d}", "h100", len(nodes), spec.kai_gpus, False, kai=True)
        )
    schedulable = [(n, i) for n in nodes if not n.cordoned and not n.kai for i in range(n.gpus)]

    def tier(item: tuple[NodeInfo, int]) -> tuple[int, ...]:
        n, i = item
        if n.model == "a100" and i < 3:
            return (0, n.ordinal, i)
        if n.model != "a100" and i == n.gpus - 1:
            return (1, n.ordinal, 0)
        return (2, int(n.model != "a100"), n.ordinal, i)

    n_mig = round(spec.mig_fraction * len(schedulable))
    mig_pattern: dict[tuple[str, int], int] = {}
    for k, (n, i) in enumerate(sorted(schedulable, key=tier)[:n_mig]):
        mig_pattern[(n.name, i)] = i if tier((n, i))[0] == 0 else k % len(MIG_PATTERNS)

    # mig_repartition: the first 7 x 1g GPU is re-partitioned (and DRA-managed when the spec has DRA GPUs, so
    # that its ResourceSlice is re-published; it does not count against dra_gpus).
    repart_mig: tuple[str, int] | None = None
    if spec.mig_repartition:
        repart_mig = next(
            ((n.name, i) for n in nodes for i in range(n.gpus) if mig_pattern.get((n.name, i)) == 3), None
        )
    dra_left = spec.dra_gpus
    ts_left = spec.timesliced_gpus
    gpus: list[GpuInfo] = []
    lanes: list[Lane] = []
    kai_nodes: list[tuple[NodeInfo, dict[int, GpuInfo]]] = []
    pattern_pos = 0
    group = 0
    for n in nodes:
        node_gpus: dict[int, GpuInfo] = {}
        for i in range(n.gpus):
            gpu_uuid = "GPU-" + hash_uuid(spec.seed, spec.cluster, n.name, i)
            pattern = mig_pattern.get((n.name, i))
            if pattern is None:
                node_gpus[i] = GpuInfo(len(gpus) + i, n.name, i, gpu_uuid, n.model)
                continue
            dra = pattern == 2 and dra_left > 0
            if dra:
                dra_left -= 1
            elif (n.name, i) == repart_mig and spec.dra_gpus > 0:
                dra = True
            instances = _mig_instances(spec, n, i, MIG_PATTERNS[pattern], dra)
            node_gpus[i] = GpuInfo(
                len(gpus) + i, n.name, i, gpu_uuid, n.model, instances, pattern, dra
            )  # fmt: skip
        if n.kai:  # its lanes come last, after those a re-partition adds (so KAI changes no other lane)
            kai_nodes.append((n, node_gpus))
        elif not n.cordoned:
            whole = [i for i in range(n.gpus) if not node_gpus[i].is_mig]
            j = 0
            while j < len(whole):
                kind, width = LANE_PATTERN[pattern_pos % len(LANE_PATTERN)]
                pattern_pos += 1
                width = min(width, len(whole) - j)
                idxs = whole[j : j + width]
                j += width
                dra = False
                if kind == "timesliced":
                    if ts_left > 0:
                        ts_left -= 1
                        node_gpus[idxs[0]] = replace(node_gpus[idxs[0]], timesliced=True)
                    else:
                        kind = "research"
                if kind.startswith("dra_"):
                    kind = kind.removeprefix("dra_")
                    if dra_left > 0:
                        dra_left -= 1
                        dra = True
                        g = node_gpus[idxs[0]]
                        node_gpus[idxs[0]] = replace(g, dra=True, dra_device=f"gpu-{g.index}")
                group += 1
                if kind == "inference":
                    for i in idxs:
                        lanes.append(
                            Lane(len(lanes), kind, n.name, ((node_gpus[i].gidx, None),), group=group)
                        )
                else:
                    devices = tuple((node_gpus[i].gidx, None) for i in idxs)
                    lanes.append(Lane(len(lanes), kind, n.name, devices, dra=dra, group=group))
            for i in range(n.gpus):
                g = node_gpus[i]
                if g.is_mig:
                    assert g.mig_pattern is not None
                    for inst, kind in zip(g.mig, MIG_PATTERN_KINDS[g.mig_pattern], strict=True):
                        group += 1
                        lanes.append(
                            Lane(len(lanes), kind, n.name, ((g.gidx, inst.gi_id),), dra=g.dra, group=group)
                        )
        gpus.extend(node_gpus[i] for i in range(n.gpus))

    last = spec.days - 1
    sched_nodes = [n for n in nodes if not n.cordoned and not n.kai]
    outage_node = sched_nodes[-1].name if spec.outage and sched_nodes else None
    events = _place_events(spec, gpus, lanes, repart_mig, outage_node)
    for n, node_gpus in kai_nodes:
        for i in range(n.gpus):
            group += 1
            lanes.append(Lane(len(lanes), "kai", n.name, ((node_gpus[i].gidx, None),), group=group))
    outage = Window(spec.start + timedelta(days=min(1, last)), 13 * 3600, 15 * 3600) if outage_node else None
    whole_held = [lane for lane in lanes if lane.kind not in ("free",) and lane.devices[0][1] is None]
    xid_gpu: int | None = None
    if spec.xid_gpu and whole_held:
        vceval = [lane for lane in whole_held if lane.kind == "vceval" and not lane.dra]
        xid_gpu = (vceval or whole_held)[0].devices[0][0]
    xid = (
        Window(spec.start + timedelta(days=min(2, last)), 9 * 3600, 13 * 3600)
        if xid_gpu is not None
        else None
    )
    whole_gpus = [g.gidx for g in gpus if not g.is_mig]
    reset_gpu = whole_gpus[0] if spec.energy_reset and whole_gpus else None
    reset = (
        Window(spec.start + timedelta(days=min(3, last)), 6 * 3600, 6 * 3600)
        if reset_gpu is not None
        else None
    )
    # autoscale: nodes other than the outage's, so that each dynamic stays visible on its own.
    scaled = [n.name for n in sched_nodes if n.name != outage_node] if spec.autoscale else []
    autoscaled = {
        "joining_node": scaled[-1] if scaled else None,
        "leaving_node": scaled[0] if len(scaled) > 1 else None,
    }
    if scaled and "events_day" not in events:
        autoscaled["events_day"] = spec.changing_day
    return Layout(
        tuple(nodes),
        tuple(gpus),
        tuple(lanes),
        outage_node,
        outage,
        xid_gpu,
        xid,
        reset_gpu,
        reset,
        **events,
        **autoscaled,
    )


def _mig_instances(
    spec: FactorySpec,
    n: NodeInfo,
    i: int,
    pattern: tuple[tuple[int, int, int], ...],
    dra: bool,
    tag: str = "",
) -> tuple[MigInstance, ...]:
    """A GPU's MIG instances for a layout of (compute slices, GPU_I_ID, placement start); `tag` tells a
    later layout's instances (new MIG device UUIDs) from the first's."""
    model = MODELS[n.model]
    instances: list[MigInstance] = []
    for compute, gi_id, start in pattern:
        profile, mem = model.profile(compute)
        parts = (spec.seed, spec.cluster, n.name, i, gi_id) + ((tag,) if tag else ())
        instances.append(
            MigInstance(
                gi_id, profile, compute, mem, start, "MIG-" + hash_uuid(*parts),
                f"gpu-{i}-mig-{MIG_PROFILE_IDS[compute]}-{start}-{mem}" if dra else None,
            )
        )  # fmt: skip
    return tuple(instances)


# --- the changing pool's events -----------------------------------------------------------------

# After the re-partition: a 7 x 1g GPU becomes 2 x 3g (new GPU_I_IDs); a whole GPU becomes 3g + 2 x 2g.
MIG_TO_MIG = ((3, 1, 0), (3, 2, 4))
MIG_TO_MIG_KINDS = ("inference_small", "inference_small")
WHOLE_TO_MIG = ((3, 2, 4), (2, 3, 0), (2, 4, 2))
WHOLE_TO_MIG_KINDS = ("ft", "vceval", "free")


def _place_events(
    spec: FactorySpec,
    gpus: list[GpuInfo],
    lanes: list[Lane],
    repart_mig: tuple[str, int] | None,
    outage_node: str | None,
) -> dict[str, Any]:
    """Where the changing pool's events happen (Layout fields); updates `gpus` and `lanes` in place for a
    re-partition: the old layout's lanes end, new lanes for the new instances are appended."""
    if not (spec.mig_repartition or spec.pod_churn or spec.relabel):
        return {}
    day = spec.changing_day
    d0 = epoch(day)
    out: dict[str, Any] = {"events_day": day}
    if spec.mig_repartition:
        out["repartition"] = Window(day, *REPARTITION_S)
        changed: list[int] = []
        by_name = {(g.node, g.index): g for g in gpus}
        new_since = d0 + REPARTITION_S[1]
        if repart_mig is not None:
            g = by_name[repart_mig]
            node = _node_of(g, spec)
            after = _mig_instances(spec, node, g.index, MIG_TO_MIG, g.dra, tag="repartition")
            gpus[g.gidx] = replace(g, mig_after=after)
            changed.append(g.gidx)
            for k, lane in enumerate(lanes):
                if lane.devices[0][0] == g.gidx:
                    lanes[k] = replace(lane, until=d0 + DRAIN_S)
            for inst, kind in zip(after, MIG_TO_MIG_KINDS, strict=True):
                lanes.append(
                    Lane(
                        len(lanes), kind, g.node, ((g.gidx, inst.gi_id),), dra=g.dra,
                        group=1_000_000 + g.gidx, since=new_since,
                    )
                )  # fmt: skip
        whole = [
            lane
            for lane in lanes
            if len(lane.devices) == 1
            and lane.devices[0][1] is None
            and not lane.dra
            and not gpus[lane.devices[0][0]].timesliced
        ]
        candidates = (
            [lane for lane in whole if lane.kind == "free" and lane.node != outage_node]
            or [lane for lane in whole if lane.kind == "free"]
            or [lane for lane in whole if lane.kind in ("sandbox", "research")]
        )
        if candidates:
            old = candidates[0]
            g = gpus[old.devices[0][0]]
            after = _mig_instances(spec, _node_of(g, spec), g.index, WHOLE_TO_MIG, False, tag="repartition")
            gpus[g.gidx] = replace(g, mig_after=after)
            changed.append(g.gidx)
            lanes[old.lid] = replace(old, until=d0)  # its own jobs end by midnight; one pod holds it that day
            out["whole_hold_lane"] = old.lid
            for inst, kind in zip(after, WHOLE_TO_MIG_KINDS, strict=True):
                lanes.append(
                    Lane(
                        len(lanes), kind, g.node, ((g.gidx, inst.gi_id),),
                        group=1_000_000 + g.gidx, since=new_since,
                    )
                )  # fmt: skip
        out["repartition_gpus"] = tuple(sorted(changed))
    if spec.pod_churn:
        out["churn_lane"] = next((lane.lid for lane in lanes if lane.kind == "inference"), None)
        start, _running, end = (d0 + t for t in SHORT_JOB_S)
        out["short_job_lane"] = next(
            (
                lane.lid
                for lane in lanes
                if lane.dra
                and lane.kind == "free"
                and (lane.since is None or lane.since <= start)
                and (lane.until is None or lane.until >= end)
            ),
            None,
        )
    if spec.relabel:
        churn = out.get("churn_lane")
        out["relabel_lane"] = next(
            (lane.lid for lane in lanes if lane.kind == "idle_held"),
            next((lane.lid for lane in lanes if lane.kind == "inference" and lane.lid != churn), None),
        )
    return out


def _node_of(g: GpuInfo, spec: FactorySpec) -> NodeInfo:
    return NodeInfo(g.node, g.model, -1, spec.gpus_per_node, False)
