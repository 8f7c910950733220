"""A seeded, deterministic synthetic "AI factory": a shared Kubernetes GPU pool as its exporters see it.

`simulate_day(spec, day)` returns one UTC day of raw samples in the raw-samples schema (gpumeter.ingest.schema):
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
)
from gpumeter.storage import paths
from gpumeter.storage.files import atomic_write_parquet, atomic_write_text
from gpumeter.storage.paths import snapshot_name

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
    # KAI Scheduler (docs/telemetry.md "Sharing schedulers"): a bare reservation pod holds the GPU.
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
# The events day's pod that holds the GPU that goes MIG at noon (`Layout.whole_hold_lane`): no Kueue queue.
KINDS["benchmark"] = JobKind(
    ("perf-lab",),
    ("gpu-burn",),
    "burn",
    "Job",
    busy=(0.9, 0.99),
    mem=(0.7, 0.9),
    labels=(("team", "research"), ("app", "gpu-burn")),
)
VIRTUAL_NAMESPACES = ("team-a", "team-b", "default")


# --- the spec -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FactorySpec:
    """What to simulate. The defaults are the demo factory (`demo_spec()`) without its changing pool."""

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
    # A pool that changes during the day (`demo_spec()` turns these on; off by default, so that a spec built
    # field by field, and `fleet_spec`, keeps the factory as it was). All on the second day (`events_day`).
    mig_repartition: bool = (
        False  # 12:00Z: a whole GPU goes MIG (10-minute reset gap), a 7 x 1g GPU -> 2 x 3g
    )
    ha_replicas: bool = (
        False  # OpenMetrics only: every series from replicas "a" and "b" (2 s later), restarts
    )
    pod_churn: bool = False  # vllm-0 deleted 09:00Z and recreated (new uid); a 20-minute DRA job 10:00Z
    relabel: bool = False  # jupyter-alice-0 relabelled team=c -> team=research at 12:00Z
    ksm_offset_s: int = 0  # kube-state-metrics / OpenCost stamped this many seconds before dcgm-exporter
    dra_snapshots_s: int = 0  # 0: one plain claims/slices list per day (unknown time); else timed snapshots

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
        if not 0 <= self.ksm_offset_s < self.scrape_interval_s:
            problems.append(f"ksm_offset_s={self.ksm_offset_s} must be >= 0 and below scrape_interval_s")
        if self.dra_snapshots_s < 0 or (self.dra_snapshots_s and DAY_S % self.dra_snapshots_s):
            problems.append(f"dra_snapshots_s={self.dra_snapshots_s} must be 0 or divide 86400")
        if problems:
            raise ValueError("invalid FactorySpec: " + "; ".join(problems))

    @property
    def day_list(self) -> list[date]:
        return [self.start + timedelta(days=i) for i in range(self.days)]


def demo_spec() -> FactorySpec:
    """The demo factory: the defaults plus a pool that changes during its second day (a MIG re-partition, an
    HA Prometheus pair with rolling restarts, a deleted and recreated pod, a short DRA job, a relabel, a
    re-published ResourceSlice), kube-state-metrics scraped 20 s before dcgm-exporter, and DRA objects kept
    as timed snapshots every 5 minutes."""
    return FactorySpec(**CHANGING_POOL)


# The dynamics of a pool that changes during the day, as the demo has them (FactorySpec fields).
CHANGING_POOL: dict[str, Any] = {
    "mig_repartition": True,
    "ha_replicas": True,
    "pod_churn": True,
    "relabel": True,
    "ksm_offset_s": 20,
    "dra_snapshots_s": 300,
}


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
    since: int | None = (
        None  # epoch seconds: the lane's device exists from then (a re-partition's new instance)
    )
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

    # mig_repartition: the first 7 x 1g GPU is re-partitioned (and DRA-managed when the spec has DRA GPUs, so
    # that its ResourceSlice is re-published; it does not count against dra_gpus).
    repart_mig = None
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
            gpu_uuid = "GPU-" + _hash_uuid(spec.seed, spec.cluster, n.name, i)
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
    events = _place_events(spec, gpus, lanes, repart_mig, outage_node)
    for n, node_gpus in kai_nodes:
        for i in range(n.gpus):
            group += 1
            lanes.append(Lane(len(lanes), "kai", n.name, ((node_gpus[i].gidx, None),), group=group))
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
        tuple(nodes), tuple(gpus), tuple(lanes), outage_node, outage, xid_gpu, xid, reset_gpu, reset, **events
    )


# NVIDIA's GPU instance profile ids (`nvidia-smi mig -lgip`) by compute slices. The DRA driver names a MIG
# device gpu-<minor>-mig-<profile id>-<placement start>-<placement size> (docs/telemetry.md: gpu-1-mig-19-4-1),
# so one profile's devices on a GPU sort by placement, as their GPU_I_IDs do here.
MIG_PROFILE_IDS = {1: 19, 2: 14, 3: 9, 4: 5, 7: 0}


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
    instances = []
    for compute, gi_id, start in pattern:
        profile, mem = model.profile(compute)
        parts = (spec.seed, spec.cluster, n.name, i, gi_id) + ((tag,) if tag else ())
        instances.append(
            MigInstance(
                gi_id, profile, compute, mem, start, "MIG-" + _hash_uuid(*parts),
                f"gpu-{i}-mig-{MIG_PROFILE_IDS[compute]}-{start}-{mem}" if dra else None,
            )
        )  # fmt: skip
    return tuple(instances)


# The changing pool's day (seconds after its midnight, UTC).
REPARTITION_S = (12 * 3600, 12 * 3600 + 600)  # MIG manager: no instances (a whole GPU: no series at all)
DRAIN_S = 11 * 3600 + 50 * 60  # the re-partitioned MIG GPU's pods are deleted
NEW_LAYOUT_PODS_S = (12 * 3600 + 12 * 60, 12 * 3600 + 15 * 60)  # its new long-running pods: created, Running
WHOLE_HOLD_S = (2 * 3600, 10 * 3600)  # the pod holding the GPU that goes MIG, Running
CHURN_S = (9 * 3600, 9 * 3600 + 300)  # vllm-0 deleted and recreated; the new one Running
SHORT_JOB_S = (10 * 3600, 10 * 3600 + 20, 10 * 3600 + 1200)  # created, Running, deleted (its claim with it)
RELABEL_S = 12 * 3600
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
    day = spec.start + timedelta(days=min(1, spec.days - 1))
    d0 = _epoch(day)
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
    relabel_at: int | None = None  # epoch seconds: from then kube_pod_labels shows `labels_after`
    labels_after: tuple[tuple[str, str], ...] = ()

    def labels_at(self, t: int) -> tuple[tuple[str, str], ...]:
        return self.labels_after if self.relabel_at is not None and t >= self.relabel_at else self.labels


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
        inst = gpu.instance(gi)
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
    kind: JobKind | None = None,
) -> Pod:  # fmt: skip
    kind = kind or KINDS[kind_name]
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


def _long_running_pods(spec: FactorySpec, layout: Layout, lane: Lane, slot: int, kind_name: str) -> list[Pod]:
    """The pod(s) that live through the period on a lane slot: one, or, on the churn lane, the StatefulSet
    pod vllm-0 before and after it is deleted and recreated (a new uid) on the events day."""
    kind = KINDS[kind_name]
    rng = np.random.default_rng([spec.seed, 0, 4, lane.lid, slot])
    created = _epoch(spec.start) - 3 * DAY_S - 3600 + (lane.lid * 37) % 3600
    running = created + 45
    if lane.since is not None:  # a new MIG instance's pod: from the re-partition on
        created, running = (lane.since - REPARTITION_S[1] + t for t in NEW_LAYOUT_PODS_S)
    end = FOREVER if lane.until is None else lane.until  # drained: deleted while Running
    stem = kind.stems[0]
    if lane.lid == layout.churn_lane and layout.events_day is not None:
        kind = replace(kind, owner_kind="StatefulSet", labels=(("app", "vllm"),))
        gone, back = (_epoch(layout.events_day) + t for t in CHURN_S)
        return [
            _make_pod(
                spec, layout, lane, slot, kind_name, np.random.default_rng([spec.seed, 0, 4, lane.lid, slot]),
                "vllm", c, r, f, f, "Succeeded", kind=kind,
            )
            for c, r, f in ((created, running, gone), (gone, back, end))
        ]  # fmt: skip
    if kind.owner_kind == "ReplicaSet":
        job = f"{stem}-{_suffix(spec.seed, stem, lane.group, n=10)}"
    elif kind.owner_kind == "StatefulSet":
        job = stem if lane.lid == _first_lane_of_kind(layout, kind_name) else f"{stem}-{lane.lid}"
    else:
        job = f"{stem}-{lane.lid}"
    pod = _make_pod(spec, layout, lane, slot, kind_name, rng, job, created, running, end, end, "Succeeded")
    if lane.lid == layout.relabel_lane and layout.events_day is not None:
        labels = dict(pod.labels)
        before = tuple(sorted({**labels, "label_team": "c"}.items()))
        after = tuple(sorted({**labels, "label_team": "research"}.items()))
        pod = replace(
            pod, labels=before, labels_after=after, relabel_at=_epoch(layout.events_day) + RELABEL_S
        )
    return [pod]


def _scenario_pods(spec: FactorySpec, layout: Layout) -> list[Pod]:
    """The events day's one-off pods: the pod holding the GPU that goes MIG at noon (02:00-10:00Z, through
    dcgm-exporter's pod labels) and the 20-minute DRA job, deleted as it ends (no Succeeded phase lingers)."""
    if layout.events_day is None:
        return []
    day = layout.events_day
    d0 = _epoch(day)
    pods = []
    if layout.whole_hold_lane is not None:
        lane = layout.lanes[layout.whole_hold_lane]
        rng = np.random.default_rng([spec.seed, day.toordinal(), 7, lane.lid])
        running, finished = (d0 + t for t in WHOLE_HOLD_S)
        pods.append(
            _make_pod(
                spec, layout, lane, 0, "benchmark", rng, f"gpu-burn-{day:%m%d}",
                running - 120, running, finished, finished + 120, "Succeeded",
            )
        )  # fmt: skip
    if layout.short_job_lane is not None:
        lane = layout.lanes[layout.short_job_lane]
        rng = np.random.default_rng([spec.seed, day.toordinal(), 8, lane.lid])
        created, running, deleted = (d0 + t for t in SHORT_JOB_S)
        pods.append(
            _make_pod(
                spec, layout, lane, 0, "ft", rng, f"smoke-test-{day:%m%d}",
                created, running, deleted, deleted, "Succeeded",
            )
        )  # fmt: skip
    return pods


def _first_lane_of_kind(layout: Layout, kind: str) -> int:
    return next(lane.lid for lane in layout.lanes if lane.kind == kind)


def _jobs_started(spec: FactorySpec, lane: Lane, slot: int, kind_name: str, day: date) -> list[Pod]:
    """Jobs of one lane slot that start on `day`: placed in [day 04:00Z, day+1 04:00Z)."""
    layout = factory_layout(spec)
    kind = KINDS[kind_name]
    rng = np.random.default_rng([spec.seed, day.toordinal(), 1, lane.lid, slot])
    w0 = _epoch(day) + 4 * 3600
    w1 = w0 + DAY_S
    if lane.since is not None:  # a re-partition's new instance: jobs from then on
        w0 = max(w0, lane.since)
    if lane.until is not None:  # drained for a re-partition: jobs end before
        w1 = min(w1, lane.until)
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
                found = _long_running_pods(spec, layout, lane, slot, kind_name)
            else:
                found = [
                    p
                    for d in (day - timedelta(days=1), day)
                    for p in _jobs_started(spec, lane, slot, kind_name, d)
                ]
            pods.extend(pod for pod in found if pod.created < d1 and pod.deleted > d0)
    pods.extend(pod for pod in _scenario_pods(spec, layout) if pod.created < d1 and pod.deleted > d0)
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
    # kube-state-metrics / OpenCost / Kueue scrapes are at d0 + phase + k * step (ksm_offset_s before the
    # dcgm-exporter grid: phase = step - offset), all within the day (R2).
    phase: int = 0

    def idx(self, t: int) -> int:
        """Index of the first dcgm-exporter sample at or after epoch second t."""
        return _ceil_idx(t, self.d0, self.step, self.n)

    def kidx(self, t: int) -> int:
        """Index of the first kube scrape at or after epoch second t."""
        return _ceil_idx(t - self.phase, self.d0, self.step, self.n)


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
    ctx.phase = (step - spec.ksm_offset_s) % step
    # dcgm-exporter names a pod at a sample exactly when the latest kube scrape before it shows the pod
    # Running: that scrape is ksm_offset_s earlier.
    off = spec.ksm_offset_s
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
                r0, r1 = ctx.idx(pod.running + off), ctx.idx(pod.finished + off)
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


@dataclass(frozen=True)
class _Segment:
    """A stretch [i0, i1) of a day's samples in which a GPU has one layout: whole (`instances` None) or MIG
    with these instances (possibly none: between two layouts the GPU-level series go on)."""

    i0: int
    i1: int
    instances: tuple[MigInstance, ...] | None


@dataclass
class _Device:
    """One billable device of a GPU for the day: the whole GPU (`inst` None) or a MIG instance, with its
    lane slots' holders, busy and memory per sample (zero, -1 outside its segment)."""

    segment: _Segment
    inst: MigInstance | None
    holders: list[np.ndarray]
    busy: np.ndarray
    mem: np.ndarray


@dataclass
class _GpuDay:
    """One GPU's values for the day, its layout segments and their devices."""

    power: np.ndarray
    temp: np.ndarray
    xid: np.ndarray
    energy_inc: np.ndarray  # int64 mJ accumulated over each sample's interval
    segments: list[_Segment]
    devices: list[_Device]


def _segments(ctx: _Ctx, gpu: GpuInfo) -> list[_Segment]:
    """The GPU's layouts over the day (R3: a GPU's mode is per sample). A re-partition on the events day:
    the old layout until its start, then no instances until its end (a whole GPU going MIG is reset by the
    MIG manager: no series at all), then the new layout; the new layout on every later day."""
    n = ctx.n
    before = gpu.mig or None
    rw = ctx.layout.repartition
    if gpu.mig_after is None or rw is None or ctx.day < rw.day:
        return [_Segment(0, n, before)]
    if ctx.day > rw.day:
        return [_Segment(0, n, gpu.mig_after)]
    i0, i1 = ctx.idx(ctx.d0 + rw.start_s), ctx.idx(ctx.d0 + rw.end_s)
    out = [_Segment(0, i0, before)]
    if before is not None:
        out.append(_Segment(i0, i1, ()))
    out.append(_Segment(i1, n, gpu.mig_after))
    return out


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
    load = np.zeros(n)
    held_any = np.zeros(n, dtype=bool)
    segments = _segments(ctx, gpu)
    for seg in segments:
        whole_day = seg.i0 == 0 and seg.i1 == n
        insts: tuple[MigInstance | None, ...] = (None,) if seg.instances is None else seg.instances
        for inst in insts:
            lane = lanes.get((gpu.gidx, None if inst is None else inst.gi_id))
            if lane is None:  # cordoned node: free
                holders = [np.full(n, -1, dtype=np.int32)]
                busy, mem = np.zeros(n), np.zeros(n)
            else:
                slots = range(len(lane.slot_kinds))
                holders = [ctx.slot_holder[(lane.lid, s)] for s in slots]
                if not whole_day:  # a device of part of the day: nobody holds it outside
                    inside = np.zeros(n, dtype=bool)
                    inside[seg.i0 : seg.i1] = True
                    holders = [np.where(inside, h, -1).astype(np.int32) for h in holders]
                busy = np.clip(sum(ctx.slot_busy[(lane.lid, s)] for s in slots), 0.0, 1.0)
                mem = np.clip(sum(ctx.slot_mem[(lane.lid, s)] for s in slots), 0.0, 0.95)
                held = np.any(np.stack(holders) >= 0, axis=0)
                busy = np.where(held, np.clip(busy * (1.0 + 0.02 * noise[0]), 0.0, 1.0), 0.0)
                mem = np.where(held, mem, 0.0)
                held_any |= held
            busy = np.where(stalled, 0.0, busy)
            weight = inst.compute / 7 if inst is not None else 1.0
            load += busy * weight
            devices.append(_Device(seg, inst, holders, busy, mem))
    power = model.idle_w + (model.tdp_w - model.idle_w) * np.clip(load, 0, 1) ** 0.85 + 12.0 * held_any
    power = np.round(np.clip(power + 3.0 * noise[1], model.idle_w * 0.9, model.tdp_w), 3)
    k = max(1, 300 // ctx.step)
    smooth = np.convolve(np.clip(load, 0, 1), np.ones(k) / k, mode="full")[:n]
    temp = np.rint(30.0 + 45.0 * smooth + 0.6 * noise[2])
    energy_inc = np.rint(power * ctx.step * 1000.0).astype(np.int64)
    return _GpuDay(power, temp, xid, energy_inc, segments, devices)


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

    def table(
        self, ctx: _Ctx, schema: pa.Schema, label_columns: dict[str, pa.Array], phase_s: int = 0
    ) -> pa.Table:
        """The rows as a raw-schema table; sample i is at d0 + phase_s + i * step."""
        if not self.idx:
            return schema.empty_table()
        idx = np.concatenate(self.idx)
        order = np.argsort(idx, kind="stable")
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
    observed = np.zeros(n, dtype=bool)
    for seg in gd.segments:  # a GPU reset between two layouts: no series at all
        observed[seg.i0 : seg.i1] = True
    ow = ctx.layout.outage
    if ow is not None and ctx.layout.outage_node == gpu.node and ow.day == ctx.day:
        observed[ow.start_s // ctx.step : ow.end_s // ctx.step] = False
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
    ctx: _Ctx, rows: _Rows, gpu: GpuInfo, gd: _GpuDay, energy: np.ndarray, device: _Device,
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


def _mig_rows(
    ctx: _Ctx, rows: _Rows, gpu: GpuInfo, gd: _GpuDay, energy: np.ndarray, devices: list[_Device],
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


def _json(labels: dict[str, str]) -> str:
    return json.dumps(labels, separators=(",", ":"), sort_keys=True)


PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def _gpu_layout_pieces(ctx: _Ctx, gpus: list[GpuInfo]) -> list[tuple[int, int, bool]]:
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


def _kube_rows(ctx: _Ctx, rows: _Rows) -> None:
    n = ctx.n
    every = np.arange(n, dtype=np.int32)
    layout = ctx.layout
    for node in layout.nodes:
        model = MODELS[node.model]
        gpus = [g for g in layout.gpus if g.node == node.name]
        units = {"cpu": "core", "memory": "byte"}
        for k0, k1, after in _gpu_layout_pieces(ctx, gpus):
            capacity = _node_capacity(gpus, after)
            for metric, cpu, memory in (
                ("kube_node_status_capacity", model.node_cpu_cores, model.node_memory_bytes),
                (
                    "kube_node_status_allocatable",
                    model.node_cpu_cores - 2,
                    model.node_memory_bytes - 16 * _GiB,
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
        # A pod's series exist from its creation until its deletion (then they vanish: R1a staleness).
        e0, e1 = ctx.kidx(pod.created), ctx.kidx(pod.deleted)
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


# Kueue (docs/telemetry.md "Sharing schedulers and quotas"): one ClusterQueue per tenant, all in one cohort,
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


# --- Kubernetes objects -------------------------------------------------------------------------


def _iso(t: int) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _k8s_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}


def _republished_ms(layout: Layout, g: GpuInfo) -> tuple[int, int] | None:
    """When the DRA driver re-publishes a re-partitioned DRA GPU's slice: without its MIG devices at the
    start of the re-partition, with the new ones at its end (epoch ms)."""
    rw = layout.repartition
    if rw is None or g.mig_after is None or not g.dra:
        return None
    d0 = _epoch(rw.day)
    return (d0 + rw.start_s) * 1000, (d0 + rw.end_s) * 1000


def resource_slices(spec: FactorySpec, at_ms: int | None = None) -> dict[str, Any]:
    """The NVIDIA DRA driver's ResourceSlices (resource.k8s.io/v1): one per node with DRA-managed GPUs.

    `at_ms` None: one list holding every device the driver ever publishes (how a list of unknown time was
    kept; a re-partitioned GPU's old and new MIG devices alike). Else the slices as published at that
    moment, with `metadata.generation`: a re-partitioned GPU's slice is re-published (generation 2: no MIG
    devices; 3: the new ones, new names) during the re-partition."""
    layout = factory_layout(spec)
    items = []
    for node in layout.nodes:
        model = MODELS[node.model]
        devices = []
        generation = 1
        for g in layout.gpus:
            if g.node != node.name or not g.dra:
                continue
            common = {
                "productName": {"string": model.model_name},
                "architecture": {"string": model.architecture},
                "driverVersion": {"version": DRIVER_VERSION},
                "index": {"int": g.index},
            }
            if not g.is_mig and g.mig_after is None:
                devices.append(
                    {
                        "name": g.dra_device,
                        "attributes": {"type": {"string": "gpu"}, "uuid": {"string": g.uuid}, **common},
                        "capacity": {"memory": {"value": f"{round(model.fb_mib / 1024)}Gi"}},
                    }
                )
            shown = g.instances
            republished = _republished_ms(layout, g)
            if at_ms is not None and republished is not None:
                generation += sum(at_ms >= t for t in republished)
                shown = (
                    g.mig if at_ms < republished[0] else () if at_ms < republished[1] else g.mig_after or ()
                )
            for m in shown:
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
        if not devices and generation == 1:
            continue
        metadata: dict[str, Any] = {
            "name": f"{node.name}-{DRA_DRIVER}-{_suffix(spec.seed, node.name, 'slice')}",
            "uid": _hash_uuid(spec.seed, spec.cluster, "slice", node.name),
            "creationTimestamp": _iso(_epoch(spec.start) - 7 * DAY_S),
        }
        if at_ms is not None:
            metadata["generation"] = generation
        items.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": metadata,
                "spec": {
                    "driver": DRA_DRIVER,
                    "nodeName": node.name,
                    "pool": {"name": node.name, "generation": generation, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
    return _k8s_list(items)


def _claim_items(ctx: _Ctx) -> list[tuple[Pod, dict[str, Any]]]:
    """The ResourceClaim generated from each DRA pod's ResourceClaimTemplate, with its pod: it exists while
    the pod does (created with it, deleted with it)."""
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
            device = g.dra_device if gi is None else g.instance(gi).dra_device
            results.append({"request": "gpu", "driver": DRA_DRIVER, "pool": g.node, "device": device})
        items.append(
            (
                pod,
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
                },
            )
        )
    return items


def _resource_claims(ctx: _Ctx) -> dict[str, Any]:
    """Claims that existed at some time of the day, in one list (a snapshot of unknown time)."""
    return _k8s_list([item for _pod, item in _claim_items(ctx)])


# A snapshot is named by the time its list was asked for: a little after the schedule's tick.
SNAPSHOT_DELAY_MS = 250


def _snapshot_times_ms(ctx: _Ctx) -> list[int]:
    every = ctx.spec.dra_snapshots_s
    if not every:
        return []
    return [(ctx.d0 + k * every) * 1000 + SNAPSHOT_DELAY_MS for k in range(DAY_S // every)]


def claim_snapshots(ctx: _Ctx) -> tuple[tuple[int, dict[str, Any]], ...]:
    """`kubectl get resourceclaims -A -o json` every `dra_snapshots_s` of the day (the snapshot job's
    files): (time taken in epoch ms, list) with the claims that existed then."""
    items = _claim_items(ctx)
    return tuple(
        (t, _k8s_list([item for pod, item in items if pod.created * 1000 <= t < pod.deleted * 1000]))
        for t in _snapshot_times_ms(ctx)
    )


def slice_snapshots(ctx: _Ctx) -> tuple[tuple[int, dict[str, Any]], ...]:
    """`kubectl get resourceslices -o json` at the same times as `claim_snapshots`."""
    return tuple((t, resource_slices(ctx.spec, t)) for t in _snapshot_times_ms(ctx))


# --- public API ---------------------------------------------------------------------------------


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
        kube=kube.table(ctx, RAW_KUBE_SCHEMA, kube_columns, ctx.phase),
        resource_claims=_resource_claims(ctx),
        resource_slices=resource_slices(spec),
        day=day,
        claim_snapshots=claim_snapshots(ctx),
        slice_snapshots=slice_snapshots(ctx),
    )


def iter_days(spec: FactorySpec) -> Iterator[SimulatedDay]:
    for day in spec.day_list:
        yield simulate_day(spec, day)


def day_dir(out_dir: Path, table: str, cluster: str, day: date) -> Path:
    return paths.partition_dir(Path(out_dir) / table, cluster, day)


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
        "mig_repartition": False,
        "ha_replicas": False,
        "pod_churn": False,
        "relabel": False,
        "ksm_offset_s": 0,
        "dra_snapshots_s": 0,
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
            dcgm.table(ctx, RAW_DCGM_SCHEMA, dcgm_columns),
            kube.table(ctx, RAW_KUBE_SCHEMA, kube_columns, ctx.phase),
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
                name = paths.DATA_FILE if single and not lookback_s else paths.PART_FILE.format(index=i)
                atomic_write_parquet(staged[table] / name, rows)
                if lookback_s:
                    ts = rows.column("ts_ms")
                    tails[table].append(rows.filter(pc.greater_equal(ts, end_ms - lookback_s * 1000)))
        for table, folder in staged.items():
            _swap_in(folder, day_dir(out_dir, table, spec.cluster, day))
        _write_k8s_day(ctx, day_dir(out_dir, paths.K8S, spec.cluster, day))
        if progress:
            progress(day)


def _write_k8s_day(ctx: _Ctx, final: Path) -> None:
    """The day's DRA objects (gpumeter/ingest/k8s_objects.py): with dra_snapshots_s, the snapshot job's time-named
    files `resourceclaims-<time>.json` / `resourceslices-<time>.json`; else one plain list per kind (a
    snapshot of unknown time). The folder is replaced whole, so no file of an earlier layout lingers."""
    staged = _staging_dir(final)
    if ctx.spec.dra_snapshots_s:
        for kind, snapshots in (
            (paths.RESOURCE_CLAIMS, claim_snapshots(ctx)),
            (paths.RESOURCE_SLICES, slice_snapshots(ctx)),
        ):
            for taken_ms, doc in snapshots:
                text = json.dumps(doc, separators=(",", ":")) + "\n"
                (staged / snapshot_name(kind, taken_ms)).write_text(text, encoding="utf-8")
    else:
        atomic_write_text(
            staged / paths.snapshot_name(paths.RESOURCE_CLAIMS),
            json.dumps(_resource_claims(ctx), indent=1) + "\n",
        )
        atomic_write_text(
            staged / paths.snapshot_name(paths.RESOURCE_SLICES),
            json.dumps(resource_slices(ctx.spec), indent=1) + "\n",
        )
    _swap_in(staged, final)


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
    from gpumeter_sim import openmetrics

    parts = (
        (part.dcgm, part.kube) for day in spec.day_list for part in iter_day_parts(spec, day, nodes_per_part)
    )
    openmetrics.write_openmetrics(parts, Path(out_path), replicas=ha_replicas(spec))


# ha_replicas: replica "b" stamps 2 s after "a"; rolling restarts (seconds after each day's midnight).
REPLICA_B_OFFSET_MS = 2000
REPLICA_GAPS_S = {
    "a": (10 * 3600 + 5 * 60, 10 * 3600 + 20 * 60),
    "b": (10 * 3600 + 35 * 60, 10 * 3600 + 50 * 60),
}


def ha_replicas(spec: FactorySpec) -> tuple[Any, ...]:
    """The HA Prometheus pair that scraped the factory (`openmetrics.Replica`, label `prometheus_replica`):
    with `ha_replicas`, replica "a" on the exporters' timestamps and "b" 2 s later, "a" down 10:05-10:20Z
    and "b" 10:35-10:50Z every day (rolling restarts); else none (one scraper). For
    `openmetrics.write_openmetrics(..., replicas=ha_replicas(spec))`: the Parquet source has no replicas."""
    from gpumeter_sim import openmetrics

    if not spec.ha_replicas:
        return ()
    out = []
    for name, offset in (("a", 0), ("b", REPLICA_B_OFFSET_MS)):
        lo, hi = REPLICA_GAPS_S[name]
        gaps = tuple(((_epoch(d) + lo) * 1000, (_epoch(d) + hi) * 1000) for d in spec.day_list)
        out.append(openmetrics.Replica(name, offset_ms=offset, gaps_ms=gaps))
    return tuple(out)


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
            if g.mig_after is not None and layout.repartition is not None:
                tags.append(f"re-partitioned on {layout.repartition.day} -> MIG {_layout_text(g.mig_after)}")
            lines.append(f"  gpu {g.index}: {', '.join(tags)}")
    if layout.outage:
        lines.append(f"outage: {layout.outage_node} dcgm-exporter down {layout.outage.day} 13:00-15:00Z")
    lines.extend(changing_pool(spec))
    return "\n".join(lines)


def _layout_text(instances: tuple[MigInstance, ...]) -> str:
    counts: dict[str, int] = {}
    for m in instances:
        counts[m.profile] = counts.get(m.profile, 0) + 1
    return " + ".join(f"{k} x {p}" if k > 1 else p for p, k in counts.items())


def _hhmm(seconds: int) -> str:
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}"


def changing_pool(spec: FactorySpec, openmetrics: bool = True) -> list[str]:
    """One line per dynamic of the spec (what `gpumeter demo` says the factory contains besides its layout);
    the HA pair only with `openmetrics` (it is in the OpenMetrics output alone)."""
    layout = factory_layout(spec)
    day = layout.events_day
    lines = []
    pods = {(p.lane, p.slot): p for p in day_pods(spec, day)} if day is not None else {}
    rw = layout.repartition
    for gidx in layout.repartition_gpus:
        g = layout.gpus[gidx]
        assert rw is not None and g.mig_after is not None
        before = f"MIG {_layout_text(g.mig)}" if g.mig else "whole"
        how = (
            "its series vanish for the MIG manager's reset"
            if not g.mig
            else "new GPU_I_IDs, the GPU-level series go on"
            + (", its ResourceSlice re-published with new device names" if g.dra else "")
        )
        lines.append(
            f"MIG re-partition {day} {_hhmm(rw.start_s)}-{_hhmm(rw.end_s)}Z: {g.node} gpu {g.index} "
            f"{before} -> {_layout_text(g.mig_after)} ({how})"
        )
    if layout.whole_hold_lane is not None and day is not None:
        g = layout.gpus[layout.lanes[layout.whole_hold_lane].devices[0][0]]
        lines.append(
            f"  before it, {g.node} gpu {g.index} is held {_hhmm(WHOLE_HOLD_S[0])}-{_hhmm(WHOLE_HOLD_S[1])}Z "
            "by a pod (dcgm-exporter pod labels)"
        )
    if layout.churn_lane is not None and day is not None:
        pod = pods.get((layout.churn_lane, 0))
        name = f"{pod.namespace}/{pod.name}" if pod else "a StatefulSet pod"
        lines.append(
            f"pod churn {day}: {name} deleted {_hhmm(CHURN_S[0])}Z and recreated under its name with a new "
            f"uid, Pending until {_hhmm(CHURN_S[1])}Z, on the same GPU"
        )
    if layout.short_job_lane is not None and day is not None:
        lane = layout.lanes[layout.short_job_lane]
        g = layout.gpus[lane.devices[0][0]]
        gi = lane.devices[0][1]
        device = g.dra_device if gi is None else g.instance(gi).dra_device
        lines.append(
            f"a 20-minute DRA job {day} {_hhmm(SHORT_JOB_S[0])}-{_hhmm(SHORT_JOB_S[2])}Z on {g.node} {device}: "
            "its claim is only in the snapshots of its life, its pod's series vanish when it is deleted"
        )
    if layout.relabel_lane is not None and day is not None:
        pod = pods.get((layout.relabel_lane, 0))
        name = f"{pod.namespace}/{pod.name}" if pod else "a pod"
        lines.append(f"relabel {day} {_hhmm(RELABEL_S)}Z: {name} team=c -> team=research")
    if spec.ksm_offset_s:
        lines.append(f"kube-state-metrics and OpenCost stamped {spec.ksm_offset_s} s before dcgm-exporter")
    if spec.dra_snapshots_s:
        lines.append(
            f"DRA claims and slices kept as timed snapshots every {spec.dra_snapshots_s // 60} minutes"
        )
    if spec.ha_replicas and openmetrics:
        a, b = (_hhmm(t) for t in REPLICA_GAPS_S["a"]), (_hhmm(t) for t in REPLICA_GAPS_S["b"])
        lines.append(
            "OpenMetrics: every series from an HA pair (prometheus_replica a, and b 2 s later), rolling restarts: "
            f"a down {'-'.join(a)}Z, b down {'-'.join(b)}Z each day"
        )
    return lines


__all__ = [
    "DayPart",
    "changing_pool",
    "FactorySpec",
    "SimulatedDay",
    "clear_caches",
    "day_pods",
    "demo_spec",
    "describe",
    "factory_layout",
    "fleet_spec",
    "ha_replicas",
    "iter_day_parts",
    "simulate_day",
    "write_openmetrics",
    "write_parquet",
]
