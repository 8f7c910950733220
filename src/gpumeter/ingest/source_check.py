"""`gpumeter source check`: what a cluster's live PromQL API holds, exporter by exporter, and what of it would
bill wrongly (docs/prometheus.md, "Checking a source").

Each check is a question to the server about a recent window (an hour by default) through the Prometheus
source's own transport (auth headers, TLS, retries), answered as a `Finding`: the exporter, what was looked
at, what was found, a verdict (ok, warn, misbills), what that costs in billing terms and what to do. Only
aggregates and `up` are asked for, never a window of raw DCGM samples: sample counts come back as a label
(`count_values`), so a check of a large fleet moves a few series per GPU.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from gpumeter.config import Cluster, Config, PodLabelRule, PrometheusSource
from gpumeter.ingest.contract import SourceError
from gpumeter.ingest.prometheus import targets
from gpumeter.ingest.prometheus.answers import UnexpectedAnswer, matrix_samples
from gpumeter.ingest.prometheus.promql import escape_label_value
from gpumeter.ingest.prometheus.transport import PrometheusTransport, iso_ms
from gpumeter.ingest.schema import DCGM_METRICS

DEFAULT_WINDOW_MINUTES = 60
# A dcgm-exporter scraped this much more or less often than Δ bills each sample for the wrong time.
INTERVAL_TOLERANCE = 0.25
# The label `count_values` writes each series' sample count into (no exporter writes a label of this name).
_COUNT_LABEL = "gpumeter_check_samples"
# Label names HA setups put on every series of one replica: Prometheus' operator (prometheus_replica),
# Thanos' examples (replica), Cortex and Mimir's HA tracker (__replica__), Thanos Receive (receive_replica).
REPLICA_LIKE_LABELS = ("prometheus_replica", "replica", "__replica__", "receive_replica", "rule_replica")
# Pod labels gpumeter reads through kube-state-metrics besides the tenants' own (docs/telemetry.md).
VCLUSTER_KEY = "vcluster.loft.sh/managed-by"
KAI_GROUP_KEY = "runai-gpu-group"
KAI_RESERVATION_NAMESPACE = "kai-resource-reservation"
# The labels of a DCGM series read for the checks (a series' other labels are kept, never needed).
_OLD_HOLDER_LABELS = ("pod_name", "pod_namespace", "container_name")
_DRA_LABELS = ("dra_claim_name", "dra_claim_namespace", "dra_driver_name", "dra_pool_name", "dra_device_name")
_KUBE_JOB_METRICS = ("kube_pod_info", "kube_pod_labels", "kube_node_info", "kube_node_status_capacity")
_OPENCOST_PRICE = "node_gpu_hourly_cost"
# At most this many exporter-pod-looking host names are looked up one by one in kube_pod_info.
_MAX_POD_LOOKUPS = 50

DCGM, KSM, OPENCOST, SERVER = "dcgm-exporter", "kube-state-metrics", "OpenCost", "Prometheus"


class Verdict(StrEnum):
    OK = "ok"
    WARN = "warn"  # worth fixing, bills right today
    MISBILLS = "misbills"  # some GPU time goes to the wrong tenant, to nobody, or is counted twice


@dataclass(frozen=True)
class Finding:
    """One row of the report. `cost` says what the problem does to the bills (empty when nothing)."""

    exporter: str
    check: str
    found: str
    verdict: Verdict
    action: str
    cost: str = ""

    def as_json(self) -> dict[str, str]:
        return {**asdict(self), "verdict": self.verdict.value}


@dataclass
class SourceReport:
    """A cluster's source as seen over [start_ms, end_ms)."""

    cluster: str
    url: str
    start_ms: int
    end_ms: int
    scrape_interval_seconds: int
    findings: list[Finding] = field(default_factory=list)

    @property
    def misbills(self) -> bool:
        return any(f.verdict is Verdict.MISBILLS for f in self.findings)

    def as_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "url": self.url,
            "window": {"start": iso_ms(self.start_ms), "end": iso_ms(self.end_ms)},
            "scrape_interval_seconds": self.scrape_interval_seconds,
            "misbills": self.misbills,
            "findings": [f.as_json() for f in self.findings],
        }


@dataclass(frozen=True)
class DcgmSeries:
    """A DCGM series of the window: its metric, its labels (without the name) and its sample count."""

    metric: str
    labels: dict[str, str]
    samples: int


def prometheus_clusters(config: Config, names: Sequence[str] | None) -> list[Cluster]:
    """The clusters to check: those named (each must read a PromQL API), else every cluster that reads one;
    a SourceError where a named one does not, or none does."""
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
    assert isinstance(cluster.source, PrometheusSource)
    transport = PrometheusTransport(cluster.source)
    transport.load_headers()
    with transport.pull():
        return _Check(config, cluster, transport, end_ms, window_ms).run()


class _Check:
    """One cluster's checks: the server's answers, asked once each, and the findings made of them."""

    def __init__(
        self, config: Config, cluster: Cluster, transport: PrometheusTransport, end_ms: int, window_ms: int
    ) -> None:
        assert isinstance(cluster.source, PrometheusSource)
        self.config = config
        self.cluster = cluster
        self.spec = cluster.source
        self.transport = transport
        self.end_ms = end_ms
        self.window_ms = window_ms
        self.start_ms = end_ms - window_ms
        self.delta_s = config.scrape_interval_of(cluster.name)
        self.cluster_label = cluster.cluster_label
        self.report = SourceReport(cluster.name, transport.url, self.start_ms, end_ms, self.delta_s)

    # --- asking ----------------------------------------------------------------------------------

    def _matchers(self, *extra: str) -> str:
        parts = [p for p in (self.spec.selector, *extra) if p]
        return "{" + ",".join(parts) + "}" if parts else ""

    def _range(self, metric: str, *extra: str) -> str:
        # Evaluated at end - 1 ms, `[W]` covers the half-open window on any server (promql.up_query).
        return f"{metric}{self._matchers(*extra)}[{self.window_ms}ms]"

    def _vector(self, query: str) -> list[dict[str, str]]:
        return [item.metric for item in self.transport.query(query, self.end_ms - 1, "vector")]

    def _groups(self, metric: str, by: Iterable[str], *extra: str) -> list[dict[str, str]]:
        """The label sets (of `by`) the series of `metric` in the window show."""
        return self._vector(f"count by ({', '.join(by)}) (count_over_time({self._range(metric, *extra)}))")

    def _dcgm_series(self) -> list[DcgmSeries]:
        """Every DCGM series of the window with its sample count (written into a label by count_values)."""
        out = []
        for metric in DCGM_METRICS:
            counted = f'count_values without () ("{_COUNT_LABEL}", count_over_time({self._range(metric)}))'
            for labels in self._vector(counted):
                samples = int(float(labels.pop(_COUNT_LABEL, "0")))
                out.append(DcgmSeries(metric, labels, samples))
        return out

    def _up(self) -> list[tuple[dict[str, str], np.ndarray]]:
        """Each `up` series of the window with its sample times (ms)."""
        query = self._range("up")
        try:
            _, found = matrix_samples(
                self.transport.query(query, self.end_ms - 1, "matrix"), self.start_ms, self.end_ms
            )
        except UnexpectedAnswer as exc:
            raise self.transport.unexpected_answer(query, self.end_ms - 1, exc) from None
        return [(dict(labels.labels), ts) for labels, ts, _ in found]

    # --- the report ------------------------------------------------------------------------------

    def add(
        self, exporter: str, check: str, found: str, verdict: Verdict, action: str, cost: str = ""
    ) -> None:
        self.report.findings.append(Finding(exporter, check, found, verdict, action, cost))

    def run(self) -> SourceReport:
        cl = self.cluster_label
        dcgm = self._dcgm_series()
        up = self._up()
        kube_jobs = {
            targets.scrape_target_labels(g)[0]
            for metric in _KUBE_JOB_METRICS
            for g in self._groups(metric, ("job", "exported_job", cl))
        }
        kube_jobs.discard("")
        nodes = {
            g["node"]
            for metric in ("kube_node_info", "kube_node_status_capacity")
            for g in self._groups(metric, ("node",))
            if g.get("node")
        }
        prices = self._groups(_OPENCOST_PRICE, ("job", "exported_job", "node"))
        has_kube = bool(kube_jobs or nodes) or bool(self._groups("kube_pod_info", ("job",)))

        self._scrape_paths(dcgm, up)
        self._label_dialect(dcgm)
        self._host_names(dcgm, nodes, has_kube)
        self._intervals(dcgm, up, kube_jobs, {targets.scrape_target_labels(p)[0] for p in prices} - {""})
        self._mig_mode(dcgm)
        self._pod_labels(dcgm, has_kube)
        self._dra_labels(dcgm)
        self._prices(dcgm, prices, nodes)
        self._replicas(dcgm, up)
        # Rows of one exporter together, in the order the samples flow: GPUs, pods, prices, the server.
        order = {DCGM: 0, KSM: 1, OPENCOST: 2, SERVER: 3}
        self.report.findings.sort(key=lambda f: order.get(f.exporter, len(order)))
        return self.report

    # --- GPU time, for what a problem costs -------------------------------------------------------

    def _hours(self, samples: int) -> str:
        return f"{samples * self.delta_s / 3600:,.1f}"

    @staticmethod
    def _per_label_set(series: Iterable[DcgmSeries]) -> dict[tuple[tuple[str, str], ...], int]:
        """Samples per label set (a scrape's fields are one sample of the GPU): the most of any field."""
        out: dict[tuple[tuple[str, str], ...], int] = {}
        for s in series:
            key = tuple(sorted(s.labels.items()))
            out[key] = max(out.get(key, 0), s.samples)
        return out

    def _gpu_samples(self, series: Iterable[DcgmSeries]) -> int:
        """About the samples billing credits Δ each for: per GPU, its own series' samples, or where it has
        none (MIG without the GPU's own series) its busiest instance's."""
        whole: dict[str, int] = defaultdict(int)
        instances: dict[tuple[str, str], int] = defaultdict(int)
        for key, samples in self._per_label_set(series).items():
            labels = dict(key)
            uuid = labels.get("UUID") or labels.get("uuid") or ""
            if labels.get("GPU_I_ID"):
                instances[(uuid, labels["GPU_I_ID"])] += samples
            else:
                whole[uuid] += samples
        busiest: dict[str, int] = defaultdict(int)
        for (uuid, _), samples in instances.items():
            busiest[uuid] = max(busiest[uuid], samples)
        return sum(whole.get(uuid) or busiest.get(uuid, 0) for uuid in set(whole) | set(busiest))

    # --- 1. scrape path and target labels ----------------------------------------------------------

    def _no_dcgm(self) -> None:
        self.add(
            DCGM,
            "series in the window",
            f"no dcgm-exporter series in {self._window_text()}",
            Verdict.MISBILLS,
            "check that dcgm-exporter runs and is scraped, and that `selector` matches its series "
            f"({self.spec.selector or 'no selector set'})",
            "no GPU time is seen, so none is billed: the whole pool goes unbilled",
        )

    def _window_text(self) -> str:
        return f"the {self.window_ms / 60_000:g} minutes to {iso_ms(self.end_ms)}"

    def _scrape_paths(self, dcgm: list[DcgmSeries], up: list[tuple[dict[str, str], np.ndarray]]) -> None:
        if not dcgm:
            self._no_dcgm()
            return
        scrape = targets.ScrapeTargets(self.cluster_label)
        scrape.learn_up(labels for labels, _ in up)
        scrape.learn_renamed(s.labels for s in dcgm)
        up_targets = {targets.scrape_target_labels(labels) for labels, _ in up}
        by_job: dict[str, list[DcgmSeries]] = defaultdict(list)
        for s in dcgm:
            by_job[targets.scrape_target_labels(s.labels)[0]].append(s)
        for job, series in sorted(by_job.items()):
            instances = sorted({targets.scrape_target_labels(s.labels)[1] for s in series})
            label_names = {name for s in series for name in s.labels}
            attaches_pods = any(
                key[1] == job and key[2] in instances for key in scrape.pods
            )  # a target whose `up` or renamed labels show its own pod
            path = _path_name(label_names, series, attaches_pods)
            renamed = any(targets.RENAMED_PREFIX + name in label_names for name in targets.TARGET_POD_LABELS)
            kubernetes = attaches_pods or bool(label_names & set(targets.KUBERNETES_TARGET_MARKS))
            without_up = [i for i in instances if (job, i) not in up_targets]
            unknown = [s for s in series if scrape.holder(s.labels)[1] is targets.HolderReading.UNKNOWN]
            found = f"job {job or '(none)'}, {len(instances)} target(s): {path}"
            if kubernetes:
                found += (
                    "; the exporter's pod labels are renamed exported_pod (honorLabels: false)"
                    if renamed
                    else "; the exporter's pod labels are kept (honorLabels: true, or no GPU was held)"
                )
                found += (
                    "; `up` recorded for every target"
                    if not without_up
                    else f"; no `up` recorded for {len(without_up)} target(s) ({_few(without_up)})"
                )
            if unknown:
                gpus = {s.labels.get("UUID") or s.labels.get("uuid") or "?" for s in unknown}
                bad = sorted({targets.scrape_target_labels(s.labels)[1] for s in unknown})
                self.add(
                    DCGM,
                    "scrape path and who holds each GPU",
                    found
                    + f"; on targets {_few(bad)} a GPU's pod cannot be told from the exporter's own pod",
                    Verdict.MISBILLS,
                    "keep `up` in what this server stores (federate or remote-write it too), or drop the "
                    "target's pod, namespace and container labels with relabelings on the ServiceMonitor "
                    '(docs/deploy.md, "The exporters as gpumeter reads them exactly")',
                    f"{len(gpus)} GPU(s), about {self._hours(self._gpu_samples(unknown))} GPU-hours in this "
                    "window, are metered as held by nobody: their cost goes to idle capacity, not to the "
                    "tenants that held them",
                )
            elif kubernetes:
                self.add(
                    DCGM,
                    "scrape path and who holds each GPU",
                    found,
                    Verdict.OK,
                    "nothing needed; to stop depending on `up` being kept, drop the target's pod, namespace "
                    'and container labels with relabelings (docs/deploy.md, "The exporters as gpumeter reads them exactly")',
                )
            else:
                self.add(
                    DCGM,
                    "scrape path and who holds each GPU",
                    found + "; the target attaches no pod labels, so every pod label is the exporter's",
                    Verdict.OK,
                    "nothing needed",
                )

    # --- 2. label dialect -------------------------------------------------------------------------

    def _label_dialect(self, dcgm: list[DcgmSeries]) -> None:
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
            self.add(
                DCGM,
                "label names",
                found,
                Verdict.MISBILLS,
                "restore the UUID label (check metric relabelings that drop it)",
                "a series without a GPU UUID cannot be counted as a GPU: its time is not billed",
            )
            return
        self.add(DCGM, "label names", found, Verdict.OK, "nothing needed: gpumeter reads every spelling")

    # --- 3. host names that are not nodes -----------------------------------------------------------

    def _host_names(self, dcgm: list[DcgmSeries], nodes: set[str], has_kube: bool) -> None:
        if not dcgm:
            return
        hosts: dict[str, list[DcgmSeries]] = defaultdict(list)
        for s in dcgm:
            host = s.labels.get("Hostname") or s.labels.get("hostname")
            if host:
                hosts[host].append(s)
        if not hosts:
            self.add(
                DCGM,
                "node of each GPU",
                "no series carries Hostname",
                Verdict.MISBILLS,
                "restore the Hostname label (check metric relabelings that drop it)",
                "GPUs without a node get no node price, state or capacity check",
            )
            return
        if not nodes:
            self.add(
                DCGM,
                "node of each GPU",
                f"{len(hosts)} host name(s) seen; kube-state-metrics lists no node, so they cannot be checked",
                Verdict.WARN,
                "scrape kube-state-metrics' node series (kube_node_info) into this server",
            )
            return
        strangers = sorted(h for h in hosts if h not in nodes)
        if not strangers:
            self.add(
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
                (g["node"] for g in self._groups("kube_pod_info", ("node",), matcher) if g.get("node")), None
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
            self.add(
                DCGM,
                "node of each GPU",
                f"{len(known_pods)} host name(s) are not nodes ({_few(sorted(known_pods))}); {looks}; "
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
            self.add(
                DCGM,
                "node of each GPU",
                f"{len(unknown)} host name(s) are neither nodes nor pods kube-state-metrics knows "
                f"({_few(unknown)}); {looks}",
                Verdict.MISBILLS,
                action,
                f"{len(gpus)} GPU(s), about {self._hours(self._gpu_samples(series))} GPU-hours in this window, "
                "have no node: no node price (OpenCost), no cordon or health state, and their node's expected "
                "capacity shows them as missing",
            )

    # --- 4. scrape intervals ----------------------------------------------------------------------

    def _intervals(
        self,
        dcgm: list[DcgmSeries],
        up: list[tuple[dict[str, str], np.ndarray]],
        kube_jobs: set[str],
        opencost_jobs: set[str],
    ) -> None:
        gaps: dict[str, list[float]] = defaultdict(list)
        for labels, ts in up:
            if len(ts) >= 2:
                # Per stream (one target, one replica): the median gap outlasts a missed scrape or two.
                gaps[targets.scrape_target_labels(labels)[0]].append(
                    float(np.median(np.diff(np.sort(ts)))) / 1000
                )
        per_job = {job: statistics.median(values) for job, values in gaps.items()}
        dcgm_jobs = sorted({targets.scrape_target_labels(s.labels)[0] for s in dcgm})
        for job in dcgm_jobs:
            interval = per_job.get(job)
            how = ""
            if interval is None:
                # No `up`: the fullest series' samples over the window say it instead.
                most = max(
                    (s.samples for s in dcgm if targets.scrape_target_labels(s.labels)[0] == job), default=0
                )
                if most < 2:
                    continue
                interval = self.window_ms / 1000 / most
                how = " (estimated from the samples per series: no `up` recorded)"
            series = [s for s in dcgm if targets.scrape_target_labels(s.labels)[0] == job]
            found = f"job {job or '(none)'} scraped every {_seconds(interval)}{how}; configured Δ {self.delta_s} s"
            if abs(interval - self.delta_s) > INTERVAL_TOLERANCE * self.delta_s:
                factor = self.delta_s / interval
                billed = self._gpu_samples(series)
                self.add(
                    DCGM,
                    "scrape interval",
                    found,
                    Verdict.MISBILLS,
                    f"set scrape_interval_seconds: {round(interval)} for cluster {self.cluster.name} (or scrape "
                    f"the job every {self.delta_s} s)",
                    f"each sample is billed as {self.delta_s} s of GPU time but stands for {_seconds(interval)}: "
                    f"GPU time is billed {factor:.2g} times over (about {self._hours(billed)} GPU-hours billed "
                    f"for about {billed * interval / 3600:,.1f} held in this window)",
                )
            else:
                self.add(DCGM, "scrape interval", found, Verdict.OK, "nothing needed")
        for exporter, jobs in ((KSM, sorted(kube_jobs)), (OPENCOST, sorted(opencost_jobs))):
            for job in jobs:
                interval = per_job.get(job)
                found = (
                    f"job {job} scraped every {_seconds(interval)}"
                    if interval is not None
                    else f"job {job}: no `up` recorded, interval unknown"
                )
                self.add(
                    exporter,
                    "scrape interval",
                    found,
                    Verdict.OK,
                    "nothing needed: its readings are states that hold until the next one",
                )
        if not kube_jobs:
            self.add(
                KSM,
                "series in the window",
                f"no kube-state-metrics series in {self._window_text()}: pod phases and labels and node "
                "capacity are unknown",
                Verdict.MISBILLS,
                "scrape kube-state-metrics into this server, and check that `selector` matches its series",
                "tenants are found by namespace only, pods sharing a GPU and GPU-less nodes are not known, and "
                "expected capacity is unknown",
            )

    # --- 5. MIG mode ------------------------------------------------------------------------------

    def _mig_mode(self, dcgm: list[DcgmSeries]) -> None:
        if not dcgm:
            return
        mig: set[str] = set()
        whole: set[str] = set()
        for s in dcgm:
            uuid = s.labels.get("UUID") or s.labels.get("uuid") or ""
            (mig if s.labels.get("GPU_I_ID") else whole).add(uuid)
        if not mig:
            self.add(DCGM, "MIG devices", "no MIG instance in the window", Verdict.OK, "nothing needed")
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
        self.add(DCGM, "MIG devices", "; ".join(parts), Verdict.OK, "nothing needed: both are read")

    # --- 6. kube-state-metrics allow-lists ----------------------------------------------------------

    def _pod_labels(self, dcgm: list[DcgmSeries], has_kube: bool) -> None:
        needed: dict[str, str] = {}  # label_<sanitized> -> the key as Kubernetes writes it
        for tenant in self.config.tenants:
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
            self.add(
                KSM,
                "pod labels exported",
                "the tenant rules name namespaces only: no pod label is needed",
                Verdict.OK,
                "nothing needed",
            )
        elif not has_kube or not self._groups("kube_pod_labels", ("job",)):
            self.add(
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
                if not self._groups("kube_pod_labels", ("job",), f'{label}!=""')
            }
            if missing:
                self.add(
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
                self.add(
                    KSM,
                    "pod labels exported",
                    f"the labels the tenant rules read are exported: {', '.join(sorted(needed.values()))}",
                    Verdict.OK,
                    "nothing needed",
                )
        if (
            self.config.share == "requested"
            and kai
            and not self._groups("kube_pod_annotations", ("job",), 'annotation_gpu_fraction!=""')
        ):
            self.add(
                KSM,
                "pod annotations exported",
                "GPUs are shared through KAI but no pod carries the gpu-fraction annotation",
                Verdict.MISBILLS,
                "start kube-state-metrics with --metric-annotations-allowlist=pods=[gpu-fraction]",
                "shared GPUs are split equally among their pods instead of by their requested fractions",
            )

    # --- 7. DRA labels ----------------------------------------------------------------------------

    def _dra_labels(self, dcgm: list[DcgmSeries]) -> None:
        if not dcgm:
            return
        with_dra = {
            s.labels.get("UUID") or s.labels.get("uuid") for s in dcgm if s.labels.get(_DRA_LABELS[0])
        }
        if with_dra:
            found = f"{len(with_dra)} GPU(s) carry their ResourceClaim (dra_claim_name)"
        else:
            found = "no series carries DRA claim labels (dcgm-exporter without --kubernetes-enable-dra)"
        sources = [self.spec.claims_file, self.spec.kubeconfig, self.spec.k8s_snapshots_dir]
        action = (
            "nothing needed"
            if any(sources)
            else "nothing needed unless GPUs are handed out through DRA: then set k8s_snapshots_dir and "
            "kubeconfig, from which gpumeter reads who holds them"
        )
        self.add(DCGM, "DRA claims", found, Verdict.OK, action)

    # --- 8. OpenCost prices -----------------------------------------------------------------------

    def _prices(self, dcgm: list[DcgmSeries], prices: list[dict[str, str]], nodes: set[str]) -> None:
        opencost = self.config.rate_card.price_source == "opencost"
        priced = {p["node"] for p in prices if p.get("node")}
        gpu_nodes = {h for s in dcgm if (h := s.labels.get("Hostname") or s.labels.get("hostname"))}
        gpu_nodes = (gpu_nodes & nodes) if nodes else gpu_nodes
        unpriced = sorted(gpu_nodes - priced)
        if not opencost:
            found = (
                f"GPU prices for {len(priced)} node(s)" if priced else "no OpenCost GPU prices in the window"
            )
            self.add(
                OPENCOST, "GPU prices", found, Verdict.OK, "nothing needed: prices come from the rate card"
            )
            return
        if not priced:
            self.add(
                OPENCOST,
                "GPU prices",
                "no OpenCost GPU prices (node_gpu_hourly_cost) in the window",
                Verdict.MISBILLS,
                "scrape OpenCost into this server, or set rate_card.price_source: rate_card with prices",
                "every GPU-hour is priced at nothing: the invoices come out at zero",
            )
        elif unpriced:
            self.add(
                OPENCOST,
                "GPU prices",
                f"{len(unpriced)} GPU node(s) have no OpenCost price: {_few(unpriced)}",
                Verdict.MISBILLS,
                "check OpenCost's node pricing for those nodes (instance type, region)",
                "the GPU time on those nodes is priced at nothing",
            )
        else:
            self.add(
                OPENCOST,
                "GPU prices",
                f"every GPU node ({len(gpu_nodes)}) has an OpenCost price",
                Verdict.OK,
                "nothing needed",
            )

    # --- 9. HA replica labels ---------------------------------------------------------------------

    def _replicas(self, dcgm: list[DcgmSeries], up: list[tuple[dict[str, str], np.ndarray]]) -> None:
        values: dict[str, set[str]] = defaultdict(set)
        for labels in [s.labels for s in dcgm] + [labels for labels, _ in up]:
            for name in labels:
                if name in REPLICA_LIKE_LABELS or name in self.spec.replica_labels:
                    values[name].add(labels[name])
        configured = [n for n in self.spec.replica_labels if n in values]
        foreign = sorted(n for n in values if n not in self.spec.replica_labels)
        if configured:
            self.add(
                SERVER,
                "HA replicas",
                "series carry "
                + ", ".join(f"{n} ({len(values[n])} value(s))" for n in configured)
                + ": HA replicas, each scrape counted once",
                Verdict.OK,
                "nothing needed",
            )
        for name in foreign:
            if len(values[name]) > 1:
                self.add(
                    SERVER,
                    "HA replicas",
                    f"series carry {name} with {len(values[name])} values ({_few(sorted(values[name]))}), "
                    "which replica_labels does not list",
                    Verdict.MISBILLS,
                    f"add {name} to replica_labels of cluster {self.cluster.name}",
                    "each replica's copy of a scrape is billed: GPU time is counted once per replica",
                )
            else:
                self.add(
                    SERVER,
                    "HA replicas",
                    f"series carry {name} (one value now), which replica_labels does not list",
                    Verdict.WARN,
                    f"add {name} to replica_labels of cluster {self.cluster.name}",
                    "none while one replica writes; once its pair writes too, GPU time is counted twice",
                )
        if not configured and not foreign:
            self.add(SERVER, "HA replicas", "no replica label on the series", Verdict.OK, "nothing needed")


def _path_name(label_names: set[str], series: Sequence[DcgmSeries], attaches_pods: bool) -> str:
    """The scrape path a job's series look like they came through (tests/scrape_paths.py)."""
    parts = []
    if "service" in label_names and "endpoint" in label_names:
        service = next((s.labels["service"] for s in series if "service" in s.labels), "")
        parts.append(f"ServiceMonitor (service {service})")
    elif "endpoint" in label_names:
        parts.append("PodMonitor")
    elif attaches_pods:
        parts.append("Kubernetes discovery (the target attaches its own pod labels)")
    else:
        parts.append("static config (job and instance only)")
    if "exported_job" in label_names or "exported_instance" in label_names:
        parts.append("read through federation (job and instance renamed exported_job, exported_instance)")
    return ", ".join(parts)


def _allowlist(keys: Iterable[str]) -> str:
    return f"--metric-labels-allowlist=pods=[{','.join(sorted(set(keys)))}]"


def _few(items: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _seconds(value: float) -> str:
    return f"{value:.3g} s"


def check_sources(
    config: Config, names: Sequence[str] | None, end_ms: int, window_ms: int
) -> list[SourceReport]:
    """Each named cluster's source checked over [end_ms - window_ms, end_ms)."""
    return [
        check_source(config, cluster, end_ms, window_ms) for cluster in prometheus_clusters(config, names)
    ]


def report_json(reports: Sequence[SourceReport]) -> dict[str, Any]:
    return {"misbills": any(r.misbills for r in reports), "clusters": [r.as_json() for r in reports]}


__all__ = [
    "DEFAULT_WINDOW_MINUTES",
    "Finding",
    "SourceReport",
    "Verdict",
    "check_source",
    "check_sources",
    "prometheus_clusters",
    "report_json",
]
