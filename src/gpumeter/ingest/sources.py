"""How each kind of source is read: one opener per `kind:` of the config's source block (config/sources.py),
called through `open_source` by the Dagster resource (pipelines/resources.py) for every pull.

A new kind is its settings model in config/sources.py (in its `Source` union) and its opener here, registered
with `@source_kind("<kind>")`: a function of the cluster's source block, the config and the cluster's name that
returns a RawSource (ingest/contract.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpumeter.config import Config, ParquetSource, PrometheusSource
from gpumeter.ingest.contract import RawSource, SourceError
from gpumeter.ingest.parquet import ParquetRawSource

# (the cluster's source block, the config, the cluster's name) -> its RawSource.
Opener = Callable[[Any, Config, str], RawSource]

_OPENERS: dict[str, Opener] = {}


def source_kind(kind: str) -> Callable[[Opener], Opener]:
    """Register the opener of the sources whose `kind:` is `kind`."""

    def register(opener: Opener) -> Opener:
        if kind in _OPENERS:
            raise ValueError(f"source kind {kind!r} already has an opener ({_OPENERS[kind].__qualname__})")
        _OPENERS[kind] = opener
        return opener

    return register


def source_kinds() -> tuple[str, ...]:
    """The kinds of source an opener is registered for."""
    return tuple(_OPENERS)


def open_source(config: Config, cluster: str) -> RawSource:
    """The RawSource of `cluster`, by the opener of its source's kind."""
    spec = config.cluster(cluster).source
    opener = _OPENERS.get(spec.kind)
    if opener is None:
        raise SourceError(
            f"cluster {cluster}: no reader for sources of kind {spec.kind!r} (known: {', '.join(_OPENERS)})"
        )
    return opener(spec, config, cluster)


@source_kind("parquet")
def _parquet(spec: ParquetSource, config: Config, cluster: str) -> RawSource:
    return ParquetRawSource(spec.path)


@source_kind("prometheus")
def _prometheus(spec: PrometheusSource, config: Config, cluster: str) -> RawSource:
    return prometheus_source(
        spec, cluster, config.cluster(cluster).cluster_label, config.scrape_interval_of(cluster)
    )


def prometheus_source(
    spec: PrometheusSource, cluster: str, cluster_label: str = "cluster", scrape_interval_seconds: int = 30
) -> RawSource:
    """A PromQL API's RawSource for one cluster (also PrometheusResource's, used on its own)."""
    from gpumeter.ingest.prometheus import PrometheusRawSource  # imported only where a cluster uses it

    # Δ: two HA replicas' samples less than Δ/2 apart are one scrape (R1).
    return PrometheusRawSource(
        spec,
        cluster=cluster,
        cluster_label=cluster_label,
        scrape_interval_seconds=scrape_interval_seconds,
    )


__all__ = ["Opener", "open_source", "prometheus_source", "source_kind", "source_kinds"]
