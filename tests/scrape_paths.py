"""The ways a series reaches a PromQL API, as label sets: what each scrape path makes of the labels an exporter
wrote, and the `up` series Prometheus records for its target.

Written from Prometheus' and prometheus-operator's own rules, and proven against a real Prometheus scraping a
local exposition endpoint with each path's scrape configuration (tests/test_scrape_paths.py):

- A target's labels are set on every series it yields. Where the series has a label of the same name,
  `honor_labels: false` (the default) renames the series' one `exported_<name>` and sets the target's, and
  `honor_labels: true` keeps the series' one. A target label with an empty value is no label.
- prometheus-operator's ServiceMonitor gives each target `namespace`, `service`, `pod`, `container`, `endpoint`
  (plus `job`, `instance`); a PodMonitor the same without `service` (pkg/prometheus/promcfg.go).
- A federating server (or a Thanos sidecar, or remote write) adds the source server's external labels where a
  series has none of that name; a federating scrape with `honor_labels: false` renames the source's `job` and
  `instance` `exported_job` and `exported_instance`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpumeter_sim.openmetrics import attach

Labels = dict[str, str]


@dataclass(frozen=True)
class ScrapePath:
    """How a target is scraped: its own labels (after relabelling) and whether the exporter's labels win."""

    name: str
    target_labels: Mapping[str, str]
    honor_labels: bool
    # A second server federating from the first (None: read from the first): its external labels and
    # whether the federating scrape honours the source's labels.
    external_labels: Mapping[str, str] = field(default_factory=dict)
    federated: bool = False
    federation_honor_labels: bool = True
    federation_target: Mapping[str, str] = field(default_factory=dict)

    def scraped(self, exposed: Mapping[str, str]) -> Labels:
        """The labels a series exposed with `exposed` (its name included) has in the server that is read."""
        out = attach(exposed, self.target_labels, self.honor_labels)
        if self.federated:
            for name, value in self.external_labels.items():
                out.setdefault(name, value)
            out = attach(out, self.federation_target, self.federation_honor_labels)
        return out

    def up(self) -> Labels:
        """The `up` series of the target, as the server that is read holds it."""
        return self.scraped({"__name__": "up"})


def service_monitor_target(
    *, job: str, instance: str, namespace: str, pod: str, container: str, service: str, endpoint: str
) -> Labels:
    return {
        "job": job,
        "instance": instance,
        "namespace": namespace,
        "pod": pod,
        "container": container,
        "service": service,
        "endpoint": endpoint,
    }


def pod_monitor_target(**labels: str) -> Labels:
    """A PodMonitor's target: a ServiceMonitor's without `service`."""
    return {k: v for k, v in service_monitor_target(service="", **labels).items() if k != "service"}


def dcgm_exporter_paths(node: str, exporter_pod: str, ip: str) -> list[ScrapePath]:
    """Every path this corpus crosses a node's dcgm-exporter with: the GPU Operator's ServiceMonitor
    (`jobLabel: app`, port `gpu-metrics`, namespace `gpu-operator`) with honorLabels false (its default) and
    true, a PodMonitor both ways, a static config, the ServiceMonitor federated with and without honoured
    labels, and read through a Thanos-like store that adds external labels."""
    pod = {
        "instance": f"{ip}:9400",
        "namespace": "gpu-operator",
        "pod": exporter_pod,
        "container": "nvidia-dcgm-exporter",
        "endpoint": "gpu-metrics",
    }
    sm = service_monitor_target(job="nvidia-dcgm-exporter", service="nvidia-dcgm-exporter", **pod)
    pm = pod_monitor_target(job="gpu-operator/nvidia-dcgm-exporter", **pod)
    static = {"job": "dcgm-exporter", "instance": f"{node}:9400"}
    external = {"prometheus": "monitoring/k8s"}
    federate = {"job": "federate", "instance": "prometheus-k8s.monitoring:9090"}
    return [
        ScrapePath("static", static, honor_labels=False),
        ScrapePath("servicemonitor", sm, honor_labels=False),
        ScrapePath("servicemonitor-honor", sm, honor_labels=True),
        ScrapePath("podmonitor", pm, honor_labels=False),
        ScrapePath("podmonitor-honor", pm, honor_labels=True),
        ScrapePath(
            "federated", sm, honor_labels=False, external_labels=external, federated=True,
            federation_honor_labels=True, federation_target=federate,
        ),
        ScrapePath(
            "federated-renamed", sm, honor_labels=False, external_labels=external, federated=True,
            federation_honor_labels=False, federation_target=federate,
        ),
        ScrapePath("thanos", sm, honor_labels=False, external_labels=external, federated=True),
    ]  # fmt: skip


__all__ = ["ScrapePath", "attach", "dcgm_exporter_paths", "pod_monitor_target", "service_monitor_target"]
