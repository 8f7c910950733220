"""How the series reach the server, checked: each dcgm-exporter job's scrape path and whether a GPU's pod can
be told from the exporter's own, each job's scrape interval against Δ, and the labels of HA replicas."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from gpumeter.ingest.prometheus import targets
from gpumeter.ingest.source_check.findings import DCGM, KSM, OPENCOST, SERVER, Verdict, few, seconds
from gpumeter.ingest.source_check.window import DcgmSeries, SourceWindow, UpSeries

# A dcgm-exporter scraped this much more or less often than Δ bills each sample for the wrong time.
INTERVAL_TOLERANCE = 0.25
# Label names HA setups put on every series of one replica: Prometheus' operator (prometheus_replica),
# Thanos' examples (replica), Cortex and Mimir's HA tracker (__replica__), Thanos Receive (receive_replica).
REPLICA_LIKE_LABELS = ("prometheus_replica", "replica", "__replica__", "receive_replica", "rule_replica")


def _no_dcgm(window: SourceWindow) -> None:
    window.add(
        DCGM,
        "series in the window",
        f"no dcgm-exporter series in {window.window_text()}",
        Verdict.MISBILLS,
        "check that dcgm-exporter runs and is scraped, and that `selector` matches its series "
        f"({window.spec.selector or 'no selector set'})",
        "no GPU time is seen, so none is billed: the whole pool goes unbilled",
    )


def scrape_paths(window: SourceWindow, dcgm: list[DcgmSeries], up: UpSeries) -> None:
    if not dcgm:
        _no_dcgm(window)
        return
    scrape = targets.ScrapeTargets(window.cluster_label)
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
                else f"; no `up` recorded for {len(without_up)} target(s) ({few(without_up)})"
            )
        if unknown:
            gpus = {s.labels.get("UUID") or s.labels.get("uuid") or "?" for s in unknown}
            bad = sorted({targets.scrape_target_labels(s.labels)[1] for s in unknown})
            window.add(
                DCGM,
                "scrape path and who holds each GPU",
                found + f"; on targets {few(bad)} a GPU's pod cannot be told from the exporter's own pod",
                Verdict.MISBILLS,
                "keep `up` in what this server stores (federate or remote-write it too), or drop the "
                "target's pod, namespace and container labels with relabelings on the ServiceMonitor "
                '(docs/deploy.md, "The exporters as gpumeter reads them exactly")',
                f"{len(gpus)} GPU(s), about {window.hours(window.gpu_samples(unknown))} GPU-hours in this "
                "window, are metered as held by nobody: their cost goes to idle capacity, not to the "
                "tenants that held them",
            )
        elif kubernetes:
            window.add(
                DCGM,
                "scrape path and who holds each GPU",
                found,
                Verdict.OK,
                "nothing needed; to stop depending on `up` being kept, drop the target's pod, namespace "
                'and container labels with relabelings (docs/deploy.md, "The exporters as gpumeter reads them exactly")',
            )
        else:
            window.add(
                DCGM,
                "scrape path and who holds each GPU",
                found + "; the target attaches no pod labels, so every pod label is the exporter's",
                Verdict.OK,
                "nothing needed",
            )


def scrape_intervals(
    window: SourceWindow,
    dcgm: list[DcgmSeries],
    up: UpSeries,
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
            interval = window.window_ms / 1000 / most
            how = " (estimated from the samples per series: no `up` recorded)"
        series = [s for s in dcgm if targets.scrape_target_labels(s.labels)[0] == job]
        found = (
            f"job {job or '(none)'} scraped every {seconds(interval)}{how}; configured Δ {window.delta_s} s"
        )
        if abs(interval - window.delta_s) > INTERVAL_TOLERANCE * window.delta_s:
            factor = window.delta_s / interval
            billed = window.gpu_samples(series)
            window.add(
                DCGM,
                "scrape interval",
                found,
                Verdict.MISBILLS,
                f"set scrape_interval_seconds: {round(interval)} for cluster {window.cluster.name} (or scrape "
                f"the job every {window.delta_s} s)",
                f"each sample is billed as {window.delta_s} s of GPU time but stands for {seconds(interval)}: "
                f"GPU time is billed {factor:.2g} times over (about {window.hours(billed)} GPU-hours billed "
                f"for about {billed * interval / 3600:,.1f} held in this window)",
            )
        else:
            window.add(DCGM, "scrape interval", found, Verdict.OK, "nothing needed")
    for exporter, jobs in ((KSM, sorted(kube_jobs)), (OPENCOST, sorted(opencost_jobs))):
        for job in jobs:
            interval = per_job.get(job)
            found = (
                f"job {job} scraped every {seconds(interval)}"
                if interval is not None
                else f"job {job}: no `up` recorded, interval unknown"
            )
            window.add(
                exporter,
                "scrape interval",
                found,
                Verdict.OK,
                "nothing needed: its readings are states that hold until the next one",
            )
    if not kube_jobs:
        window.add(
            KSM,
            "series in the window",
            f"no kube-state-metrics series in {window.window_text()}: pod phases and labels and node "
            "capacity are unknown",
            Verdict.MISBILLS,
            "scrape kube-state-metrics into this server, and check that `selector` matches its series",
            "tenants are found by namespace only, pods sharing a GPU and GPU-less nodes are not known, and "
            "expected capacity is unknown",
        )


def ha_replicas(window: SourceWindow, dcgm: list[DcgmSeries], up: UpSeries) -> None:
    values: dict[str, set[str]] = defaultdict(set)
    for labels in [s.labels for s in dcgm] + [labels for labels, _ in up]:
        for name in labels:
            if name in REPLICA_LIKE_LABELS or name in window.spec.replica_labels:
                values[name].add(labels[name])
    configured = [n for n in window.spec.replica_labels if n in values]
    foreign = sorted(n for n in values if n not in window.spec.replica_labels)
    if configured:
        window.add(
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
            window.add(
                SERVER,
                "HA replicas",
                f"series carry {name} with {len(values[name])} values ({few(sorted(values[name]))}), "
                "which replica_labels does not list",
                Verdict.MISBILLS,
                f"add {name} to replica_labels of cluster {window.cluster.name}",
                "each replica's copy of a scrape is billed: GPU time is counted once per replica",
            )
        else:
            window.add(
                SERVER,
                "HA replicas",
                f"series carry {name} (one value now), which replica_labels does not list",
                Verdict.WARN,
                f"add {name} to replica_labels of cluster {window.cluster.name}",
                "none while one replica writes; once its pair writes too, GPU time is counted twice",
            )
    if not configured and not foreign:
        window.add(SERVER, "HA replicas", "no replica label on the series", Verdict.OK, "nothing needed")


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
