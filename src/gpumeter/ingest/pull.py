"""The pull: a (cluster, day) of raw samples (with its lookback) from its source into the warehouse's raw zone."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from datetime import date
from pathlib import Path

from gpumeter.config import Config, select_clusters
from gpumeter.ingest.contract import K8sSnapshot, KubeSeriesSource, PartedRawSource, RawSource, lookback_ms
from gpumeter.ingest.coverage import CoverageCounter, stored_coverage
from gpumeter.ingest.kube_spans import STORED_RAW_TABLES, KubeSpanStaging
from gpumeter.ingest.schema import RAW_TABLES
from gpumeter.storage import paths
from gpumeter.storage.paths import RAW
from gpumeter.storage.replacement import Acceptance, billed_to_tenants, guard, kept_bill
from gpumeter.storage.warehouse import Warehouse

Log = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def pull_raw_day(
    config: Config,
    warehouse: Warehouse,
    day: date,
    source_for: Callable[[str], RawSource],
    log: Log = _quiet,
    clusters: Iterable[str] | None = None,
    acceptance: Acceptance | None = None,
) -> dict[str, int]:
    """Fetch the day (with its lookback) of the given clusters (default: every cluster of the config; the
    assets pass their partition's one) from their sources into the raw zone. A source that hands the day
    over in parts (PartedRawSource) is written part by part, so a fleet's day never has to fit in memory.
    A stored day is replaced only by a day that covers as much of it (gpumeter.storage.replacement), unless
    `acceptance` says otherwise."""
    names = select_clusters(config, clusters)
    counts: dict[str, int] = dict.fromkeys(RAW_TABLES, 0)
    sources = {name: source_for(name) for name in names}
    staged: dict[str, KubeSpanStaging] = {}
    snapshots: dict[str, K8sSnapshot] = {}
    # Only a day already stored is measured as it comes: a first pull has nothing to fall short of.
    counters = {
        name: CoverageCounter(day)
        for name in names
        if warehouse.day_files(RAW, "raw_dcgm_samples", name, day)
        or warehouse.day_files(RAW, "raw_kube_samples", name, day)
    }
    try:
        # Fetch every cluster before storing any: a source that fails leaves every stored day untouched.
        for name in names:
            source = sources[name]
            lookback = lookback_ms(config, name)
            if isinstance(source, KubeSeriesSource):  # kube spans made part by part, no kube rows
                parts = source.fetch_day_series_parts(name, day, lookback)
            elif isinstance(source, PartedRawSource):
                parts = source.fetch_day_parts(name, day, lookback)
            else:
                parts = iter([source.fetch_day(name, day, lookback)])
            # The kube samples are stored as spans (gpumeter.ingest.kube_spans), made once the day is in.
            staged[name] = KubeSpanStaging(
                warehouse.day_in_parts(RAW, name, day, STORED_RAW_TABLES),
                warehouse.scratch_dir(f"kube-spans-{name}-{day.isoformat()}-{os.getpid()}"),
                config.warehouse.memory_limit,
            )
            counter = counters.get(name)
            for part in parts:
                for table, rows in part.stored_tables().items():
                    if rows.num_rows:
                        staged[name].write(table, rows)
                if part.kube_series is not None:
                    staged[name].write_series(part.kube_series)
                if counter is not None:
                    counter.add_dcgm(part.dcgm)
                    counter.add_kube(part.kube)
                    if part.kube_series is not None:
                        counter.add_kube_series(part.kube_series)
                if part.k8s_snapshot is not None:
                    snapshots[name] = part.k8s_snapshot
        # R15: one run of a (cluster, day) writes at a time, and never while it is being metered.
        with warehouse.day_locks(day, names):
            for cluster_name, counter in counters.items():
                _refuse_less(config, warehouse, cluster_name, day, counter, acceptance, log)
            for cluster_name, day_tables in staged.items():
                snapshot = snapshots.get(cluster_name)
                if snapshot is not None:  # keep the claims as read: template claims vanish with their pods
                    folder = warehouse.day_dir(RAW, paths.K8S, cluster_name, day)
                    for target, text in _snapshot_files(folder, day, snapshot):
                        day_tables.staged.add_file(target, text.encode("utf-8"))
                for table, rows in day_tables.commit().items():
                    counts[table] += rows
                log(
                    f"{cluster_name} {day}: {day_tables.rows['raw_dcgm_samples']:,} DCGM and "
                    f"{day_tables.rows['raw_kube_samples']:,} kube samples"
                )
    finally:
        for day_tables in staged.values():
            day_tables.discard()
    return counts


def _refuse_less(
    config: Config,
    warehouse: Warehouse,
    cluster: str,
    day: date,
    counter: CoverageCounter,
    acceptance: Acceptance | None,
    log: Log,
) -> None:
    """Keep the stored raw day when the source now holds less of it (gpumeter.storage.replacement)."""
    stored = stored_coverage(
        warehouse.day_files(RAW, "raw_dcgm_samples", cluster, day),
        warehouse.day_files(RAW, "raw_kube_samples", cluster, day),
        day,
    )
    if stored is None:
        return
    found = counter.coverage()
    source = config.cluster(cluster).source.describe()
    kept = " and ".join(
        part
        for part in (
            "its samples",
            kept_bill(billed_to_tenants(warehouse, cluster, day), config.currency, config.minor_unit),
        )
        if part
    )
    guard(
        warehouse,
        cluster,
        day,
        "its stored samples",
        found.measures(stored),
        acceptance,
        kept=kept,
        lacks=found.lacks(stored, source),
        log=log,
    )


def _snapshot_files(folder: Path, day: date, snapshot: K8sSnapshot) -> list[tuple[Path, str]]:
    """The Kubernetes documents a source read for `day`, as files of the day's raw k8s folder (stored with the
    day's raw tables, in one commit)."""
    files = [
        (folder / paths.snapshot_name(kind), json.dumps(snapshot.documents[kind], sort_keys=True))
        for kind in paths.SNAPSHOT_KINDS
        if kind in snapshot.documents  # read at an unknown time (files, the API now)
    ]
    # Timed snapshots (k8s_snapshots_dir) keep their time-named files; each is copied with its own day (the
    # day before's come with that day), beside the day's raw rows.
    files += [
        (folder / kept.name, kept.read_text(encoding="utf-8"))
        for kept in snapshot.timed_files
        if kept.parent.name == paths.day_folder_name(day)
    ]
    return files
