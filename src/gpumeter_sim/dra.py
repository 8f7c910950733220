"""The Kubernetes DRA objects of the DRA-managed GPUs, as `kubectl get ... -o json` shows them: the NVIDIA DRA
driver's ResourceSlices (re-published when a GPU is re-partitioned) and the ResourceClaims generated for
the pods, as one list per day or as the snapshot job's timed lists."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from gpumeter_sim.catalog import DRA_DRIVER, DRIVER_VERSION, MODELS
from gpumeter_sim.layout import GpuInfo, Layout, factory_layout, hash_uuid, name_suffix
from gpumeter_sim.pods import Pod
from gpumeter_sim.spec import DAY_S, FactorySpec, epoch


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
    d0 = epoch(rw.day)
    return (d0 + rw.start_s) * 1000, (d0 + rw.end_s) * 1000


def resource_slices(spec: FactorySpec, at_ms: int | None = None) -> dict[str, Any]:
    """The NVIDIA DRA driver's ResourceSlices (resource.k8s.io/v1): one per node with DRA-managed GPUs.

    `at_ms` None: one list holding every device the driver ever publishes (how a list of unknown time was
    kept; a re-partitioned GPU's old and new MIG devices alike). Else the slices as published at that
    moment, with `metadata.generation`: a re-partitioned GPU's slice is re-published (generation 2: no MIG
    devices; 3: the new ones, new names) during the re-partition."""
    layout = factory_layout(spec)
    items: list[dict[str, Any]] = []
    for node in layout.nodes:
        model = MODELS[node.model]
        devices: list[dict[str, Any]] = []
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
            "name": f"{node.name}-{DRA_DRIVER}-{name_suffix(spec.seed, node.name, 'slice')}",
            "uid": hash_uuid(spec.seed, spec.cluster, "slice", node.name),
            "creationTimestamp": _iso(epoch(spec.start) - 7 * DAY_S),
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


def _claim_items(spec: FactorySpec, pods: list[Pod]) -> list[tuple[Pod, dict[str, Any]]]:
    """The ResourceClaim generated from each DRA pod's ResourceClaimTemplate, with its pod: it exists while
    the pod does (created with it, deleted with it)."""
    layout = factory_layout(spec)
    lanes = {lane.lid: lane for lane in layout.lanes}
    items: list[tuple[Pod, dict[str, Any]]] = []
    for pod in pods:
        if not pod.claim_name:
            continue
        lane = lanes[pod.lane]
        results: list[dict[str, str | None]] = []
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


def resource_claims(spec: FactorySpec, pods: list[Pod]) -> dict[str, Any]:
    """The claims of a day's pods (`pods.day_pods`) in one list (a snapshot of unknown time)."""
    return _k8s_list([item for _pod, item in _claim_items(spec, pods)])


# A snapshot is named by the time its list was asked for: a little after the schedule's tick.
SNAPSHOT_DELAY_MS = 250


def _snapshot_times_ms(spec: FactorySpec, day: date) -> list[int]:
    every = spec.dra_snapshots_s
    if not every:
        return []
    return [(epoch(day) + k * every) * 1000 + SNAPSHOT_DELAY_MS for k in range(DAY_S // every)]


def claim_snapshots(spec: FactorySpec, day: date, pods: list[Pod]) -> tuple[tuple[int, dict[str, Any]], ...]:
    """`kubectl get resourceclaims -A -o json` every `dra_snapshots_s` of the day (the snapshot job's
    files): (time taken in epoch ms, list) with the claims that existed then."""
    items = _claim_items(spec, pods)
    return tuple(
        (t, _k8s_list([item for pod, item in items if pod.created * 1000 <= t < pod.deleted * 1000]))
        for t in _snapshot_times_ms(spec, day)
    )


def slice_snapshots(spec: FactorySpec, day: date) -> tuple[tuple[int, dict[str, Any]], ...]:
    """`kubectl get resourceslices -o json` at the same times as `claim_snapshots`."""
    return tuple((t, resource_slices(spec, t)) for t in _snapshot_times_ms(spec, day))
