"""What the simulated factory is made of: GPU models and their MIG profiles, the MIG layouts and the pattern
of lanes laid over the nodes, the kinds of jobs that run on them, and the names of the namespaces, Kueue
queues and drivers they meet. Data only: the rest of the package reads it."""

from __future__ import annotations

from dataclasses import dataclass

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


GIB = 1024**3  # bytes
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
        2048 * GIB,
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
        1152 * GIB,
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
        2048 * GIB,
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

# NVIDIA's GPU instance profile ids (`nvidia-smi mig -lgip`) by compute slices. The DRA driver names a MIG
# device gpu-<minor>-mig-<profile id>-<placement start>-<placement size> (docs/telemetry.md: gpu-1-mig-19-4-1),
# so one profile's devices on a GPU sort by placement, as their GPU_I_IDs do here.
MIG_PROFILE_IDS = {1: 19, 2: 14, 3: 9, 4: 5, 7: 0}


# --- jobs -----------------------------------------------------------------------------------------


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
