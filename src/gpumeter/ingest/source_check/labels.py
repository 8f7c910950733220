"""What the DCGM series' labels say, checked: the label names they are spelt with, the node of each GPU (host
names that are not nodes), the MIG device mode and the DRA claim labels."""

from __future__ import annotations

from collections import defaultdict

from gpumeter.ingest.prometheus import targets
from gpumeter.ingest.prometheus.promql import escape_label_value
from gpumeter.ingest.source_check.findings import DCGM, Verdict, few
from gpumeter.ingest.source_check.window import DcgmSeries, SourceWindow

# The labels of a DCGM series read for the checks (a series' other labels are kept, never needed).
_OLD_HOLDER_LABELS = ("pod_name", "pod_namespace", "container_name")
_DRA_LABELS = ("dra_claim_name", "dra_claim_namespace", "dra_driver_name", "dra_pool_name", "dra_device_name")
# At most this many exporter-pod-looking host names are looked up one by one in kube_pod_info.
_MAX_POD_LOOKUPS = 50


def label_names(window: SourceWindow, dcgm: list[DcgmSeries]) -> None:
    if not dcgm:
        return
    names = {name for s in dcgm for name in s.labels}
    spelt = [n for n in ("Hostname", "hostname", "UUID", "uuid") if n in names]
    old = [n for n in _OLD_HOLDER_LABELS if n in names]
    renamed = sorted(n for n in names if n.startswith(targets.RENAMED_PREFIX))
    found = "node and GPU labels spelt " + (", ".join(spelt) or "neither Hostname nor UUID")
    found += (
        f"; pods named with the old labels {', '.join(old)} (--use-old-namespace)"
        if old
        else "; pods named with pod, namespace, container"
    )
    if renamed:
        found += f"; renamed by the scrape: {', '.join(renamed)}"
    if "UUID" not in names and "uuid" not in names:
        window.add(
            DCGM,
            "label names",
            found,
            Verdict.MISBILLS,
            "restore the UUID label (check metric relabelings that drop it)",
            "a series without a GPU UUID cannot be counted as a GPU: its time is not billed",
        )
        return
    window.add(DCGM, "label names", found, Verdict.OK, "nothing needed: gpumeter reads every spelling")


def gpu_nodes(window: SourceWindow, dcgm: list[DcgmSeries], nodes: set[str], has_kube: bool) -> None:
    if not dcgm:
        return
    hosts: dict[str, list[DcgmSeries]] = defaultdict(list)
    for s in dcgm:
        host = s.labels.get("Hostname") or s.labels.get("hostname")
        if host:
            hosts[host].append(s)
    if not hosts:
        window.add(
            DCGM,
            "node of each GPU",
            "no series carries Hostname",
            Verdict.MISBILLS,
            "restore the Hostname label (check metric relabelings that drop it)",
            "GPUs without a node get no node price, state or capacity check",
        )
        return
    if not nodes:
        window.add(
            DCGM,
            "node of each GPU",
            f"{len(hosts)} host name(s) seen; kube-state-metrics lists no node, so they cannot be checked",
            Verdict.WARN,
            "scrape kube-state-metrics' node series (kube_node_info) into this server",
        )
        return
    strangers = sorted(h for h in hosts if h not in nodes)
    if not strangers:
        window.add(
            DCGM,
            "node of each GPU",
            f"every host name ({len(hosts)}) is a node kube-state-metrics knows",
            Verdict.OK,
            "nothing needed",
        )
        return
    known_pods: dict[str, str] = {}
    for host in strangers[:_MAX_POD_LOOKUPS]:
        matcher = f'pod="{escape_label_value(host)}"'
        node = next(
            (g["node"] for g in window.groups("kube_pod_info", ("node",), matcher) if g.get("node")), None
        )
        if node:
            known_pods[host] = node
    unknown = [h for h in strangers if h not in known_pods]
    looks = (
        "they look like dcgm-exporter pod names: the exporter runs without NODE_NAME, so it reports its "
        "own pod name as the host"
    )
    action = (
        "set NODE_NAME from the downward API (fieldRef spec.nodeName) on the dcgm-exporter DaemonSet "
        "(the GPU Operator does)"
    )
    if known_pods:
        window.add(
            DCGM,
            "node of each GPU",
            f"{len(known_pods)} host name(s) are not nodes ({few(sorted(known_pods))}); {looks}; "
            "gpumeter takes the node of the pod of that name from kube-state-metrics' pod list ("
            + ", ".join(f"{h} on {n}" for h, n in sorted(known_pods.items())[:3])
            + ")",
            Verdict.WARN,
            action,
            "none while kube-state-metrics lists those pods; once it no longer does (the exporter pod "
            "restarted under a new name between scrapes), their GPUs lose their node",
        )
    if unknown:
        series = [s for h in unknown for s in hosts[h]]
        gpus = {s.labels.get("UUID") or s.labels.get("uuid") or "?" for s in series}
        window.add(
            DCGM,
            "node of each GPU",
            f"{len(unknown)} host name(s) are neither nodes nor pods kube-state-metrics knows "
            f"({few(unknown)}); {looks}",
            Verdict.MISBILLS,
            action,
            f"{len(gpus)} GPU(s), about {window.hours(window.gpu_samples(series))} GPU-hours in this window, "
            "have no node: no node price (OpenCost), no cordon or health state, and their node's expected "
            "capacity shows them as missing",
        )


def mig_devices(window: SourceWindow, dcgm: list[DcgmSeries]) -> None:
    if not dcgm:
        return
    mig: set[str] = set()
    whole: set[str] = set()
    for s in dcgm:
        uuid = s.labels.get("UUID") or s.labels.get("uuid") or ""
        (mig if s.labels.get("GPU_I_ID") else whole).add(uuid)
    if not mig:
        window.add(DCGM, "MIG devices", "no MIG instance in the window", Verdict.OK, "nothing needed")
        return
    flex = sorted(mig - whole)
    both = sorted(mig & whole)
    parts = []
    if flex:
        parts.append(
            f"{len(flex)} MIG GPU(s) report their instances only (the exporter's default device mode)"
        )
    if both:
        parts.append(f"{len(both)} MIG GPU(s) report the GPU and its instances (`-d g,i` or alike)")
    window.add(DCGM, "MIG devices", "; ".join(parts), Verdict.OK, "nothing needed: both are read")


def dra_claims(window: SourceWindow, dcgm: list[DcgmSeries]) -> None:
    if not dcgm:
        return
    with_dra = {s.labels.get("UUID") or s.labels.get("uuid") for s in dcgm if s.labels.get(_DRA_LABELS[0])}
    if with_dra:
        found = f"{len(with_dra)} GPU(s) carry their ResourceClaim (dra_claim_name)"
    else:
        found = "no series carries DRA claim labels (dcgm-exporter without --kubernetes-enable-dra)"
    sources = [window.spec.claims_file, window.spec.kubeconfig, window.spec.k8s_snapshots_dir]
    action = (
        "nothing needed"
        if any(sources)
        else "nothing needed unless GPUs are handed out through DRA: then set k8s_snapshots_dir and "
        "kubeconfig, from which gpumeter reads who holds them"
    )
    window.add(DCGM, "DRA claims", found, Verdict.OK, action)
