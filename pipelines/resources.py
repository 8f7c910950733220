"""Dagster resources over the domain library."""

from __future__ import annotations

import os
from functools import lru_cache

from dagster import ConfigurableResource

from metering.config import Config, ParquetSource, load_config
from metering.sources import ParquetRawSource, RawSource, SourceError
from metering.warehouse import Warehouse


class GpumeterConfigResource(ConfigurableResource):
    """The gpumeter YAML config (docs/config.md): clusters, rate card, tenants, warehouse."""

    config_path: str

    @property
    def config(self) -> Config:
        return _load(self.config_path, os.stat(self.config_path).st_mtime_ns)

    @property
    def warehouse(self) -> Warehouse:
        return Warehouse.at(self.config.warehouse.path)

    def source(self, cluster: str) -> RawSource:
        cluster_spec = self.config.cluster(cluster)
        spec = cluster_spec.source
        if isinstance(spec, ParquetSource):
            return ParquetRawSource(spec.path)
        from metering.prometheus import PrometheusRawSource  # imported only where a cluster uses it

        return PrometheusRawSource(spec, cluster=cluster, cluster_label=cluster_spec.cluster_label)


@lru_cache(maxsize=8)
def _load(path: str, _mtime_ns: int) -> Config:
    # Keyed by mtime so that an edited config is read again by a long-running `dagster dev`.
    return load_config(path)


__all__ = ["GpumeterConfigResource", "SourceError"]
