"""A seeded, deterministic synthetic "AI factory": a shared Kubernetes GPU pool as its exporters see it.

`simulate_day(spec, day)` returns one UTC day of raw samples in the raw-samples schema (metering.schema):
dcgm-exporter series, kube-state-metrics and OpenCost series, plus `kubectl get ... -o json` style
ResourceClaim / ResourceSlice snapshots for the DRA-managed GPUs. Every day is generated on its own from
numpy Generators seeded from (seed, day, ...), so days can be produced in any order, alone or in a run,
with identical results. The only state carried across days is the energy counter, whose value at a
midnight is the sum of the earlier days' increments (computed, and cached, from the same functions).

Layout (see `factory_layout`): nodes per GPU model, MIG GPUs chosen by `mig_fraction`, then "lanes": a
lane is a group of devices on one node that one job at a time holds (a 4-GPU training job, one MIG
instance, a time-sliced GPU with 3 slots, ...). Lane kinds follow a fixed pattern (`LANE_PATTERN`) so
that the default spec is the demo factory described in docs and in the tests.

Jobs of a lane that start on day d are placed in [d 04:00Z, d+1 04:00Z): day d's samples are made of
the jobs of day d-1 that run past midnight and the jobs of day d, so no day depends on another's random
draws. Long-running pods (inference replicas, a notebook) live through the whole period.

Vectorized: numpy per series (per device, per pod), never per sample.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid as uuidlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metering.schema import (
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
)
from metering.warehouse import atomic_write_parquet, atomic_write_text

DAY_S = 86400
FOREVER = 2**62  # "never" for pods that outlive any simulated day
XID_CODE = 79.0  # GPU has fallen off the bus
DRA_DRIVER = "gpu.nvidia.com"
DRIVER_VERSION = "580.95.05"
VCLUSTER = "eval-vc"


# --- GPU models ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuModel:
    key: str
    model_name: str  # dcgm-exporter `modelName`
    product_label: str  # GPU feature discovery `nvidia.com/gpu.product`
    fb_mib: int
    idle_w: float
    tdp_w: float
    price_per_gpu_hour: float  # OpenCost node_gpu_hourly_cost
    instance_type: str
    architecture: str
    node_cpu_cores: int
    node_memory_bytes: int
    mig_profiles: tuple[tuple[int, str, int], ...]  # (compute slices, profile, memory slices)

    def profile(self, compute: int) -> tuple[str, int]:
        for c, name, mem in self.mig_profiles:
            if c == compute:
                return name, mem
        raise KeyError(compute)


_GiB = 1024**3
_X80 = ((1, "1g.10gb", 1), (2, "2g.20gb", 2), (3, "3g.40gb", 4), (4, "4g.40gb", 4), (7, "7g.80gb", 8))
_H200 = ((1, "1g.18gb", 1), (2, "2g.35gb", 2), (3, "3g.71gb", 4), (4, "4g.71gb", 4), (7, "7g.141gb", 8))

MODELS: dict[str, GpuModel] = {
    "h100": GpuModel(
        "h100",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA-H100-80GB-HBM3",
        81559,
        72.0,
        700.0,
        4.10,
        "p5.48xlarge",
        "Hopper",
        192,
        2048 * _GiB,
        _X80,
    ),  # fmt: skip
    "a100": GpuModel(
        "a100",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA-A100-SXM4-80GB",
        81920,
        55.0,
        400.0,
        2.50,
        "p4de.24xlarge",
        "Ampere",
        96,
        1152 * _GiB,
        _X80,
    ),  # fmt: skip
    "h200": GpuModel(
        "h200",
        "NVIDIA H200",
        "NVIDIA-H200",
        143771,
        75.0,
        700.0,
        5.20,
        "p5en.48xlarge",
        "Hopper",
        192,
        2048 * _GiB,
        _H200,
    ),  # fmt: skip
}

# MIG layouts: (compute slices, GPU instance id, placement start). P0 and P1 leave 1/7 unpartitioned.
MIG_PATTERNS: tuple[tuple[tuple[int, int, int], ...], ...] = (
    ((3, 1, 0), (2, 5, 4), (1, 13, 6)),  # 3g + 2g + 1g = 6/7
    ((4, 1, 0), (2, 5, 4)),  # 4g + 2g = 6/7
    ((4, 1, 0), (3, 2, 4)),  # 4g + 3g = 7/7 (DRA-managed when dra_gpus allows)
    tuple((1, 7 + i, i) for i in range(7)),  # 7 x 1g
)
MIG_PATTERN_KINDS: tuple[tuple[str, ...], ...] = (
    ("vceval", "ft", "sandbox"),
    ("train", "free"),
    ("ft", "free"),
    ("inference_small",) * 4 + ("free",) * 3,
)

# Whole-GPU lanes, walked over the nodes' non-MIG GPUs in order (a lane never spans nodes).
LANE_PATTERN: tuple[tuple[str, int], ...] = (
    ("train", 4),
    ("ft", 2),
    ("sandbox", 1),
    ("inference", 4),  # split into 1-GPU replicas of one deployment
    ("timesliced", 1),
    ("dra_vceval", 1),
    ("dra_train", 1),
    ("idle_held", 1),
    ("train", 4),
    ("free", 1),
    ("ft", 4),
    ("vceval", 2),
    ("research", 1),
    ("free", 1),
)
TIMESLICED_SLOT_KINDS = ("ts_inference", "research_nb", "vceval_nb")
# A KAI Scheduler GPU: slot 0 is the reservation pod that holds the GPU (and that dcgm-exporter names),
# the others are fractional pods of its `runai-gpu-group` (gpu-fraction 0.5 + 0.25 + 0.25).
KAI_SLOT_KINDS = ("kai_reservation", "kai_batch", "kai_ft", "kai_nb")
KAI_NAMESPACE = "kai-resource-reservation"


@dataclass(frozen=True)
class JobKind:
    namespaces: tuple[str, ...]
    stems: tuple[str, ...]
    container: str
    owner_kind: str  # Job | ReplicaSet | StatefulSet | <none>
    hours: tuple[float, float] = (1.0, 4.0)
    gap_min: tuple[float, float] = (5.0, 60.0)
    busy: tuple[float, float] = (0.6, 0.95)
    mem: tuple[float, float] = (0.5, 0.9)
    shape: str = "train"  # train | diurnal | bursty | idle | reserve (holds, never busy)
    long_running: bool = False
    labels: tuple[tuple[str, str], ...] = ()
    vcluster: bool = False
    cpu_per_gpu: float = 8.0
    mem_gib_per_gpu: float = 64.0
    gpu_fraction: float | None = None  # KAI `gpu-fraction` annotation: requests no nvidia.com/gpu


KINDS: dict[str, JobKind] = {
    "train": JobKind(
        ("training",),
        ("pretrain-llama-70b", "pretrain-moe-8x7b", "train-vit-h"),
        "trainer",
        "Job",
        hours=(1.5, 7.0),
        gap_min=(5, 45),
        busy=(0.75, 0.97),
        mem=(0.6, 0.95),
        cpu_per_gpu=16,
        mem_gib_per_gpu=120,
        labels=(("app", "pretrain"),),
    ),  # fmt: skip
    "ft": JobKind(
        ("ft-llama", "ft-mistral"),
        ("sft-llama3-8b", "lora-mistral-7b", "dpo-llama3-70b"),
        "trainer",
        "Job",
        hours=(0.5, 3.0),
        gap_min=(10, 90),
        busy=(0.55, 0.9),
        mem=(0.4, 0.85),
        cpu_per_gpu=12,
        labels=(("app", "finetune"),),
    ),  # fmt: skip
    "sandbox": JobKind(
        ("sandbox",),
        ("dev-notebook", "scratch-bench"),
        "main",
        "Job",
        hours=(0.5, 2.5),
        gap_min=(60, 360),
        busy=(0.1, 0.6),
        mem=(0.1, 0.5),
        shape="bursty",
        cpu_per_gpu=4,
        mem_gib_per_gpu=32,
        labels=(("app", "scratch"),),
    ),  # fmt: skip
    "inference": JobKind(
        ("inference",),
        ("llm-serve",),
        "vllm",
        "ReplicaSet",
        busy=(0.35, 0.7),
        mem=(0.88, 0.92),
        shape="diurnal",
        long_running=True,
        labels=(("app", "llm-serve"),),
    ),  # fmt: skip
    "inference_small": JobKind(
        ("inference",),
        ("reranker-serve",),
        "server",
        "ReplicaSet",
        busy=(0.2, 0.5),
        mem=(0.6, 0.8),
        shape="diurnal",
        long_running=True,
        cpu_per_gpu=14,
        mem_gib_per_gpu=112,
        labels=(("app", "reranker-serve"),),
    ),  # fmt: skip
    "ts_inference": JobKind(
        ("inference",),
        ("embed-serve",),
        "server",
        "ReplicaSet",
        busy=(0.15, 0.3),
        mem=(0.2, 0.3),
        shape="diurnal",
        long_running=True,
        cpu_per_gpu=4,
        labels=(("app", "embed-serve"),),
    ),  # fmt: skip
    "idle_held": JobKind(
        ("training",),
        ("jupyter-alice",),
        "notebook",
        "StatefulSet",
        busy=(0.0, 0.02),
        mem=(0.02, 0.08),
        shape="idle",
        long_running=True,
        cpu_per_gpu=4,
        mem_gib_per_gpu=32,
        labels=(("app", "jupyter"),),
    ),  # fmt: skip
    "research": JobKind(
        ("shared-jobs",),
        ("research-rl-sweep", "research-probe"),
        "worker",
        "Job",
        hours=(1.0, 5.0),
        gap_min=(15, 120),
        busy=(0.5, 0.95),
        mem=(0.3, 0.8),
        labels=(("team", "research"), ("app", "sweep")),
    ),  # fmt: skip
    "research_nb": JobKind(
        ("shared-jobs",),
        ("research-notebook",),
        "notebook",
        "Job",
        hours=(1.0, 4.0),
        gap_min=(20, 120),
        busy=(0.1, 0.4),
        mem=(0.1, 0.3),
        shape="bursty",
        cpu_per_gpu=4,
        labels=(("team", "research"), ("app", "notebook")),
    ),  # fmt: skip
    "vceval": JobKind(
        ("vc-eval",),
        ("eval-harness", "mmlu-eval", "humaneval-regression-suite-nightly"),
        "eval",
        "<none>",
        hours=(0.5, 2.0),
        gap_min=(10, 60),
        busy=(0.4, 0.85),
        mem=(0.3, 0.7),
        vcluster=True,
        labels=(("app", "eval"),),
    ),  # fmt: skip
    "vceval_nb": JobKind(
        ("vc-eval",),
        ("eval-adhoc",),
        "eval",
        "<none>",
        hours=(0.5, 2.0),
        gap_min=(30, 180),
        busy=(0.1, 0.5),
        mem=(0.1, 0.3),
        shape="bursty",
        vcluster=True,
        labels=(("app", "eval-adhoc"),),
    ),  # fmt: skip
    # KAI Scheduler (TELEMETRY.md "Sharing schedulers"): a bare reservation pod holds the GPU.
    "kai_reservation": JobKind(
        (KAI_NAMESPACE,),
        ("gpu-reservation",),
        "pod-group-reservation",
        "<none>",
        busy=(0.0, 0.0),
        mem=(0.0, 0.0),
        shape="reserve",
        long_running=True,
        cpu_per_gpu=0.1,
        mem_gib_per_gpu=0.1,
    ),  # fmt: skip
    "kai_batch": JobKind(
        ("inference",),
        ("batch-embed",),
        "worker",
        "Job",
        hours=(2.0, 6.0),
        gap_min=(30, 120),
        busy=(0.2, 0.4),
        mem=(0.3, 0.45),
        shape="diurnal",
        cpu_per_gpu=8,
        gpu_fraction=0.5,
        labels=(("app", "batch-embed"),),
    ),  # fmt: skip
    "kai_ft": JobKind(
        ("ft-llama",),
        ("lora-qwen-1b",),
        "trainer",
        "Job",
        hours=(1.0, 3.0),
        gap_min=(20, 90),
        busy=(0.15, 0.3),
        mem=(0.15, 0.22),
        cpu_per_gpu=8,
        gpu_fraction=0.25,
        labels=(("app", "finetune"),),
    ),  # fmt: skip
    "kai_nb": JobKind(
        ("shared-jobs",),
        ("research-kai-notebook",),
        "notebook",
        "Job",
        hours=(1.0, 4.0),
        gap_min=(30, 180),
        busy=(0.05, 0.2),
        mem=(0.1, 0.2),
        shape="bursty",
        cpu_per_gpu=4,
        gpu_fraction=0.25,
        labels=(("team", "research"), ("app", "notebook")),
    ),  # fmt: skip
}
VIRTUAL_NAMESPACES = ("team-a", "team-b", "default")


# --- the spec -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FactorySpec:
    """What to simulate. The defaults are the demo factory (`demo_spec()`)."""

    cluster: str = "demo"
    start: date = date(2026, 11, 1)
    days: int = 7
    scrape_interval_s: int = 30
    seed: int = 7
    h100_nodes: int = 2
    a100_nodes: int = 1
    h200_nodes: int = 1
    gpus_per_node: int = 8
    mig_fraction: float = 0.125  # share of the schedulable GPUs that are MIG-partitioned (4 of 32)
    timesliced_gpus: int = 1  # at most; placed where LANE_PATTERN has a time-sliced lane
    kai_gpus: int = 1  # GPUs of an extra H100 node, each shared by KAI fractional pods via a reservation pod
    dra_gpus: int = 3  # at most; a 4g+3g MIG GPU first, then whole-GPU DRA lanes
    outage: bool = True  # one node's dcgm-exporter down 13:00-15:00Z on the second day
    cordoned_node: bool = True  # an extra H100 node (gpus_per_node // 2 GPUs) cordoned throughout
    xid_gpu: bool = True  # XID 79 on one GPU 09:00-13:00Z on the third day
    energy_reset: bool = True  # one GPU's energy counter resets (driver reload) 06:00Z on the fourth day

    def __post_init__(self) -> None:
        problems = []
        if self.scrape_interval_s < 1 or DAY_S % self.scrape_interval_s:
            problems.append(f"scrape_interval_s={self.scrape_interval_s} must divide 86400")
        if self.days < 1:
            problems.append(f"days={self.days} must be >= 1")
        for name in ("h100_nodes", "a100_nodes", "h200_nodes", "timesliced_gpus", "dra_gpus", "kai_gpus"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0")
        if self.gpus_per_node < 1:
            problems.append("gpus_per_node must be >= 1")
        if not 0.0 <= self.mig_fraction <= 1.0:
            problems.append("mig_fraction must be within [0, 1]")
        if not self.cluster:
            problems.append("cluster must not be empty")
        if problems:
            raise ValueError("invalid FactorySpec: " + "; ".join(problems))

    @property
    def day_list(self) -> list[date]:
        return [self.start + timedelta(days=i) for i in range(self.days)]


def demo_spec() -> FactorySpec:
    return FactorySpec()


# --- layout -------------------------------------------------------------------------------------


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

    @property
    def is_mig(self) -> bool:
        return bool(self.mig)


@dataclass(frozen=True)
class Lane:
    lid: int
    kind: str  # a KINDS key, "timesliced" or "free"
    node: str
    devices: tuple[tuple[int, int | None], ...]  # (gidx, gi_id)
    dra: bool = False
    group: int = -1  # lanes of one deployment share a group

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

    def node(self, name: str) -> NodeInfo:
        return next(n for n in self.nodes if n.name == name)


def _hash_uuid(*parts: object) -> str:
    return str(
        uuidlib.UUID(bytes=hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:16], version=4)
    )


_ALNUM = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet Kubernetes uses for generated name suffixes


def _suffix(*parts: object, n: int = 5) -> str:
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return "".join(_ALNUM[b % len(_ALNUM)] for b in digest[:n])


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

    dra_left = spec.dra_gpus
    ts_left = spec.timesliced_gpus
    gpus: list[GpuInfo] = []
    lanes: list[Lane] = []
    pattern_pos = 0
    group = 0
    for n in nodes:
        model = MODELS[n.model]
        node_gpus: dict[int, GpuInfo] = {}
        for i in range(n.gpus):
            gpu_uuid = "GPU-" + _hash_uuid(spec.seed, spec.cluster, n.name, i)
            pattern = mig_pattern.get((n.name, i))
            if pattern is None:
                node_gpus[i] = GpuInfo(len(gpus) + i, n.name, i, gpu_uuid, n.model)
                continue
            dra = pattern == 2 and dra_left > 0
            if dra:
                dra_left -= 1
            instances = []
            for compute, gi_id, start in MIG_PATTERNS[pattern]:
                profile, mem = model.profile(compute)
                instances.append(
                    MigInstance(
                        gi_id, profile, compute, mem, start,
                        "MIG-" + _hash_uuid(spec.seed, spec.cluster, n.name, i, gi_id),
                        f"gpu-{i}-mig-{gi_id}-{start}-{compute}" if dra else None,
                    )
                )  # fmt: skip
            node_gpus[i] = GpuInfo(
                len(gpus) + i, n.name, i, gpu_uuid, n.model, tuple(instances), pattern, dra
            )  # fmt: skip
        if n.kai:
            for i in range(n.gpus):
                group += 1
                lanes.append(Lane(len(lanes), "kai", n.name, ((node_gpus[i].gidx, None),), group=group))
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
                        node_gpus[idxs[0]] = _replace(node_gpus[idxs[0]], timesliced=True)
                    else:
                        kind = "research"
                if kind.startswith("dra_"):
                    kind = kind.removeprefix("dra_")
                    if dra_left > 0:
                        dra_left -= 1
                        dra = True
                        g = node_gpus[idxs[0]]
                        node_gpus[idxs[0]] = _replace(g, dra=True, dra_device=f"gpu-{g.index}")
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
    outage = Window(spec.start + timedelta(days=min(1, last)), 13 * 3600, 15 * 3600) if outage_node else None
    whole_held = [lane for lane in lanes if lane.kind not in ("free",) and lane.devices[0][1] is None]
    xid_gpu = None
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
    return Layout(
        tuple(nodes), tuple(gpus), tuple(lanes), outage_node, outage, xid_gpu, xid, reset_gpu, reset
    )


def _replace(g: GpuInfo, **changes: Any) -> GpuInfo:
    return replace(g, **changes)


# --- pods ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    uid: str
    node: str
    container: str
    owner_kind: str
    owner_name: str
    labels: tuple[tuple[str, str], ...]  # kube_pod_labels keys, already sanitized (label_...)
    created: int  # epoch seconds
    running: int
    finished: int
    deleted: int
    end_phase: str  # Succeeded | Failed
    busy: float
    mem: float
    shape: str
    lane: int
    slot: int
    requests: tuple[tuple[str, str, float], ...]  # (resource, unit, value)
    claim_name: str | None = None  # the generated ResourceClaim (DRA pods)
    claim_uid: str | None = None
    annotations: tuple[tuple[str, str], ...] = ()  # kube_pod_annotations keys, sanitized (annotation_...)


def _epoch(d: date) -> int:
    return int(datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp())


def _sanitize(key: str) -> str:
    return "label_" + "".join(c if c.isalnum() or c == "_" else "_" for c in key)


def _pod_requests(
    spec: FactorySpec, layout: Layout, lane: Lane, kind: JobKind
) -> tuple[tuple[str, str, float], ...]:
    gpu = layout.gpus[lane.devices[0][0]]
    gi = lane.devices[0][1]
    if gi is not None:
        inst = next(m for m in gpu.mig if m.gi_id == gi)
        weight = inst.compute / 7
        gpu_req = None if lane.dra else (f"nvidia_com_mig_{inst.profile.replace('.', '_')}", 1.0)
    elif lane.kind == "timesliced":
        weight = 1 / 3
        gpu_req = ("nvidia_com_gpu_shared", 1.0)
    elif lane.kind == "kai":  # the reservation pod requests the GPU, fractional pods none
        weight = kind.gpu_fraction or 1.0
        gpu_req = None if kind.gpu_fraction else ("nvidia_com_gpu", 1.0)
    else:
        weight = float(len(lane.devices))
        gpu_req = None if lane.dra else ("nvidia_com_gpu", weight)
    out: list[tuple[str, str, float]] = []
    if gpu_req:
        out.append((gpu_req[0], "integer", gpu_req[1]))
    out.append(("cpu", "core", float(max(1, round(kind.cpu_per_gpu * weight)))))
    out.append(("memory", "byte", float(max(8, round(kind.mem_gib_per_gpu * weight))) * _GiB))
    return tuple(out)


def _make_pod(
    spec: FactorySpec, layout: Layout, lane: Lane, slot: int, kind_name: str, rng: np.random.Generator,
    job: str, created: int, running: int, finished: int, deleted: int, end_phase: str,
) -> Pod:  # fmt: skip
    kind = KINDS[kind_name]
    namespace = kind.namespaces[int(rng.integers(len(kind.namespaces)))]
    labels = dict(kind.labels)
    if kind.owner_kind == "Job":
        name, owner = f"{job}-{_suffix(spec.seed, job, created)}", job
        labels["job-name"] = job
    elif kind.owner_kind == "ReplicaSet":
        owner = job
        name = f"{job}-{_suffix(spec.seed, job, lane.lid, slot)}"
    elif kind.owner_kind == "StatefulSet":
        owner, name = job, f"{job}-0"
    elif not kind.vcluster:  # a bare pod (KAI's reservation pod)
        owner, name = "<none>", f"{job}-{_suffix(spec.seed, job, created)}"
    else:  # vCluster: synced host pod, named <pod>-x-<namespace>-x-<vcluster>, truncated past 63 chars
        owner = "<none>"
        vns = VIRTUAL_NAMESPACES[int(rng.integers(len(VIRTUAL_NAMESPACES)))]
        vpod = f"{job}-{_suffix(spec.seed, job, created)}"
        name = f"{vpod}-x-{vns}-x-{VCLUSTER}"
        if len(name) > 63:
            name = name[:52] + "-" + hashlib.sha256(name.encode()).hexdigest()[:10]
        labels["vcluster.loft.sh/managed-by"] = VCLUSTER
        labels["vcluster.loft.sh/namespace"] = vns
    annotations: tuple[tuple[str, str], ...] = ()
    if lane.kind == "kai":
        labels["runai-gpu-group"] = _hash_uuid(spec.seed, spec.cluster, "runai-gpu-group", lane.lid)
        if kind.gpu_fraction:
            annotations = (("annotation_gpu_fraction", f"{kind.gpu_fraction:g}"),)
    mem_lo, mem_hi = kind.mem
    uid = _hash_uuid(spec.seed, spec.cluster, namespace, name, created)
    claim_name = claim_uid = None
    if lane.dra:
        claim_name = f"{name[:50]}-gpu-{_suffix(spec.seed, uid, 'claim')}"
        claim_uid = _hash_uuid(spec.seed, spec.cluster, namespace, claim_name)
    return Pod(
        namespace=namespace, name=name, uid=uid, node=lane.node, container=kind.container,
        owner_kind=kind.owner_kind, owner_name=owner,
        labels=tuple(sorted((_sanitize(k), v) for k, v in labels.items())),
        created=created, running=running, finished=finished, deleted=deleted, end_phase=end_phase,
        busy=float(rng.uniform(*kind.busy)), mem=float(rng.uniform(mem_lo, mem_hi)), shape=kind.shape,
        lane=lane.lid, slot=slot, requests=_pod_requests(spec, layout, lane, kind),
        claim_name=claim_name, claim_uid=claim_uid, annotations=annotations,
    )  # fmt: skip


def _long_running_pod(spec: FactorySpec, layout: Layout, lane: Lane, slot: int, kind_name: str) -> Pod:
    kind = KINDS[kind_name]
    rng = np.random.default_rng([spec.seed, 0, 4, lane.lid, slot])
    created = _epoch(spec.start) - 3 * DAY_S - 3600 + (lane.lid * 37) % 3600
    stem = kind.stems[0]
    if kind.owner_kind == "ReplicaSet":
        job = f"{stem}-{_suffix(spec.seed, stem, lane.group, n=10)}"
    elif kind.owner_kind == "StatefulSet":
        job = stem if lane.lid == _first_lane_of_kind(layout, kind_name) else f"{stem}-{lane.lid}"
    else:
        job = f"{stem}-{lane.lid}"
    return _make_pod(
        spec, layout, lane, slot, kind_name, rng, job, created, created + 45, FOREVER, FOREVER, "Succeeded"
    )


def _first_lane_of_kind(layout: Layout, kind: str) -> int:
    return next(lane.lid for lane in layout.lanes if lane.kind == kind)


def _jobs_started(spec: FactorySpec, lane: Lane, slot: int, kind_name: str, day: date) -> list[Pod]:
    """Jobs of one lane slot that start on `day`: placed in [day 04:00Z, day+1 04:00Z)."""
    layout = factory_layout(spec)
    kind = KINDS[kind_name]
    rng = np.random.default_rng([spec.seed, day.toordinal(), 1, lane.lid, slot])
    w0 = _epoch(day) + 4 * 3600
    w1 = w0 + DAY_S
    pods: list[Pod] = []
    t = w0 + int(rng.uniform(*kind.gap_min) * 60)
    k = 0
    while t < w1 - 1800:
        pending = int(rng.integers(15, 240))
        running = t + pending
        finished = running + int(rng.uniform(*kind.hours) * 3600)
        finished = min(finished, w1 - 120)
        linger = int(rng.integers(30, 600))
        end_phase = "Failed" if rng.random() < 0.08 else "Succeeded"
        stem = kind.stems[int(rng.integers(len(kind.stems)))]
        if finished - running < 600:
            break
        job = f"{stem}-{day:%m%d}-{lane.lid:x}{slot}{k:02d}"
        pods.append(
            _make_pod(
                spec,
                layout,
                lane,
                slot,
                kind_name,
                rng,
                job,
                t,
                running,
                finished,
                finished + linger,
                end_phase,
            )
        )
        k += 1
        t = finished + int(rng.uniform(*kind.gap_min) * 60)
    return pods


def day_pods(spec: FactorySpec, day: date) -> list[Pod]:
    """Every pod that exists at some time of `day` (deterministic order: lane, slot, start)."""
    layout = factory_layout(spec)
    d0, d1 = _epoch(day), _epoch(day) + DAY_S
    pods: list[Pod] = []
    for lane in layout.lanes:
        if lane.kind == "free":
            continue
        for slot, kind_name in enumerate(lane.slot_kinds):
            if KINDS[kind_name].long_running:
                pods.append(_long_running_pod(spec, layout, lane, slot, kind_name))
                continue
            for d in (day - timedelta(days=1), day):
                for pod in _jobs_started(spec, lane, slot, kind_name, d):
                    if pod.created < d1 and pod.deleted > d0:
                        pods.append(pod)
    return pods


# --- per-day numerics ---------------------------------------------------------------------------


def _ceil_idx(t: int, d0: int, step: int, n: int) -> int:
    """Index of the first sample at or after epoch second t (samples at d0 + i*step)."""
    return min(max(-((d0 - t) // step), 0), n)


@dataclass
class _Ctx:
    spec: FactorySpec
    layout: Layout
    day: date
    d0: int
    n: int
    step: int
    pods: list[Pod]
    hours: np.ndarray  # hour of day per sample
    slot_holder: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    slot_busy: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    slot_mem: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)

    def idx(self, t: int) -> int:
        return _ceil_idx(t, self.d0, self.step, self.n)


def _shape(shape: str, level: float, noise: np.ndarray, u: np.ndarray, hours: np.ndarray) -> np.ndarray:
    if shape == "train":
        b = level + 0.03 * noise
        b = np.where(u < 0.02, b * 0.3, b)  # checkpoint / input stalls
    elif shape == "diurnal":
        b = level * (0.65 + 0.35 * np.sin(2 * np.pi * (hours - 8.0) / 24.0)) + 0.04 * noise
    elif shape == "bursty":
        b = np.where(u < 0.35, level + 0.1 * noise, 0.01 + 0.005 * np.abs(noise))
    elif shape == "reserve":  # holds the GPU for others, runs nothing
        return np.zeros_like(noise)
    else:  # idle: held, 0-3 %
        return np.clip(level + 0.004 * noise, 0.0, 0.03)
    return np.clip(b, 0.0, 1.0)


def _build_ctx(spec: FactorySpec, day: date) -> _Ctx:
    if day < spec.start:
        raise ValueError(f"day {day} is before the spec's start {spec.start}")
    layout = factory_layout(spec)
    step = spec.scrape_interval_s
    n = DAY_S // step
    ctx = _Ctx(spec, layout, day, _epoch(day), n, step, day_pods(spec, day), (np.arange(n) * step) / 3600.0)
    by_slot: dict[tuple[int, int], list[int]] = {}
    for i, pod in enumerate(ctx.pods):
        by_slot.setdefault((pod.lane, pod.slot), []).append(i)
    for lane in layout.lanes:
        for slot in range(len(lane.slot_kinds)):
            rng = np.random.default_rng([spec.seed, day.toordinal(), 3, lane.lid, slot])
            noise = rng.normal(0.0, 1.0, n)
            u = rng.random(n)
            holder = np.full(n, -1, dtype=np.int32)
            busy = np.zeros(n)
            mem = np.zeros(n)
            for i in by_slot.get((lane.lid, slot), []):
                pod = ctx.pods[i]
                r0, r1 = ctx.idx(pod.running), ctx.idx(pod.finished)
                if r1 <= r0:
                    continue
                holder[r0:r1] = i
                busy[r0:r1] = _shape(pod.shape, pod.busy, noise[r0:r1], u[r0:r1], ctx.hours[r0:r1])
                if pod.shape == "train" and pod.running >= ctx.d0:  # warm-up: the first minutes
                    warm = min(r1, r0 + max(1, 180 // step))
                    busy[r0:warm] *= 0.2
                mem[r0:r1] = pod.mem
            ctx.slot_holder[(lane.lid, slot)] = holder
            ctx.slot_busy[(lane.lid, slot)] = busy
            ctx.slot_mem[(lane.lid, slot)] = mem
    return ctx


@dataclass
class _GpuDay:
    """One GPU's values for the day. `devices`: (gi_id or None, slot holders, busy, mem) per device."""

    power: np.ndarray
    temp: np.ndarray
    xid: np.ndarray
    energy_inc: np.ndarray  # int64 mJ accumulated over each sample's interval
    devices: list[tuple[int | None, list[np.ndarray], np.ndarray, np.ndarray]]


def _lane_index(layout: Layout) -> dict[tuple[int, int | None], Lane]:
    return {dev: lane for lane in layout.lanes for dev in lane.devices}


def _gpu_day(ctx: _Ctx, gpu: GpuInfo, lanes: dict[tuple[int, int | None], Lane]) -> _GpuDay:
    spec, n = ctx.spec, ctx.n
    model = MODELS[gpu.model]
    rng = np.random.default_rng([spec.seed, ctx.day.toordinal(), 2, gpu.gidx])
    noise = rng.normal(0.0, 1.0, (3, n))
    xid = np.zeros(n)
    xw = ctx.layout.xid
    if xw is not None and ctx.layout.xid_gpu == gpu.gidx and xw.day == ctx.day:
        xid[xw.start_s // ctx.step : xw.end_s // ctx.step] = XID_CODE
    stalled = xid > 0
    devices = []
    keys = [(gpu.gidx, m.gi_id) for m in gpu.mig] if gpu.is_mig else [(gpu.gidx, None)]
    load = np.zeros(n)
    held_any = np.zeros(n, dtype=bool)
    for key in keys:
        lane = lanes.get(key)
        if lane is None:  # cordoned node: free
            holders = [np.full(n, -1, dtype=np.int32)]
            busy, mem = np.zeros(n), np.zeros(n)
        else:
            slots = range(len(lane.slot_kinds))
            holders = [ctx.slot_holder[(lane.lid, s)] for s in slots]
            busy = np.clip(sum(ctx.slot_busy[(lane.lid, s)] for s in slots), 0.0, 1.0)
            mem = np.clip(sum(ctx.slot_mem[(lane.lid, s)] for s in slots), 0.0, 0.95)
            held = np.any(np.stack(holders) >= 0, axis=0)
            busy = np.where(held, np.clip(busy * (1.0 + 0.02 * noise[0]), 0.0, 1.0), 0.0)
            held_any |= held
        busy = np.where(stalled, 0.0, busy)
        weight = next(m.compute for m in gpu.mig if m.gi_id == key[1]) / 7 if key[1] is not None else 1.0
        load += busy * weight
        devices.append((key[1], holders, busy, mem))
    power = model.idle_w + (model.tdp_w - model.idle_w) * np.clip(load, 0, 1) ** 0.85 + 12.0 * held_any
    power = np.round(np.clip(power + 3.0 * noise[1], model.idle_w * 0.9, model.tdp_w), 3)
    k = max(1, 300 // ctx.step)
    smooth = np.convolve(np.clip(load, 0, 1), np.ones(k) / k, mode="full")[:n]
    temp = np.rint(30.0 + 45.0 * smooth + 0.6 * noise[2])
    energy_inc = np.rint(power * ctx.step * 1000.0).astype(np.int64)
    return _GpuDay(power, temp, xid, energy_inc, devices)


@dataclass(frozen=True)
class _EnergySummary:
    total: np.ndarray  # int64 per gidx: the day's increments
    reset_end: int | None  # the reset GPU's counter at the end of its reset day


_ENERGY_CACHE: dict[tuple[FactorySpec, date], _EnergySummary] = {}
_ENERGY_CACHE_MAX = 4096


def _remember(spec: FactorySpec, day: date, summary: _EnergySummary) -> None:
    if len(_ENERGY_CACHE) >= _ENERGY_CACHE_MAX:
        _ENERGY_CACHE.pop(next(iter(_ENERGY_CACHE)))
    _ENERGY_CACHE[(spec, day)] = summary


def clear_caches() -> None:
    """Forget cached layouts and energy summaries (results do not change; tests use it)."""
    _ENERGY_CACHE.clear()
    factory_layout.cache_clear()


def _reset_index(ctx: _Ctx) -> int | None:
    rw = ctx.layout.reset
    if rw is None or rw.day != ctx.day:
        return None
    return ctx.idx(ctx.d0 + rw.start_s)


def _summarize(ctx: _Ctx, incs: dict[int, np.ndarray]) -> _EnergySummary:
    total = np.zeros(len(ctx.layout.gpus), dtype=np.int64)
    for gidx, inc in incs.items():
        total[gidx] = int(inc.sum())
    reset_end = None
    ri = _reset_index(ctx)
    if ri is not None and ctx.layout.reset_gpu is not None:
        reset_end = int(incs[ctx.layout.reset_gpu][ri:].sum())
    return _EnergySummary(total, reset_end)


def _energy_summary(spec: FactorySpec, day: date) -> _EnergySummary:
    cached = _ENERGY_CACHE.get((spec, day))
    if cached is not None:
        return cached
    ctx = _build_ctx(spec, day)
    lanes = _lane_index(ctx.layout)
    summary = _summarize(ctx, {g.gidx: _gpu_day(ctx, g, lanes).energy_inc for g in ctx.layout.gpus})
    _remember(spec, day, summary)
    return summary


def _energy_base(spec: FactorySpec, day: date) -> np.ndarray:
    """Every GPU's energy counter (mJ) at midnight starting `day`."""
    layout = factory_layout(spec)
    rng = np.random.default_rng([spec.seed, 0, 5])
    base = rng.integers(200_000_000_000, 3_000_000_000_000, len(layout.gpus), dtype=np.int64)
    d = spec.start
    while d < day:
        summary = _energy_summary(spec, d)
        base = base + summary.total
        if summary.reset_end is not None and layout.reset_gpu is not None:
            base[layout.reset_gpu] = summary.reset_end
        d += timedelta(days=1)
    return base


# --- assembling rows ----------------------------------------------------------------------------


class _Rows:
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

    def table(self, ctx: _Ctx, schema: pa.Schema, label_columns: dict[str, pa.Array]) -> pa.Table:
        if not self.idx:
            return schema.empty_table()
        idx = np.concatenate(self.idx)
        order = np.argsort(idx, kind="stable")
        idx = idx[order]
        metric = pa.array(list(self.metrics)).take(pa.array(np.concatenate(self.metric)[order]))
        labels = pa.array(np.concatenate(self.label)[order])
        columns: dict[str, pa.Array] = {
            "cluster": pa.array([ctx.spec.cluster]).take(pa.array(np.zeros(len(idx), dtype=np.int32))),
            "ts_ms": pa.array(ctx.d0 * 1000 + idx.astype(np.int64) * (ctx.step * 1000)),
            "metric": metric,
            "value": pa.array(np.concatenate(self.value)[order]),
        }
        for name, col in label_columns.items():
            columns[name] = col.take(labels)
        # A column the simulator does not write (e.g. the kube scrape target) is null.
        return pa.table([columns.get(f.name, pa.nulls(len(idx), f.type)) for f in schema], schema=schema)


_DCGM_LABEL_COLUMNS = [f.name for f in RAW_DCGM_SCHEMA][4:]  # hostname ... dra_device_name
WHOLE_METRICS = (
    DCGM_GPU_UTIL, DCGM_GR_ENGINE_ACTIVE, DCGM_FB_USED, DCGM_FB_FREE, DCGM_POWER, DCGM_ENERGY, DCGM_XID, DCGM_TEMP,
)  # fmt: skip
MIG_INSTANCE_METRICS = (DCGM_GR_ENGINE_ACTIVE, DCGM_FB_USED)
MIG_PARENT_METRICS = (DCGM_POWER, DCGM_ENERGY, DCGM_XID, DCGM_TEMP)


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
    ctx: _Ctx,
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


def _dcgm_rows(ctx: _Ctx, rows: _Rows, gpu: GpuInfo, gd: _GpuDay, energy: np.ndarray) -> None:
    n = ctx.n
    model = MODELS[gpu.model]
    observed = np.ones(n, dtype=bool)
    ow = ctx.layout.outage
    if ow is not None and ctx.layout.outage_node == gpu.node and ow.day == ctx.day:
        observed[ow.start_s // ctx.step : ow.end_s // ctx.step] = False
    rng = np.random.default_rng([ctx.spec.seed, ctx.day.toordinal(), 6, gpu.gidx])
    if not gpu.is_mig:
        _, holders, busy, mem = gd.devices[0]
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
            series = []
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
        return
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
    for inst, (_gi, holders, busy, mem) in zip(gpu.mig, gd.devices, strict=True):
        codes = _holder_codes(rows, ctx, gpu, inst, holders[0], None, gpu.dra)
        inst_fb = model.fb_mib * inst.memory_slices / 8
        held = holders[0] >= 0
        gr = np.round(np.clip(busy - np.abs(0.008 * rng.normal(size=n)), 0.0, 1.0), 4)
        fb_used = np.where(held, np.rint(mem * inst_fb), 0.0)
        rows.add(where, DCGM_GR_ENGINE_ACTIVE, gr[where], codes[where])
        rows.add(where, DCGM_FB_USED, fb_used[where], codes[where])


def _json(labels: dict[str, str]) -> str:
    return json.dumps(labels, separators=(",", ":"), sort_keys=True)


PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def _kube_rows(ctx: _Ctx, rows: _Rows) -> None:
    n = ctx.n
    every = np.arange(n, dtype=np.int32)
    layout = ctx.layout
    for node in layout.nodes:
        model = MODELS[node.model]
        gpus = [g for g in layout.gpus if g.node == node.name]
        capacity: dict[str, float] = {}
        whole = [g for g in gpus if not g.is_mig and not g.dra and not g.timesliced]
        capacity["nvidia_com_gpu"] = float(len(whole))
        for g in gpus:
            if g.timesliced:
                capacity["nvidia_com_gpu_shared"] = capacity.get("nvidia_com_gpu_shared", 0.0) + 3.0
            if g.is_mig and not g.dra:
                for m in g.mig:
                    key = f"nvidia_com_mig_{m.profile.replace('.', '_')}"
                    capacity[key] = capacity.get(key, 0.0) + 1.0
        units = {"cpu": "core", "memory": "byte"}
        for metric, cpu, memory in (
            ("kube_node_status_capacity", model.node_cpu_cores, model.node_memory_bytes),
            ("kube_node_status_allocatable", model.node_cpu_cores - 2, model.node_memory_bytes - 16 * _GiB),
        ):
            for resource, value in (
                *sorted(capacity.items()),
                ("cpu", float(cpu)),
                ("memory", float(memory)),
            ):
                unit = units.get(resource, "integer")
                code = rows.label_code(_json({"node": node.name, "resource": resource, "unit": unit}))
                rows.add(every, metric, value, code)
        node_labels = {
            "node": node.name,
            "label_nvidia_com_gpu_count": str(node.gpus),
            "label_nvidia_com_gpu_product": model.product_label,
            "label_node_kubernetes_io_instance_type": model.instance_type,
        }
        if any(g.is_mig for g in gpus):
            node_labels["label_nvidia_com_mig_strategy"] = "mixed"
        rows.add(every, "kube_node_labels", 1.0, rows.label_code(_json(node_labels)))
        rows.add(
            every, "kube_node_spec_unschedulable", 1.0 if node.cordoned else 0.0,
            rows.label_code(_json({"node": node.name})),
        )  # fmt: skip
        for status in ("true", "false", "unknown"):
            code = rows.label_code(_json({"node": node.name, "condition": "Ready", "status": status}))
            rows.add(every, "kube_node_status_condition", 1.0 if status == "true" else 0.0, code)
        cost_labels = {
            "node": node.name,
            "instance_type": model.instance_type,
            "region": "us-east-1",
            "provider_id": f"aws:///us-east-1a/i-{hashlib.sha256(node.name.encode()).hexdigest()[:17]}",
        }
        rows.add(every, "node_gpu_hourly_cost", model.price_per_gpu_hour, rows.label_code(_json(cost_labels)))
    for pod in ctx.pods:
        e0, e1 = ctx.idx(pod.created), ctx.idx(pod.deleted)
        if e1 <= e0:
            continue
        idx = every[e0:e1]
        r0, r1 = ctx.idx(pod.running), ctx.idx(pod.finished)
        base = {"namespace": pod.namespace, "pod": pod.name, "uid": pod.uid}
        info = {
            **base,
            "node": pod.node,
            "created_by_kind": pod.owner_kind,
            "created_by_name": pod.owner_name,
        }
        rows.add(idx, "kube_pod_info", 1.0, rows.label_code(_json(info)))
        rows.add(idx, "kube_pod_labels", 1.0, rows.label_code(_json({**base, **dict(pod.labels)})))
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


# Kueue (TELEMETRY.md "Sharing schedulers and quotas"): one ClusterQueue per tenant, all in one cohort,
# a LocalQueue per namespace. Quotas and usage count `nvidia.com/gpu` requests, so MIG, time-sliced, DRA
# and KAI-fractional pods (which request none) are outside them, as in Kueue.
KUEUE_COHORT = "ai-factory"
KUEUE_FLAVOR = "default-flavor"
KUEUE_CLUSTER_QUEUES = {
    "training": "ml-training",
    "ft-llama": "ml-training",
    "ft-mistral": "ml-training",
    "inference": "serving",
    "sandbox": "sandbox",
    "shared-jobs": "research",
    "vc-eval": "evaluation",
}


def _kueue_rows(ctx: _Ctx, rows: _Rows) -> None:
    """kueue_cluster_queue_nominal_quota / _borrowing_limit / _resource_usage and
    kueue_local_queue_resource_usage. Cluster-wide series: written once per day, by the part of the day
    (`iter_day_parts`) that holds the first node, from every pod of the day."""
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
        r0, r1 = ctx.idx(pod.running), ctx.idx(pod.finished)  # admitted and holding its GPUs
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


# --- Kubernetes objects -------------------------------------------------------------------------


def _iso(t: int) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _k8s_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}


def resource_slices(spec: FactorySpec) -> dict[str, Any]:
    """The NVIDIA DRA driver's ResourceSlices (resource.k8s.io/v1): one per node with DRA-managed GPUs."""
    layout = factory_layout(spec)
    items = []
    for node in layout.nodes:
        model = MODELS[node.model]
        devices = []
        for g in layout.gpus:
            if g.node != node.name or not g.dra:
                continue
            common = {
                "productName": {"string": model.model_name},
                "architecture": {"string": model.architecture},
                "driverVersion": {"version": DRIVER_VERSION},
                "index": {"int": g.index},
            }
            if not g.is_mig:
                devices.append(
                    {
                        "name": g.dra_device,
                        "attributes": {"type": {"string": "gpu"}, "uuid": {"string": g.uuid}, **common},
                        "capacity": {"memory": {"value": f"{round(model.fb_mib / 1024)}Gi"}},
                    }
                )
            for m in g.mig:
                attributes = {
                    "type": {"string": "mig"},
                    "uuid": {"string": m.uuid},
                    "parentUUID": {"string": g.uuid},
                    "profile": {"string": m.profile},
                    **common,
                }
                memory = f"{round(model.fb_mib * m.memory_slices / 8 / 1024)}Gi"
                devices.append(
                    {
                        "name": m.dra_device,
                        "attributes": attributes,
                        "capacity": {"memory": {"value": memory}},
                    }
                )
        if not devices:
            continue
        items.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {
                    "name": f"{node.name}-{DRA_DRIVER}-{_suffix(spec.seed, node.name, 'slice')}",
                    "uid": _hash_uuid(spec.seed, spec.cluster, "slice", node.name),
                    "creationTimestamp": _iso(_epoch(spec.start) - 7 * DAY_S),
                },
                "spec": {
                    "driver": DRA_DRIVER,
                    "nodeName": node.name,
                    "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
    return _k8s_list(items)


def _resource_claims(ctx: _Ctx) -> dict[str, Any]:
    """Claims generated from the DRA pods' ResourceClaimTemplates that existed at some time of the day."""
    layout = ctx.layout
    lanes = {lane.lid: lane for lane in layout.lanes}
    items = []
    for pod in ctx.pods:
        if not pod.claim_name:
            continue
        lane = lanes[pod.lane]
        results = []
        for gidx, gi in lane.devices:
            g = layout.gpus[gidx]
            device = g.dra_device if gi is None else next(m.dra_device for m in g.mig if m.gi_id == gi)
            results.append({"request": "gpu", "driver": DRA_DRIVER, "pool": g.node, "device": device})
        items.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "name": pod.claim_name,
                    "namespace": pod.namespace,
                    "uid": pod.claim_uid,
                    "creationTimestamp": _iso(pod.created),
                    "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Pod",
                            "name": pod.name,
                            "uid": pod.uid,
                            "controller": True,
                        }
                    ],
                },
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": "mig.nvidia.com"
                                    if lane.devices[0][1] is not None
                                    else "gpu.nvidia.com",
                                    "allocationMode": "ExactCount",
                                    "count": 1,
                                },
                            }
                        ]
                    }
                },
                "status": {
                    "allocation": {
                        "devices": {"results": results},
                        "nodeSelector": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {"key": "metadata.name", "operator": "In", "values": [pod.node]}
                                    ]
                                }
                            ]
                        },
                    },
                    "reservedFor": [{"resource": "pods", "name": pod.name, "uid": pod.uid}],
                },
            }
        )
    return _k8s_list(items)


# --- public API ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimulatedDay:
    dcgm: pa.Table  # RAW_DCGM_SCHEMA, sorted by ts_ms
    kube: pa.Table  # RAW_KUBE_SCHEMA, sorted by ts_ms
    resource_claims: dict[str, Any]  # kubectl get resourceclaims -A -o json
    resource_slices: dict[str, Any]  # kubectl get resourceslices -o json
    day: date


def simulate_day(spec: FactorySpec, day: date) -> SimulatedDay:
    """One UTC day [day 00:00Z, day+1 00:00Z) of the factory. Pure: depends only on (spec, day)."""
    ctx = _build_ctx(spec, day)
    layout = ctx.layout
    lanes = _lane_index(layout)
    base = _energy_base(spec, day)
    ri = _reset_index(ctx)
    dcgm = _Rows()
    incs: dict[int, np.ndarray] = {}
    for gpu in layout.gpus:
        gd = _gpu_day(ctx, gpu, lanes)
        incs[gpu.gidx] = gd.energy_inc
        before = np.concatenate(([0], np.cumsum(gd.energy_inc)[:-1]))  # accumulated before each sample
        energy = base[gpu.gidx] + before
        if ri is not None and gpu.gidx == layout.reset_gpu:
            energy[ri:] = before[ri:] - before[ri]
        _dcgm_rows(ctx, dcgm, gpu, gd, energy)
    _remember(spec, day, _summarize(ctx, incs))
    dcgm_labels = list(dcgm.labels)
    dcgm_columns = {
        name: pa.array([key[i] for key in dcgm_labels], type=pa.string())
        for i, name in enumerate(_DCGM_LABEL_COLUMNS)
    }
    kube = _Rows()
    _kube_rows(ctx, kube)
    kube_columns = {"labels": pa.array(list(kube.labels), type=pa.string())}
    return SimulatedDay(
        dcgm=dcgm.table(ctx, RAW_DCGM_SCHEMA, dcgm_columns),
        kube=kube.table(ctx, RAW_KUBE_SCHEMA, kube_columns),
        resource_claims=_resource_claims(ctx),
        resource_slices=resource_slices(spec),
        day=day,
    )


def iter_days(spec: FactorySpec) -> Iterator[SimulatedDay]:
    for day in spec.day_list:
        yield simulate_day(spec, day)


def day_dir(out_dir: Path, table: str, cluster: str, day: date) -> Path:
    return Path(out_dir) / table / f"cluster={cluster}" / f"day={day.isoformat()}"


def fleet_spec(gpus: int, cluster: str = "fleet", days: int = 1, **overrides: Any) -> FactorySpec:
    """A fleet of `gpus` GPUs on 8-GPU nodes (half H100, a quarter each A100 and H200): 20 % MIG, one
    time-sliced GPU per 64 and one DRA GPU per 32, no scenario events (bench/, docs/deploy.md)."""
    nodes = max(1, gpus // 8)
    h100 = max(1, nodes // 2)
    a100 = (nodes - h100) // 2
    h200 = nodes - h100 - a100
    values: dict[str, Any] = {
        "cluster": cluster,
        "days": days,
        "h100_nodes": h100,
        "a100_nodes": a100,
        "h200_nodes": h200,
        "mig_fraction": 0.2,
        "timesliced_gpus": max(1, gpus // 64),
        "dra_gpus": max(1, gpus // 32),
        "outage": False,
        "cordoned_node": False,
        "xid_gpu": False,
        "energy_reset": False,
    }
    return FactorySpec(**(values | overrides))


@dataclass(frozen=True)
class DayPart:
    """The raw samples of a group of nodes for one day: what `write_parquet` stores as one file."""

    dcgm: pa.Table
    kube: pa.Table


def iter_day_parts(spec: FactorySpec, day: date, nodes_per_part: int = 16) -> Iterator[DayPart]:
    """The day of `simulate_day`, node group by node group, so that a 10,000-GPU day (hundreds of millions
    of rows) is never whole in memory. With every node in one part, the part is `simulate_day`'s tables."""
    yield from _iter_parts(_build_ctx(spec, day), nodes_per_part)


def _iter_parts(ctx: _Ctx, nodes_per_part: int) -> Iterator[DayPart]:
    spec, day, layout = ctx.spec, ctx.day, ctx.layout
    lanes = _lane_index(layout)
    base = _energy_base(spec, day)
    ri = _reset_index(ctx)
    incs: dict[int, np.ndarray] = {}
    for first in range(0, len(layout.nodes), nodes_per_part):
        nodes = layout.nodes[first : first + nodes_per_part]
        names = {node.name for node in nodes}
        dcgm = _Rows()
        for gpu in (g for g in layout.gpus if g.node in names):
            gd = _gpu_day(ctx, gpu, lanes)
            incs[gpu.gidx] = gd.energy_inc
            before = np.concatenate(([0], np.cumsum(gd.energy_inc)[:-1]))  # accumulated before each sample
            energy = base[gpu.gidx] + before
            if ri is not None and gpu.gidx == layout.reset_gpu:
                energy[ri:] = before[ri:] - before[ri]
            _dcgm_rows(ctx, dcgm, gpu, gd, energy)
        dcgm_columns = {
            name: pa.array([key[i] for key in dcgm.labels], type=pa.string())
            for i, name in enumerate(_DCGM_LABEL_COLUMNS)
        }
        # The part's nodes and the pods placed on them: kube rows are per node and per pod.
        part_ctx = replace(
            ctx, layout=replace(layout, nodes=nodes), pods=[pod for pod in ctx.pods if pod.node in names]
        )
        kube = _Rows()
        _kube_rows(part_ctx, kube)
        kube_columns = {"labels": pa.array(list(kube.labels), type=pa.string())}
        yield DayPart(
            dcgm.table(ctx, RAW_DCGM_SCHEMA, dcgm_columns), kube.table(ctx, RAW_KUBE_SCHEMA, kube_columns)
        )
    _remember(spec, day, _summarize(ctx, incs))


def write_parquet(
    spec: FactorySpec,
    out_dir: Path,
    progress: Callable[[date], None] | None = None,
    nodes_per_part: int = 16,
    lookback_s: int = 0,
) -> None:
    """The "parquet source": raw_dcgm_samples/, raw_kube_samples/ and k8s/ snapshots, one folder per day,
    streamed by node groups (`iter_day_parts`): `data.parquet` when the day is one part, else
    `part-NNNNN.parquet` files. With `lookback_s` each day's folder also holds the previous day's last
    `lookback_s` seconds (`lookback-NNNNN.parquet`): the self-contained day of the warehouse raw zone."""
    out_dir = Path(out_dir)
    tails: dict[str, list[pa.Table]] = {}
    for day in spec.day_list:
        staged = {
            table: _staging_dir(day_dir(out_dir, table, spec.cluster, day))
            for table in ("raw_dcgm_samples", "raw_kube_samples")
        }
        for table, parts in tails.items():
            for i, part in enumerate(parts):
                atomic_write_parquet(staged[table] / f"lookback-{i:05d}.parquet", part)
        tails = {table: [] for table in staged}
        end_ms = (_epoch(day) + DAY_S) * 1000
        ctx = _build_ctx(spec, day)
        single = len(ctx.layout.nodes) <= nodes_per_part
        for i, part in enumerate(_iter_parts(ctx, nodes_per_part)):
            for table, rows in (("raw_dcgm_samples", part.dcgm), ("raw_kube_samples", part.kube)):
                name = "data.parquet" if single and not lookback_s else f"part-{i:05d}.parquet"
                atomic_write_parquet(staged[table] / name, rows)
                if lookback_s:
                    ts = rows.column("ts_ms")
                    tails[table].append(rows.filter(pc.greater_equal(ts, end_ms - lookback_s * 1000)))
        for table, folder in staged.items():
            _swap_in(folder, day_dir(out_dir, table, spec.cluster, day))
        k8s = day_dir(out_dir, "k8s", spec.cluster, day)
        atomic_write_text(k8s / "resourceclaims.json", json.dumps(_resource_claims(ctx), indent=1) + "\n")
        atomic_write_text(k8s / "resourceslices.json", json.dumps(resource_slices(spec), indent=1) + "\n")
        if progress:
            progress(day)


def _staging_dir(final: Path) -> Path:
    staging = final.with_name(f".{final.name}.staging")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    return staging


def _swap_in(staging: Path, final: Path) -> None:
    """Replace a day folder by its fully written successor: readers see the old day or the new one."""
    old = final.with_name(f".{final.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        os.replace(final, old)
    os.replace(staging, final)
    shutil.rmtree(old, ignore_errors=True)


def write_openmetrics(spec: FactorySpec, out_path: Path, nodes_per_part: int = 16) -> None:
    """Every day of the spec as one OpenMetrics file for `promtool tsdb create-blocks-from openmetrics`,
    streamed by node groups like `write_parquet`: a series lives on one node, so each series still comes in
    time order, and a fleet's day is never whole in memory (1,000 GPUs' kube labels alone overflow one
    Arrow string array)."""
    from metering import openmetrics

    parts = (
        (part.dcgm, part.kube) for day in spec.day_list for part in iter_day_parts(spec, day, nodes_per_part)
    )
    openmetrics.write_openmetrics(parts, Path(out_path))


def describe(spec: FactorySpec) -> str:
    """A human-readable summary of the layout: which GPU has which role and scenario."""
    layout = factory_layout(spec)
    lanes = _lane_index(layout)
    lines = []
    for node in layout.nodes:
        lines.append(
            f"{node.name} ({MODELS[node.model].model_name}, {node.gpus} GPUs){' cordoned' if node.cordoned else ''}"
        )
        for g in (g for g in layout.gpus if g.node == node.name):
            tags = []
            if g.is_mig:
                parts = [f"{m.profile}#{m.gi_id}:{lanes[(g.gidx, m.gi_id)].kind}" for m in g.mig]
                free = 7 - sum(m.compute for m in g.mig)
                tags.append("MIG " + " + ".join(parts) + (f" (+{free}/7 unpartitioned)" if free else ""))
            elif (g.gidx, None) in lanes and lanes[(g.gidx, None)].kind == "kai":
                tags.append("KAI: a reservation pod for 3 fractional pods (gpu-fraction 0.5 + 0.25 + 0.25)")
            elif (g.gidx, None) in lanes:
                tags.append(lanes[(g.gidx, None)].kind)
            else:
                tags.append("free")
            if g.dra:
                tags.append("DRA")
            if g.timesliced:
                tags.append("time-sliced x3 (vgpu)")
            if g.gidx == layout.xid_gpu and layout.xid:
                tags.append(f"XID 79 on {layout.xid.day}")
            if g.gidx == layout.reset_gpu and layout.reset:
                tags.append(f"energy reset on {layout.reset.day}")
            lines.append(f"  gpu {g.index}: {', '.join(tags)}")
    if layout.outage:
        lines.append(f"outage: {layout.outage_node} dcgm-exporter down {layout.outage.day} 13:00-15:00Z")
    return "\n".join(lines)


__all__ = [
    "DayPart",
    "FactorySpec",
    "SimulatedDay",
    "clear_caches",
    "day_pods",
    "demo_spec",
    "describe",
    "factory_layout",
    "fleet_spec",
    "iter_day_parts",
    "simulate_day",
    "write_openmetrics",
    "write_parquet",
]
