"""The factory in words: `describe` (which GPU has which role and scenario) and `changing_pool` (what
changes during the day), as `gpumeter demo` prints them."""

from __future__ import annotations

from gpumeter_sim.catalog import MODELS
from gpumeter_sim.layout import MigInstance, factory_layout, lane_index
from gpumeter_sim.pods import day_pods
from gpumeter_sim.spec import (
    AUTOSCALE_S,
    CHURN_S,
    RELABEL_S,
    REPLICA_GAPS_S,
    ROLLOUT_S,
    SHORT_JOB_S,
    WHOLE_HOLD_S,
    FactorySpec,
)


def describe(spec: FactorySpec) -> str:
    """A human-readable summary of the layout: which GPU has which role and scenario."""
    layout = factory_layout(spec)
    lanes = lane_index(layout)
    lines: list[str] = []
    for node in layout.nodes:
        lines.append(
            f"{node.name} ({MODELS[node.model].model_name}, {node.gpus} GPUs){' cordoned' if node.cordoned else ''}"
        )
        for g in (g for g in layout.gpus if g.node == node.name):
            tags: list[str] = []
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
    lines: list[str] = []
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
    if spec.ksm_rollout:
        lines.append(
            f"kube-state-metrics rolled out {spec.changing_day} with a surge: the new instance scraped from "
            f"{_hhmm(ROLLOUT_S[0])}Z, the old one until {_hhmm(ROLLOUT_S[1])}:{ROLLOUT_S[1] % 60:02d}Z"
        )
    if layout.joining_node is not None and layout.events_day is not None:
        lines.append(
            f"autoscaler {layout.events_day}: {layout.joining_node} joins {_hhmm(AUTOSCALE_S[0])}Z"
            + (
                f", {layout.leaving_node} is removed {_hhmm(AUTOSCALE_S[1])}Z (its pods with it)"
                if layout.leaving_node
                else ""
            )
        )
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
