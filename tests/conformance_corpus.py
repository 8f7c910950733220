"""A conformance corpus: the label sets the exporters a GPU pool runs expose, written from the exporters' own
formats (never from gpumeter's code), and the scrape paths that bring them to a PromQL API.

Each function returns `Exposed` series: the labels as the exporter writes them on its /metrics page
(`__name__` included) and the value. tests/scrape_paths.py turns them into what the server read holds.

dcgm-exporter (pkg/dcgmexporter, its metrics template):

    FIELD{gpu="0",UUID="GPU-…",pci_bus_id="…",device="nvidia0",modelName="…"[,GPU_I_PROFILE="…",GPU_I_ID="…"]
          [,Hostname="…"],DCGM_FI_DRIVER_VERSION="…"[,container="…",namespace="…",pod="…"][,vgpu="…"]} value

- 4.x: `UUID`, `hostname` (its newest builds; older 4.x and 3.x write `Hostname`), and for a held GPU the pod
  attributes `pod`, `namespace`, `container`. With `--kubernetes-enable-dra` also `dra_claim_name`,
  `dra_claim_namespace`, `dra_driver_name`, `dra_pool_name`, `dra_device_name`. With
  `--kubernetes-virtual-gpus` (time-slicing) one copy of every series per pod sharing the GPU, each with
  `vgpu="<n>"` and the whole device's value.
- 3.x with `--use-old-namespace`: `uuid` (lowercase) instead of `UUID`, and the pod attributes
  `pod_name`, `pod_namespace`, `container_name`.
- `DCGM_FI_DEV_XID_ERRORS` carries `err_code` and `err_msg` (`"0"`, `"No Error"` when none).
- Without `NODE_NAME` in its environment the exporter writes its own pod's name (the container's hostname)
  as the node label.
- MIG in the default flex mode: a MIG-enabled GPU has no series of its own, only one per GPU instance
  (`GPU_I_PROFILE`, `GPU_I_ID`). Instances have no `DCGM_FI_DEV_GPU_UTIL` (only the profiling
  `DCGM_FI_PROF_GR_ENGINE_ACTIVE`), some builds no frame-buffer fields either; device-level fields (power,
  energy, XID) are repeated on every instance with the GPU's value.

kube-state-metrics 2.x (docs/metrics/workload/pod-metrics.md, node-metrics.md): resources sanitized to
`nvidia_com_gpu`, `nvidia_com_mig_3g_40gb` with `unit="integer"`; pod labels only with
`--metric-labels-allowlist`; one `kube_pod_status_phase` series per phase (0/1); three
`kube_node_status_condition` series per condition (`status` true/false/unknown).

OpenCost: `node_gpu_hourly_cost{node,instance_type,region,provider_id}` (job `opencost`).

Scrape intervals as fleets set them: dcgm-exporter every 15 s (the GPU Operator's ServiceMonitor default),
kube-state-metrics every 30 s, OpenCost every 60 s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

from scrape_paths import ScrapePath, service_monitor_target

# --- scrape intervals (seconds) -------------------------------------------------------------------------
DCGM_SCRAPE_S = 15
KSM_SCRAPE_S = 30
OPENCOST_SCRAPE_S = 60

H100 = "NVIDIA H100 80GB HBM3"
DRIVER = "570.133.20"

UTIL = "DCGM_FI_DEV_GPU_UTIL"
GR_ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
XID = "DCGM_FI_DEV_XID_ERRORS"
POWER = "DCGM_FI_DEV_POWER_USAGE"


@dataclass(frozen=True)
class Exposed:
    """One series as an exporter writes it: labels (with `__name__`) and the value of this scrape."""

    labels: Mapping[str, str]
    value: float

    @property
    def name(self) -> str:
        return self.labels["__name__"]


@dataclass(frozen=True)
class DcgmDialect:
    """How one dcgm-exporter build spells its labels."""

    name: str
    uuid_label: str
    hostname_label: str
    pod_label: str
    namespace_label: str
    container_label: str


DCGM_4X = DcgmDialect("4x", "UUID", "hostname", "pod", "namespace", "container")
DCGM_4X_OLDER = DcgmDialect("4x-Hostname", "UUID", "Hostname", "pod", "namespace", "container")
DCGM_3X_OLD_NAMESPACE = DcgmDialect(
    "3x-old-namespace", "uuid", "Hostname", "pod_name", "pod_namespace", "container_name"
)


@dataclass(frozen=True)
class Gpu:
    index: str
    uuid: str
    pci_bus_id: str
    model: str = H100


class PodRef(NamedTuple):
    """A holder as dcgm-exporter names it."""

    namespace: str
    pod: str
    container: str


@dataclass(frozen=True)
class DraClaim:
    claim: str
    namespace: str
    device: str  # the DRA device name in the node's pool, e.g. gpu-0
    pool: str  # the node name
    driver: str = "gpu.nvidia.com"


@dataclass(frozen=True)
class GpuReading:
    """One scrape's readings of a GPU (or MIG instance): busy 0-1, frame buffer MiB, energy mJ, power W."""

    busy: float
    fb_used_mib: float
    energy_mj: float
    power_w: float
    xid: int = 0


def _device_labels(dialect: DcgmDialect, gpu: Gpu) -> dict[str, str]:
    # The template's fixed part, in its order: gpu, UUID, pci_bus_id, device, modelName, [MIG], Hostname.
    return {
        "gpu": gpu.index,
        dialect.uuid_label: gpu.uuid,
        "pci_bus_id": gpu.pci_bus_id,
        "device": f"nvidia{gpu.index}",
        "modelName": gpu.model,
    }


def _attributes(
    dialect: DcgmDialect,
    holder: PodRef | None,
    vgpu: str | None,
    dra: DraClaim | None,
) -> dict[str, str]:
    out: dict[str, str] = {"DCGM_FI_DRIVER_VERSION": DRIVER}
    if holder is not None:
        out[dialect.container_label] = holder.container
        out[dialect.namespace_label] = holder.namespace
        out[dialect.pod_label] = holder.pod
    if dra is not None:
        out |= {
            "dra_claim_name": dra.claim,
            "dra_claim_namespace": dra.namespace,
            "dra_device_name": dra.device,
            "dra_driver_name": dra.driver,
            "dra_pool_name": dra.pool,
        }
    if vgpu is not None:
        out["vgpu"] = vgpu
    return out


def _xid(reading: GpuReading) -> dict[str, str]:
    return {"err_code": str(reading.xid), "err_msg": "No Error" if reading.xid == 0 else "Unknown Error"}


def dcgm_whole_gpu(
    dialect: DcgmDialect,
    gpu: Gpu,
    hostname: str,
    reading: GpuReading,
    holder: PodRef | None = None,
    *,
    vgpu: str | None = None,
    dra: DraClaim | None = None,
) -> list[Exposed]:
    """One scrape of a whole (non-MIG) GPU: the default counters gpumeter's accounting touches, and power."""
    base = _device_labels(dialect, gpu)
    base[dialect.hostname_label] = hostname
    attrs = _attributes(dialect, holder, vgpu, dra)

    def series(name: str, value: float, extra: Mapping[str, str] = {}) -> Exposed:
        return Exposed({"__name__": name, **base, **extra, **attrs}, value)

    return [
        series(UTIL, round(reading.busy * 100)),
        series(GR_ENGINE, reading.busy),
        series(FB_USED, reading.fb_used_mib),
        series(ENERGY, reading.energy_mj),
        series(XID, reading.xid, _xid(reading)),
        series(POWER, reading.power_w),
    ]


def dcgm_mig_instance(
    dialect: DcgmDialect,
    gpu: Gpu,
    hostname: str,
    gpu_instance_id: str,
    profile: str,
    instance: GpuReading,
    device: GpuReading,
    holder: PodRef | None = None,
    *,
    reports_fb: bool = True,
) -> list[Exposed]:
    """One scrape of one MIG GPU instance in flex mode: its own GR_ENGINE_ACTIVE (never GPU_UTIL), its frame
    buffer where the build reports one, and the device-level fields with the GPU's value (`device`)."""
    base = _device_labels(dialect, gpu)
    base |= {"GPU_I_PROFILE": profile, "GPU_I_ID": gpu_instance_id, dialect.hostname_label: hostname}
    attrs = _attributes(dialect, holder, None, None)

    def series(name: str, value: float, extra: Mapping[str, str] = {}) -> Exposed:
        return Exposed({"__name__": name, **base, **extra, **attrs}, value)

    out = [series(GR_ENGINE, instance.busy)]
    if reports_fb:
        out.append(series(FB_USED, instance.fb_used_mib))
    out += [
        series(ENERGY, device.energy_mj),
        series(XID, device.xid, _xid(device)),
        series(POWER, device.power_w),
    ]
    return out


# --- kube-state-metrics 2.x -----------------------------------------------------------------------------

POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def ksm_node(
    node: str,
    *,
    whole_gpus: int,
    mig_capacity: Mapping[str, int] = {},
    gpu_count_label: int | None = None,
    unschedulable: bool = False,
    ready: bool = True,
) -> list[Exposed]:
    """A node's series: GPU capacity (`nvidia_com_gpu` hides MIG GPUs under the mixed strategy; each MIG
    profile is its own resource), GPU feature discovery's `nvidia.com/gpu.count` label where allow-listed,
    `spec.unschedulable` and the Ready condition."""
    out = [
        Exposed(
            {
                "__name__": "kube_node_status_capacity",
                "node": node,
                "resource": "nvidia_com_gpu",
                "unit": "integer",
            },
            whole_gpus,
        )
    ]
    for resource, count in sorted(mig_capacity.items()):
        out.append(
            Exposed(
                {
                    "__name__": "kube_node_status_capacity",
                    "node": node,
                    "resource": resource,
                    "unit": "integer",
                },
                count,
            )
        )
    if gpu_count_label is not None:
        out.append(
            Exposed(
                {
                    "__name__": "kube_node_labels",
                    "node": node,
                    "label_nvidia_com_gpu_count": str(gpu_count_label),
                },
                1,
            )
        )
    out.append(Exposed({"__name__": "kube_node_spec_unschedulable", "node": node}, 1 if unschedulable else 0))
    for status in ("true", "false", "unknown"):
        value = 1 if (status == "true") == ready and status != "unknown" else 0
        out.append(
            Exposed(
                {
                    "__name__": "kube_node_status_condition",
                    "node": node,
                    "condition": "Ready",
                    "status": status,
                },
                value,
            )
        )
    return out


@dataclass(frozen=True)
class KsmPod:
    namespace: str
    pod: str
    uid: str
    node: str
    container: str
    created_by_kind: str
    created_by_name: str
    host_ip: str
    pod_ip: str
    phase: str = "Running"
    labels: tuple[tuple[str, str], ...] = ()  # pod labels (Kubernetes keys)
    # (resource as kube-state-metrics spells it, amount) requested by the container
    requests: tuple[tuple[str, float], ...] = ()


def _sanitize(key: str) -> str:
    return "label_" + "".join(c if c.isalnum() or c == "_" else "_" for c in key)


def ksm_pod(pod: KsmPod, *, labels_allowlisted: bool) -> list[Exposed]:
    """A pod's series: one phase series per phase, kube_pod_info, kube_pod_labels (its labels only when
    allow-listed) and the container's resource requests."""
    ident = {"namespace": pod.namespace, "pod": pod.pod, "uid": pod.uid}
    out = [
        Exposed(
            {"__name__": "kube_pod_status_phase", **ident, "phase": phase}, 1 if phase == pod.phase else 0
        )
        for phase in POD_PHASES
    ]
    out.append(
        Exposed(
            {
                "__name__": "kube_pod_info",
                **ident,
                "host_ip": pod.host_ip,
                "pod_ip": pod.pod_ip,
                "node": pod.node,
                "created_by_kind": pod.created_by_kind,
                "created_by_name": pod.created_by_name,
                "priority_class": "",
                "host_network": "false",
            },
            1,
        )
    )
    label_set = {_sanitize(k): v for k, v in pod.labels} if labels_allowlisted else {}
    out.append(Exposed({"__name__": "kube_pod_labels", **ident, **label_set}, 1))
    for resource, amount in pod.requests:
        unit = {"cpu": "core", "memory": "byte"}.get(resource, "integer")
        out.append(
            Exposed(
                {
                    "__name__": "kube_pod_container_resource_requests",
                    **ident,
                    "container": pod.container,
                    "node": pod.node,
                    "resource": resource,
                    "unit": unit,
                },
                amount,
            )
        )
    return out


# --- OpenCost --------------------------------------------------------------------------------------------


def opencost_node(
    node: str, price: float, instance_type: str, region: str, provider_id: str
) -> list[Exposed]:
    return [
        Exposed(
            {
                "__name__": "node_gpu_hourly_cost",
                "node": node,
                "instance_type": instance_type,
                "region": region,
                "provider_id": provider_id,
            },
            price,
        )
    ]


# --- scrape paths of kube-state-metrics and OpenCost ------------------------------------------------------

KSM_POD = "kube-state-metrics-6d4b9c8f7-h2x9q"
# kube-prometheus-stack's ServiceMonitor of kube-state-metrics: its chart's Service and port `http`.
KSM_TARGET = service_monitor_target(
    **{"job": "kube-state-metrics", "instance": "10.0.2.14:8080", "namespace": "monitoring", "pod": KSM_POD},
    **{
        "container": "kube-state-metrics",
        "service": "kube-prometheus-stack-kube-state-metrics",
        "endpoint": "http",
    },
)
OPENCOST_TARGET = {"job": "opencost", "instance": "opencost.opencost:9003"}


def alongside(dcgm_path: ScrapePath, name: str, target: Mapping[str, str], honor_labels: bool) -> ScrapePath:
    """Another exporter's path through the same servers as `dcgm_path` (its federation or external labels)."""
    return replace(dcgm_path, name=name, target_labels=dict(target), honor_labels=honor_labels)


def ksm_path(dcgm_path: ScrapePath) -> ScrapePath:
    """kube-state-metrics as kube-prometheus-stack scrapes it: a ServiceMonitor with honorLabels true."""
    return alongside(dcgm_path, f"{dcgm_path.name}/kube-state-metrics", KSM_TARGET, honor_labels=True)


def opencost_path(dcgm_path: ScrapePath) -> ScrapePath:
    """OpenCost as its chart's static scrape config reads it."""
    return alongside(dcgm_path, f"{dcgm_path.name}/opencost", OPENCOST_TARGET, honor_labels=False)


__all__ = [
    "DCGM_3X_OLD_NAMESPACE",
    "DCGM_4X",
    "DCGM_4X_OLDER",
    "DCGM_SCRAPE_S",
    "KSM_SCRAPE_S",
    "OPENCOST_SCRAPE_S",
    "DcgmDialect",
    "DraClaim",
    "Exposed",
    "Gpu",
    "GpuReading",
    "KsmPod",
    "PodRef",
    "dcgm_mig_instance",
    "dcgm_whole_gpu",
    "ksm_node",
    "ksm_path",
    "ksm_pod",
    "opencost_node",
    "opencost_path",
]
