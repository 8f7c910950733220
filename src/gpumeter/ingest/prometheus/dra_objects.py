"""The DRA objects of a window for the Prometheus source (PrometheusRawSource in source.py): who held which
device (R5), from the files the source names, the snapshots the `snapshot_k8s_objects` job keeps, or the
Kubernetes API (gpumeter.ingest.kube_api).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from gpumeter.config import PrometheusSource
from gpumeter.ingest.contract import K8sSnapshot, SourceError
from gpumeter.ingest.k8s_objects import (
    K8sObjectError,
    load_k8s_json,
    parse_resource_claims,
    parse_resource_slices,
    read_kept_snapshots,
)
from gpumeter.ingest.kube_api import KubeApi
from gpumeter.ingest.schema import RAW_TABLES
from gpumeter.storage import paths

log = logging.getLogger(__name__)


def dra_objects(
    spec: PrometheusSource, cluster: str, start_ms: int, end_ms: int
) -> tuple[pa.Table, pa.Table, K8sSnapshot | None]:
    """The DRA objects of the window [start_ms, end_ms) (R5), and the documents they were read from, to
    be kept (None: none read). `claims_file` / `slices_file` are snapshots of unknown time: their objects
    are valid for the whole window. `k8s_snapshots_dir` holds the snapshots the `snapshot_k8s_objects`
    job keeps (gpumeter.ingest.k8s_objects: day folders of time-named files): those of the days the
    window touches and of the day before, each with its time. Without that folder, `kubeconfig` lists the
    API now for the kinds no file gives, read as a snapshot of unknown time (a claim deleted before now is
    not seen)."""
    documents: dict[str, Any] = {}
    sources: dict[str, str] = {}
    snapshots_dir = spec.k8s_snapshots_dir
    try:
        for kind, file in (
            (paths.RESOURCE_CLAIMS, spec.claims_file),
            (paths.RESOURCE_SLICES, spec.slices_file),
        ):
            if file:
                documents[kind], sources[kind] = load_k8s_json(Path(file)), file
        kept = read_kept_snapshots(Path(snapshots_dir), cluster, start_ms, end_ms) if snapshots_dir else None
    except K8sObjectError as exc:
        raise SourceError(str(exc)) from exc
    if kept is not None and not kept.files:
        log.warning(
            "%s: no DRA snapshot of cluster %s in %s for the days of this window: claims and slices are "
            "not known then (is the snapshot_k8s_objects schedule running?)",
            snapshots_dir,
            cluster,
            snapshots_dir,
        )
    if spec.kubeconfig and kept is None and len(documents) < len(paths.SNAPSHOT_KINDS):
        api = KubeApi(spec.kubeconfig)
        for kind in paths.SNAPSHOT_KINDS:
            if kind not in documents:
                documents[kind], sources[kind] = api.list(kind), f"{spec.kubeconfig} ({kind})"
    try:
        allocations = (
            parse_resource_claims(documents[paths.RESOURCE_CLAIMS], cluster, sources[paths.RESOURCE_CLAIMS])
            if paths.RESOURCE_CLAIMS in documents
            else RAW_TABLES["raw_dra_allocations"].empty_table()
        )
        devices = (
            parse_resource_slices(documents[paths.RESOURCE_SLICES], cluster, sources[paths.RESOURCE_SLICES])
            if paths.RESOURCE_SLICES in documents
            else RAW_TABLES["raw_dra_devices"].empty_table()
        )
    except K8sObjectError as exc:
        raise SourceError(str(exc)) from exc
    if not documents and kept is None:
        return allocations, devices, None
    timed_files: tuple[Path, ...] = ()
    if kept is not None:
        # The kept snapshots are files already: the pull copies them beside the raw day.
        timed_files = tuple(f.path for f in kept.files if f.taken_ms is not None)
        allocations = pa.concat_tables([allocations, kept.allocations])
        devices = pa.concat_tables([devices, kept.devices])
    return allocations, devices, K8sSnapshot(datetime.now(UTC), documents, timed_files)


__all__ = ["dra_objects"]
