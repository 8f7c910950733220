"""What the tenant rules read, checked: the pod labels (and KAI's gpu-fraction annotation) kube-state-metrics
must be allowed to export for each pod to be billed to its tenant."""

from __future__ import annotations

from collections.abc import Iterable

from gpumeter.config import PodLabelRule
from gpumeter.ingest.source_check.findings import KSM, Verdict
from gpumeter.ingest.source_check.window import DcgmSeries, SourceWindow

# Pod labels gpumeter reads through kube-state-metrics besides the tenants' own (docs/telemetry.md).
VCLUSTER_KEY = "vcluster.loft.sh/managed-by"
KAI_GROUP_KEY = "runai-gpu-group"
KAI_RESERVATION_NAMESPACE = "kai-resource-reservation"


def pod_labels(window: SourceWindow, dcgm: list[DcgmSeries], has_kube: bool) -> None:
    needed: dict[str, str] = {}  # label_<sanitized> -> the key as Kubernetes writes it
    for tenant in window.config.tenants:
        rules = [*tenant.pod_labels, *(r for d in tenant.dated_rules for r in d.pod_labels)]
        for rule in rules:
            needed[rule.metric_label] = rule.key.removeprefix("label_")
        if tenant.vclusters or any(d.vclusters for d in tenant.dated_rules):
            needed[PodLabelRule(key=VCLUSTER_KEY, value="*").metric_label] = VCLUSTER_KEY
    kai = any(
        (s.labels.get("exported_namespace") or s.labels.get("namespace")) == KAI_RESERVATION_NAMESPACE
        for s in dcgm
    )
    if kai:
        needed[PodLabelRule(key=KAI_GROUP_KEY, value="*").metric_label] = KAI_GROUP_KEY
    if not needed:
        window.add(
            KSM,
            "pod labels exported",
            "the tenant rules name namespaces only: no pod label is needed",
            Verdict.OK,
            "nothing needed",
        )
    elif not has_kube or not window.groups("kube_pod_labels", ("job",)):
        window.add(
            KSM,
            "pod labels exported",
            "no pod label series (kube_pod_labels) in the window",
            Verdict.MISBILLS,
            f"scrape kube-state-metrics with {_allowlist(needed.values())}",
            "tenants given by pod label or vCluster are found by namespace only, or not at all "
            "(unmapped workloads)",
        )
    else:
        missing = {
            label: key
            for label, key in needed.items()
            if not window.groups("kube_pod_labels", ("job",), f'{label}!=""')
        }
        if missing:
            window.add(
                KSM,
                "pod labels exported",
                f"no pod carries {', '.join(sorted(missing.values()))} in kube-state-metrics' pod labels: "
                "not allow-listed (or no pod has them)",
                Verdict.MISBILLS,
                f"start kube-state-metrics with {_allowlist(needed.values())}",
                "the pods of tenants given by those labels are billed to the tenant of their namespace, "
                "or to unmapped workloads"
                + (
                    "; GPUs shared through KAI are billed to the reservation pod"
                    if KAI_GROUP_KEY in missing.values()
                    else ""
                ),
            )
        else:
            window.add(
                KSM,
                "pod labels exported",
                f"the labels the tenant rules read are exported: {', '.join(sorted(needed.values()))}",
                Verdict.OK,
                "nothing needed",
            )
    if (
        window.config.share == "requested"
        and kai
        and not window.groups("kube_pod_annotations", ("job",), 'annotation_gpu_fraction!=""')
    ):
        window.add(
            KSM,
            "pod annotations exported",
            "GPUs are shared through KAI but no pod carries the gpu-fraction annotation",
            Verdict.MISBILLS,
            "start kube-state-metrics with --metric-annotations-allowlist=pods=[gpu-fraction]",
            "shared GPUs are split equally among their pods instead of by their requested fractions",
        )


def _allowlist(keys: Iterable[str]) -> str:
    return f"--metric-labels-allowlist=pods=[{','.join(sorted(set(keys)))}]"
