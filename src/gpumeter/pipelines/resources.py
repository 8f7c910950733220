"""Dagster resources over the domain library."""

from __future__ import annotations

import os
from copy import copy
from functools import lru_cache
from typing import Any

from dagster import ConfigurableResource
from pydantic import create_model, model_validator

from gpumeter.config import Config, PrometheusSource, load_config
from gpumeter.ingest.contract import RawSource, SourceError
from gpumeter.ingest.sources import open_source, prometheus_source
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
        """The cluster's source, opened by its kind (gpumeter.ingest.sources)."""
        return open_source(self.config, cluster)


class _PrometheusResourceBase(ConfigurableResource):
    """What PrometheusResource adds to its fields (which are config.PrometheusSource's)."""

    @model_validator(mode="before")
    @classmethod
    def _as_source_config(cls, data: Any) -> Any:
        # Validated as the config's block, so the selector and window checks apply and the selector is the
        # re-rendered one.
        if isinstance(data, dict):
            return PrometheusSource(**data).model_dump(exclude={"kind"})
        return data

    @property
    def spec(self) -> PrometheusSource:
        return PrometheusSource(**self.model_dump())

    def raw_source(
        self, cluster: str, cluster_label: str = "cluster", scrape_interval_seconds: int = 30
    ) -> RawSource:
        return prometheus_source(self.spec, cluster, cluster_label, scrape_interval_seconds)


# The config's `source: {kind: prometheus}` fields, so that a setting is declared once (config.py).
PrometheusResource = create_model(
    "PrometheusResource",
    __base__=_PrometheusResourceBase,
    __module__=__name__,
    __doc__="""A PromQL API (Prometheus, Thanos, Mimir, VictoriaMetrics) through prometheus-api-client.

    Its fields are the config's `source: {kind: prometheus}` block (config.PrometheusSource, docs/config.md),
    validated alike; secrets are named by environment variable, never stored. Usable on its own in other
    Dagster code; `GpumeterConfigResource.source` opens a Prometheus cluster's source the same way
    (gpumeter.ingest.sources).""",
    **{
        name: (field.annotation, copy(field))
        for name, field in PrometheusSource.model_fields.items()
        if name != "kind"
    },
)


@lru_cache(maxsize=8)
def _load(path: str, _mtime_ns: int) -> Config:
    # Keyed by mtime so that an edited config is read again by a long-running `dagster dev`.
    return load_config(path)


__all__ = ["GpumeterConfigResource", "PrometheusResource", "SourceError"]
