"""Dagster resources over the domain library."""

from __future__ import annotations

import os
from functools import lru_cache

from dagster import ConfigurableResource

from gpumeter.config import Config, ParquetSource, PrometheusSource, load_config
from gpumeter.ingest.contract import RawSource, SourceError
from gpumeter.ingest.parquet import ParquetRawSource
from gpumeter.storage.warehouse import Warehouse


class GpumeterConfigResource(ConfigurableResource):
    """The gpumeter YAML config (docs/config.md): clusters, rate card, tenants, warehouse."""

    config_path: str

    @property
    def config(self) -> Config:
        return _load(self.config_path, os.stat(self.config_path).st_mtime_ns)

    @property
    def warehouse(self) -> Warehouse:
        return Warehouse.of(self.config.warehouse)

    def source(self, cluster: str) -> RawSource:
        cluster_spec = self.config.cluster(cluster)
        spec = cluster_spec.source
        if isinstance(spec, ParquetSource):
            return ParquetRawSource(spec.path)
        return PrometheusResource(**spec.model_dump(exclude={"kind"})).raw_source(
            cluster, cluster_spec.cluster_label, self.config.scrape_interval_seconds
        )


class PrometheusResource(ConfigurableResource):
    """A PromQL API (Prometheus, Thanos, Mimir, VictoriaMetrics) through prometheus-api-client.

    Fields mirror the config's `source: {kind: prometheus}` block (docs/config.md); secrets are named by
    environment variable, never stored. Usable on its own in other Dagster code, and built from the config
    for each Prometheus cluster by `GpumeterConfigResource.source`."""

    url: str
    bearer_token_env: str | None = None
    headers_env: str | None = None
    verify_tls: bool = True
    timeout_seconds: float = 60.0
    retries: int = 3
    max_concurrent_queries: int = 4
    selector: str | None = None
    replica_labels: list[str] = ["prometheus_replica", "replica"]
    claims_file: str | None = None
    slices_file: str | None = None
    kubeconfig: str | None = None
    k8s_snapshots_dir: str | None = None
    chunk_seconds: int = 3600
    min_chunk_seconds: int = 60
    dedupe_bucket_seconds: int = 3600
    pushdown: bool = True

    def raw_source(
        self, cluster: str, cluster_label: str = "cluster", scrape_interval_seconds: int = 30
    ) -> RawSource:
        from gpumeter.ingest.prometheus import PrometheusRawSource  # imported only where a cluster uses it

        spec = PrometheusSource(kind="prometheus", **self.model_dump())
        # Δ: two HA replicas' samples less than Δ/2 apart are one scrape (R1).
        return PrometheusRawSource(
            spec,
            cluster=cluster,
            cluster_label=cluster_label,
            scrape_interval_seconds=scrape_interval_seconds,
        )


@lru_cache(maxsize=8)
def _load(path: str, _mtime_ns: int) -> Config:
    # Keyed by mtime so that an edited config is read again by a long-running `dagster dev`.
    return load_config(path)


__all__ = ["GpumeterConfigResource", "PrometheusResource", "SourceError"]
