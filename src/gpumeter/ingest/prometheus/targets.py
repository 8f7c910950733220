"""Which labels of a scraped series are the exporter's and which the scrape target's (docs/rules.md, R5 "A
holder is a pod the exporter named").

Prometheus attaches its target's labels to every series it scrapes. A Kubernetes-discovered target
(prometheus-operator's ServiceMonitor and PodMonitor, or any `kubernetes_sd` job relabelled alike) carries the
exporter pod's own `namespace`, `pod` and `container`, plus `service` and `endpoint`. Where the exporter wrote
a label of the same name, `honor_labels: false` (the GPU Operator's default) renames the exporter's to
`exported_<name>`, and `honor_labels: true` keeps the exporter's; either way a series the exporter gave no pod
(a free GPU, a node's series) carries the target's pod. That pod is the exporter itself, never a holder.

The target's own labels are read from `up`, which Prometheus (and vmagent, and every store they write to)
records once per target with exactly the target's labels. A series whose pod labels were renamed tells its
target's pod as well. Where neither says, a series with a target's marks cannot be told apart: its pod holds
nothing, and it is counted as such.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

# The holder's labels as dcgm-exporter writes them, newest spelling first (`--use-old-namespace` writes the
# second), and the name Prometheus gives the exporter's label when the target has one of the same name.
HOLDER_LABELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("namespace", ("namespace", "pod_namespace")),
    ("pod", ("pod", "pod_name")),
    ("container", ("container", "container_name")),
)
RENAMED_PREFIX = "exported_"
# dcgm-exporter's holder labels under `--use-old-namespace`, in HOLDER_LABELS' order: no scrape target sets them.
OLD_HOLDER_LABELS = ("pod_namespace", "pod_name", "container_name")
# The labels a Kubernetes-discovered target attaches that name the exporter's own pod.
TARGET_POD_LABELS = ("namespace", "pod", "container")
# Labels only a Kubernetes-discovered target carries (prometheus-operator's `service` and `endpoint`): a series
# with one came through a target that attached its own pod labels.
KUBERNETES_TARGET_MARKS = ("endpoint", "service")
# Where the target's own job and instance are: a federating server's job with `honor_labels: false` renames
# the original ones.
JOB_LABELS = ("exported_job", "job")
INSTANCE_LABELS = ("exported_instance", "instance")


class HolderReading(Enum):
    """How a series' pod labels were read."""

    EXPORTER = "named by the exporter"  # a holder (or none) the exporter wrote
    TARGET = "the scrape target's own pod"  # the exporter's pod, attached by the scrape: no holder
    UNKNOWN = "cannot be told from the scrape target's"  # no holder, reported


Holder = tuple[str | None, str | None, str | None]  # (namespace, pod, container)
TargetKey = tuple[str | None, str, str]  # (cluster label value, job, instance)


def _first(labels: Mapping[str, str], names: Iterable[str]) -> str | None:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return None


def scrape_target_labels(labels: Mapping[str, str]) -> tuple[str, str]:
    """(job, instance) of the target that scraped a series: the original ones where a federating scrape with
    `honor_labels: false` renamed them; "" where absent."""
    return _first(labels, JOB_LABELS) or "", _first(labels, INSTANCE_LABELS) or ""


def target_key(labels: Mapping[str, str], cluster_label: str) -> TargetKey | None:
    """The scrape target a series came from: (cluster label, job, instance); None without job and instance."""
    job, instance = scrape_target_labels(labels)
    if not job and not instance:
        return None
    return (labels.get(cluster_label) or None, job, instance)


@dataclass
class ScrapeTargets:
    """The scrape targets' own pods, per target: learned from their `up` series (`learn_up`) and from series
    whose pod labels Prometheus renamed (`learn_renamed`)."""

    cluster_label: str = "cluster"
    pods: dict[TargetKey, set[tuple[str | None, str | None]]] = field(default_factory=dict)
    # Targets whose own labels are known (from `up`), whether or not they carry a pod.
    known: set[TargetKey] = field(default_factory=set)

    def learn_up(self, up_labels: Iterable[Mapping[str, str]]) -> None:
        """Each `up` series' labels: exactly its target's (plus the server's external labels)."""
        for labels in up_labels:
            key = target_key(labels, self.cluster_label)
            if key is None:
                continue
            self.known.add(key)
            if labels.get("pod") or labels.get("namespace"):
                self.pods.setdefault(key, set()).add((labels.get("namespace"), labels.get("pod")))

    def learn_renamed(self, series_labels: Iterable[Mapping[str, str]]) -> bool:
        """Series whose exporter labels were renamed `exported_*`, or that carry the old holder labels beside
        plain ones: their plain pod labels are the target's. Whether a target's pod was learned anew."""
        learned = False
        for labels in series_labels:
            if any(RENAMED_PREFIX + name in labels for name in TARGET_POD_LABELS) or any(
                old in labels for old in OLD_HOLDER_LABELS
            ):
                key = target_key(labels, self.cluster_label)
                if key is not None and (labels.get("pod") or labels.get("namespace")):
                    pod = (labels.get("namespace"), labels.get("pod"))
                    known = self.pods.setdefault(key, set())
                    learned |= pod not in known
                    known.add(pod)
        return learned

    def holder(self, labels: Mapping[str, str]) -> tuple[Holder, HolderReading]:
        """The holder a series names (namespace, pod, container; all None: none) and how it was read: the pod
        the exporter named, never the scrape target's own pod (docs/rules.md R5)."""
        none: Holder = (None, None, None)
        if any(RENAMED_PREFIX + name in labels for name in TARGET_POD_LABELS):
            # The exporter's labels were renamed: the plain ones are the target's.
            found = tuple(
                _first(labels, (RENAMED_PREFIX + name, *names[1:])) for name, names in HOLDER_LABELS
            )
            return found, HolderReading.EXPORTER  # type: ignore[return-value]
        if any(labels.get(old) for old in OLD_HOLDER_LABELS):
            # dcgm-exporter's old names (`--use-old-namespace`), which no target sets: any plain ones are the
            # target's.
            old: Holder = tuple(labels.get(name) or None for name in OLD_HOLDER_LABELS)  # type: ignore[assignment]
            return old, HolderReading.EXPORTER
        found = tuple(_first(labels, names) for _, names in HOLDER_LABELS)
        namespace, pod, _container = found
        if pod is None and namespace is None:
            return none, HolderReading.EXPORTER
        key = target_key(labels, self.cluster_label)
        own = self.pods.get(key) if key is not None else None
        if own is not None and (labels.get("namespace"), labels.get("pod")) in own:
            return none, HolderReading.TARGET
        if key in self.known or own is not None:
            return found, HolderReading.EXPORTER  # type: ignore[return-value]
        if any(mark in labels for mark in KUBERNETES_TARGET_MARKS):
            return none, HolderReading.UNKNOWN
        # A target that attaches no pod labels (a static config, or one whose labels were dropped).
        return found, HolderReading.EXPORTER  # type: ignore[return-value]


__all__ = [
    "HOLDER_LABELS",
    "INSTANCE_LABELS",
    "JOB_LABELS",
    "KUBERNETES_TARGET_MARKS",
    "OLD_HOLDER_LABELS",
    "RENAMED_PREFIX",
    "HolderReading",
    "ScrapeTargets",
    "TARGET_POD_LABELS",
    "scrape_target_labels",
    "target_key",
]
