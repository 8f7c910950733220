"""The source contract: what every raw source hands over for a (cluster, day).

A source returns the samples in [day start − lookback, day end): the lookback lets counters and pod/node states
reach back across midnight, so every day is self-contained and days can be metered in any order (R15).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from gpumeter.config import Config
from gpumeter.ingest.kube_series import KubeSeries
from gpumeter.ingest.row_order import gpu_ordered
from gpumeter.ingest.schema import RAW_TABLES

# Samples of one stream further apart than this many scrape intervals (Δ) mean the exporter was scraped less often
# than Δ, while each sample stands for Δ: said by the Prometheus pull (HA targets) and the Kueue check alike.
SLOW_SCRAPE_INTERVALS = 1.5


class SourceError(RuntimeError):
    """Raw data could not be read; names the file or endpoint and what to do."""


def one_line(text: object, limit: int = 300) -> str:
    """`text` (an exception, a server's message) as one line of at most `limit` characters: a SourceError is
    printed as one line, and Dagster keeps a failure's last line."""
    flat = " ".join(str(text).split()) if text is not None else ""
    return flat if len(flat) <= limit else flat[:limit] + "..."


def day_bounds_ms(day: date) -> tuple[int, int]:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return int(start.timestamp() * 1000), int((start + timedelta(days=1)).timestamp() * 1000)


def utc_today() -> date:
    """Today as a UTC day, the day a price or a tenant rule is looked up for when no metered day is given."""
    return datetime.now(UTC).date()


def lookback_ms(config: Config, cluster: str) -> int:
    """How far before the day a cluster's raw inputs must reach: the last counter and pod/node state
    samples."""
    return max(config.kube_lookback_seconds, 2 * config.scrape_interval_of(cluster)) * 1000


@dataclass(frozen=True)
class K8sSnapshot:
    """The Kubernetes DRA documents a source read for a day, as read, for the pull to keep beside the raw day:
    claims vanish with their pods, so the documents are the day's only record of who held a device (R5).

    `documents`: kind (paths.SNAPSHOT_KINDS) -> the list read at an unknown time (a claims_file or slices_file,
    or the API listed now), for the kinds read only. `timed_files`: the time-named snapshot files read from
    the snapshot folder (k8s_snapshots_dir), each kept with the day it was taken. `fetched_at`: when the
    source read them (UTC)."""

    fetched_at: datetime
    documents: Mapping[str, Any] = field(default_factory=dict)
    timed_files: tuple[Path, ...] = ()


@dataclass
class RawDay:
    """Raw samples for one cluster: the day itself plus, for counters, the lookback before it.

    `k8s_snapshot` is what the source read the DRA tables from, to be kept; None where there is nothing to
    keep (the Parquet source reads snapshots that are kept already). A day handed over in parts carries it
    in its last part. `kube_series`: the part's kube samples as series (KubeSeries), only where they were
    asked for so (KubeSeriesSource); `kube` is then empty."""

    dcgm: pa.Table
    kube: pa.Table
    dra_allocations: pa.Table = field(default_factory=lambda: RAW_TABLES["raw_dra_allocations"].empty_table())
    dra_devices: pa.Table = field(default_factory=lambda: RAW_TABLES["raw_dra_devices"].empty_table())
    k8s_snapshot: K8sSnapshot | None = None
    kube_series: KubeSeries | None = None

    def tables(self) -> dict[str, pa.Table]:
        return {
            "raw_dcgm_samples": self.dcgm,
            "raw_kube_samples": self.kube,
            "raw_dra_allocations": self.dra_allocations,
            "raw_dra_devices": self.dra_devices,
        }

    def stored_tables(self) -> dict[str, pa.Table]:
        """`tables()` as the raw zone stores them: the DCGM rows in GPU order (gpumeter.ingest.row_order), put
        so here where the source did not write them so."""
        return self.tables() | {"raw_dcgm_samples": gpu_ordered(self.dcgm)}


@dataclass(frozen=True)
class RawFiles:
    """Raw samples of one cluster as stored Parquet files (the day with its lookback), by raw table name.
    DuckDB scans them where they lie, local or on an object store (UPath): a fleet's day never has to
    fit in Python memory."""

    files: Mapping[str, Sequence[Path]]


class RawSource(Protocol):
    def fetch_day(self, cluster: str, day: date, lookback_ms: int) -> RawDay: ...


@runtime_checkable
class PartedRawSource(RawSource, Protocol):
    """A source that can hand a day over in parts, so that pulling it never holds the whole day in memory
    (runner.pull_raw_day writes each part as it comes)."""

    def fetch_day_parts(self, cluster: str, day: date, lookback_ms: int) -> Iterator[RawDay]: ...


@runtime_checkable
class KubeSeriesSource(PartedRawSource, Protocol):
    """A parted source that can hand each part's kube samples over as series (RawDay.kube_series), its parts
    in time order and of windows that do not overlap: the pull then makes the day's kube spans part by part
    (gpumeter.ingest.kube_series.SpanBuilder) and never builds per-sample kube rows. Its other tables may
    come with dictionary-encoded string columns (the staged files store them as plain strings)."""

    def fetch_day_series_parts(self, cluster: str, day: date, lookback_ms: int) -> Iterator[RawDay]: ...


def concat_parts(parts: Iterator[RawDay]) -> RawDay:
    """A day's parts as one RawDay (each table concatenated in the order the parts came; the last Kubernetes
    snapshot handed over)."""
    tables: dict[str, list[pa.Table]] = {table: [] for table in RAW_TABLES}
    snapshot: K8sSnapshot | None = None
    for part in parts:
        for table, rows in part.tables().items():
            if rows.num_rows:
                tables[table].append(rows)
        if part.k8s_snapshot is not None:
            snapshot = part.k8s_snapshot
    whole = {
        table: pa.concat_tables(found) if found else RAW_TABLES[table].empty_table()
        for table, found in tables.items()
    }
    return RawDay(
        whole["raw_dcgm_samples"],
        whole["raw_kube_samples"],
        whole["raw_dra_allocations"],
        whole["raw_dra_devices"],
        snapshot,
    )
