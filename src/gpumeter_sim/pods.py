"""The factory's pods: who runs on each lane, and when. A lane's jobs that start on day d are placed in
[d 04:00Z, d+1 04:00Z): day d's pods are the jobs of day d-1 that run past midnight and the jobs of day d,
drawn from generators seeded from (seed, day, lane, slot), so no day depends on another's random draws.
Long-running pods (inference replicas, a notebook, KAI reservation pods) live through the whole period; the
changing pool adds its one-off pods on its day."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import date, timedelta

import numpy as np

from gpumeter_sim.catalog import GIB, KINDS, VCLUSTER, VIRTUAL_NAMESPACES, JobKind
from gpumeter_sim.layout import Lane, Layout, factory_layout, hash_uuid, name_suffix
from gpumeter_sim.spec import (
    CHURN_S,
    DAY_S,
    NEW_LAYOUT_PODS_S,
    RELABEL_S,
    REPARTITION_S,
    SHORT_JOB_S,
    WHOLE_HOLD_S,
    FactorySpec,
    epoch,
)

FOREVER = 2**62  # "never" for pods that outlive any simulated day


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
    out.append(("memory", "byte", float(max(8, round(kind.mem_gib_per_gpu * weight))) * GIB))
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
        name, owner = f"{job}-{name_suffix(spec.seed, job, created)}", job
        labels["job-name"] = job
    elif kind.owner_kind == "ReplicaSet":
        owner = job
        name = f"{job}-{name_suffix(spec.seed, job, lane.lid, slot)}"
    elif kind.owner_kind == "StatefulSet":
        owner, name = job, f"{job}-0"
    elif not kind.vcluster:  # a bare pod (KAI's reservation pod)
        owner, name = "<none>", f"{job}-{name_suffix(spec.seed, job, created)}"
    else:  # vCluster: synced host pod, named <pod>-x-<namespace>-x-<vcluster>, truncated past 63 chars
        owner = "<none>"
        vns = VIRTUAL_NAMESPACES[int(rng.integers(len(VIRTUAL_NAMESPACES)))]
        vpod = f"{job}-{name_suffix(spec.seed, job, created)}"
        name = f"{vpod}-x-{vns}-x-{VCLUSTER}"
        if len(name) > 63:
            name = name[:52] + "-" + hashlib.sha256(name.encode()).hexdigest()[:10]
        labels["vcluster.loft.sh/managed-by"] = VCLUSTER
        labels["vcluster.loft.sh/namespace"] = vns
    annotations: tuple[tuple[str, str], ...] = ()
    if lane.kind == "kai":
        labels["runai-gpu-group"] = hash_uuid(spec.seed, spec.cluster, "runai-gpu-group", lane.lid)
        if kind.gpu_fraction:
            annotations = (("annotation_gpu_fraction", f"{kind.gpu_fraction:g}"),)
    mem_lo, mem_hi = kind.mem
    uid = hash_uuid(spec.seed, spec.cluster, namespace, name, created)
    claim_name = claim_uid = None
    if lane.dra:
        claim_name = f"{name[:50]}-gpu-{name_suffix(spec.seed, uid, 'claim')}"
        claim_uid = hash_uuid(spec.seed, spec.cluster, namespace, claim_name)
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
    created = epoch(spec.start) - 3 * DAY_S - 3600 + (lane.lid * 37) % 3600
    running = created + 45
    if lane.since is not None:  # a new MIG instance's pod: from the re-partition on
        created, running = (lane.since - REPARTITION_S[1] + t for t in NEW_LAYOUT_PODS_S)
    end = FOREVER if lane.until is None else lane.until  # drained: deleted while Running
    stem = kind.stems[0]
    if lane.lid == layout.churn_lane and layout.events_day is not None:
        kind = replace(kind, owner_kind="StatefulSet", labels=(("app", "vllm"),))
        gone, back = (epoch(layout.events_day) + t for t in CHURN_S)
        return [
            _make_pod(
                spec, layout, lane, slot, kind_name, np.random.default_rng([spec.seed, 0, 4, lane.lid, slot]),
                "vllm", c, r, f, f, "Succeeded", kind=kind,
            )
            for c, r, f in ((created, running, gone), (gone, back, end))
        ]  # fmt: skip
    if kind.owner_kind == "ReplicaSet":
        job = f"{stem}-{name_suffix(spec.seed, stem, lane.group, n=10)}"
    elif kind.owner_kind == "StatefulSet":
        job = stem if lane.lid == _first_lane_of_kind(layout, kind_name) else f"{stem}-{lane.lid}"
    else:
        job = f"{stem}-{lane.lid}"
    pod = _make_pod(spec, layout, lane, slot, kind_name, rng, job, created, running, end, end, "Succeeded")
    if lane.lid == layout.relabel_lane and layout.events_day is not None:
        labels = dict(pod.labels)
        before = tuple(sorted({**labels, "label_team": "c"}.items()))
        after = tuple(sorted({**labels, "label_team": "research"}.items()))
        pod = replace(pod, labels=before, labels_after=after, relabel_at=epoch(layout.events_day) + RELABEL_S)
    return [pod]


def _scenario_pods(spec: FactorySpec, layout: Layout) -> list[Pod]:
    """The events day's one-off pods: the pod holding the GPU that goes MIG at noon (02:00-10:00Z, through
    dcgm-exporter's pod labels) and the 20-minute DRA job, deleted as it ends (no Succeeded phase lingers)."""
    if layout.events_day is None:
        return []
    day = layout.events_day
    d0 = epoch(day)
    pods: list[Pod] = []
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
    w0 = epoch(day) + 4 * 3600
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
    d0, d1 = epoch(day), epoch(day) + DAY_S
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
