"""The source contract: what every raw source hands over for a (cluster, day).

A source returns the samples in [day start − lookback, day end): the lookback lets counters and pod/node states
reach back across midnight, so every day is self-contained and days can be metered in any order (R15).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Protocol, runtime_checkable

import pyarrow as pa

from gpumeter.config import Config
from gpumeter.ingest.schema import RAW_TABLES


class SourceError(RuntimeError):
    """Raw data could not be read; names the file or endpoint and what to do."""


def day_bounds_ms(day: date) -> tuple[int, int]:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return int(start.timestamp() * 1000), int((start + timedelta(days=1)).timestamp() * 1000)


def lookback_ms(config: Config) -> int:
    """How far before the day the raw inputs must reach: the last counter and pod/node state samples."""
    return max(config.kube_lookback_seconds, 2 * config.scrape_interval_seconds) * 1000


@dataclass
class RawDay:
    """Raw samples for one cluster: the day itself plus, for counters, the lookback before it."""

    dcgm: pa.Table
    kube: pa.Table
    dra_allocations: pa.Table = field(default_factory=lambda: RAW_TABLES["raw_dra_allocations"].empty_table())
    dra_devices: pa.Table = field(default_factory=lambda: RAW_TABLES["raw_dra_devices"].empty_table())

    def tables(self) -> dict[str, pa.Table]:
        return {
            "raw_dcgm_samples": self.dcgm,
            "raw_kube_samples": self.kube,
            "raw_dra_allocations": self.dra_allocations,
            "raw_dra_devices": self.dra_devices,
        }


@dataclass(frozen=True)
class RawFiles:
    """Raw samples of one cluster as stored Parquet files (the day with its lookback), by raw table name.
    DuckDB scans them where they lie, local or on an object store (UPath): a 10,000-GPU day never has to
    fit in Python memory (bench/)."""

    files: Mapping[str, Sequence[Path]]


class RawSource(Protocol):
    def fetch_day(self, cluster: str, day: date, lookback_ms: int) -> RawDay: ...


@runtime_checkable
class PartedRawSource(RawSource, Protocol):
    """A source that can hand a day over in parts, so that pulling it never holds the whole day in memory
    (runner.pull_raw_day writes each part as it comes; a 10,000-GPU day is ~500 M raw rows)."""

    def fetch_day_parts(self, cluster: str, day: date, lookback_ms: int) -> Iterator[RawDay]: ...


def concat_parts(parts: Iterator[RawDay]) -> RawDay:
    """A day's parts as one RawDay (each table concatenated in the order the parts came)."""
    tables: dict[str, list[pa.Table]] = {table: [] for table in RAW_TABLES}
    for part in parts:
        for table, rows in part.tables().items():
            if rows.num_rows:
                tables[table].append(rows)
    whole = {
        table: pa.concat_tables(found) if found else RAW_TABLES[table].empty_table()
        for table, found in tables.items()
    }
    return RawDay(
        whole["raw_dcgm_samples"],
        whole["raw_kube_samples"],
        whole["raw_dra_allocations"],
        whole["raw_dra_devices"],
    )
