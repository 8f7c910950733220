"""`gpumeter source check`: what a cluster's live PromQL API holds, exporter by exporter, and what of it would
bill wrongly (docs/prometheus.md, "Checking a source").

Each check is a question to the server about a recent window (an hour by default) through the Prometheus
source's own transport (auth headers, TLS, retries), answered as a `Finding`: the exporter, what was looked
at, what was found, a verdict (ok, warn, misbills), what that costs in billing terms and what to do. Only
aggregates and `up` are asked for, never a window of raw DCGM samples: sample counts come back as a label
(`count_values`), so a check of a large fleet moves a few series per GPU.

Here: which clusters are checked and the checks' order. The server's answers: window.py; the findings:
findings.py; the checks, by what they check: scraping.py (scrape paths, intervals, HA replicas), labels.py
(label names, nodes, MIG, DRA), tenants.py (pod labels for the tenant rules), prices.py (OpenCost prices).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpumeter.config import Cluster, Config, PrometheusSource
from gpumeter.ingest.contract import SourceError
from gpumeter.ingest.prometheus import targets
from gpumeter.ingest.prometheus.transport import PrometheusTransport
from gpumeter.ingest.source_check import labels, prices, scraping, tenants
from gpumeter.ingest.source_check.findings import EXPORTER_ORDER, SourceReport
from gpumeter.ingest.source_check.window import SourceWindow

DEFAULT_WINDOW_MINUTES = 60
_KUBE_JOB_METRICS = ("kube_pod_info", "kube_pod_labels", "kube_node_info", "kube_node_status_capacity")
_OPENCOST_PRICE = "node_gpu_hourly_cost"


def prometheus_clusters(config: Config, names: Sequence[str] | None) -> list[Cluster]:
    """The clusters to check: those named (each must read a PromQL API), else every cluster that reads one;
    a SourceError where a named one does not, or none does. (The checks are questions to a PromQL API: what
    they apply to is the `kind: prometheus` source, not a choice among kinds.)"""
    if names is not None:
        files = [n for n in names if not isinstance(config.cluster(n).source, PrometheusSource)]
        if files:
            raise SourceError(
                f"cluster(s) {', '.join(files)} read Parquet files, not a PromQL API: there is no server to check"
            )
        return [config.cluster(n) for n in names]
    checked = [c for c in config.clusters if isinstance(c.source, PrometheusSource)]
    if not checked:
        raise SourceError(
            "no cluster of the config has a `kind: prometheus` source: there is no server to check"
        )
    return checked


def check_source(config: Config, cluster: Cluster, end_ms: int, window_ms: int) -> SourceReport:
    """Every check of one cluster's source over [end_ms - window_ms, end_ms)."""
    spec = cluster.source
    assert isinstance(spec, PrometheusSource)
    transport = PrometheusTransport(spec)
    transport.load_headers()
    with transport.pull():
        return _run(SourceWindow(config, cluster, spec, transport, end_ms, window_ms))


def _run(window: SourceWindow) -> SourceReport:
    """The checks in order, over the answers they share."""
    cl = window.cluster_label
    dcgm = window.dcgm_series()
    up = window.up()
    kube_jobs = {
        targets.scrape_target_labels(g)[0]
        for metric in _KUBE_JOB_METRICS
        for g in window.groups(metric, ("job", "exported_job", cl))
    }
    kube_jobs.discard("")
    nodes = {
        g["node"]
        for metric in ("kube_node_info", "kube_node_status_capacity")
        for g in window.groups(metric, ("node",))
        if g.get("node")
    }
    node_prices = window.groups(_OPENCOST_PRICE, ("job", "exported_job", "node"))
    has_kube = bool(kube_jobs or nodes) or bool(window.groups("kube_pod_info", ("job",)))

    opencost_jobs = {targets.scrape_target_labels(p)[0] for p in node_prices} - {""}
    scraping.scrape_paths(window, dcgm, up)
    labels.label_names(window, dcgm)
    labels.gpu_nodes(window, dcgm, nodes, has_kube)
    scraping.scrape_intervals(window, dcgm, up, kube_jobs, opencost_jobs)
    labels.mig_devices(window, dcgm)
    tenants.pod_labels(window, dcgm, has_kube)
    labels.dra_claims(window, dcgm)
    prices.gpu_prices(window, dcgm, node_prices, nodes)
    scraping.ha_replicas(window, dcgm, up)
    # Rows of one exporter together, in the order the samples flow: GPUs, pods, prices, the server.
    window.report.findings.sort(key=lambda f: EXPORTER_ORDER.get(f.exporter, len(EXPORTER_ORDER)))
    return window.report


def check_sources(
    config: Config, names: Sequence[str] | None, end_ms: int, window_ms: int
) -> list[SourceReport]:
    """Each named cluster's source checked over [end_ms - window_ms, end_ms)."""
    return [
        check_source(config, cluster, end_ms, window_ms) for cluster in prometheus_clusters(config, names)
    ]


__all__ = ["DEFAULT_WINDOW_MINUTES", "check_source", "check_sources", "prometheus_clusters"]
