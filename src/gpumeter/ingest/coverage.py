"""What a raw day holds, measured so that a re-pull can be compared with the stored day
(gpumeter.storage.replacement): the minutes of the day in which each GPU was reported by its exporter, and those
in which each kube target (kube-state-metrics, OpenCost, Kueue) was scraped.

Minutes of a GPU or a target, not samples: a Prometheus HA pair that lost one replica, a metric dropped from
the config or a new scrape interval leave them as they are, while a source that lost hours of the day, GPUs or
an exporter, or keeps only downsampled data, shows as fewer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpumeter.ingest.contract import day_bounds_ms
from gpumeter.ingest.kube_series import KubeSeries
from gpumeter.storage.objectstore import duckdb_paths, sql_path_list
from gpumeter.storage.replacement import Measure

MINUTE_MS = 60_000
DAY_MINUTES = 1440
GPU_MINUTES = "GPU-minutes the GPUs' exporter reported"
TARGET_MINUTES = "minutes in which kube-state-metrics and the other Kubernetes exporters were scraped"


@dataclass
class _Minutes:
    """A bitmap of the day's minutes per key (a GPU, a scrape target)."""

    ids: dict[str, int] = field(default_factory=dict)
    bits: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def add(self, keys: pa.Array, minutes: np.ndarray) -> None:
        encoded = pc.dictionary_encode(keys).combine_chunks() if isinstance(keys, pa.ChunkedArray) else None
        encoded = encoded if encoded is not None else pc.dictionary_encode(keys)
        local = np.array(
            [self.ids.setdefault(str(k), len(self.ids)) for k in encoded.dictionary.to_pylist()],
            dtype=np.int64,
        )
        if len(self.ids) * DAY_MINUTES > self.bits.size:
            grown = np.zeros(max(len(self.ids), 2 * self.bits.size // DAY_MINUTES) * DAY_MINUTES, dtype=bool)
            grown[: self.bits.size] = self.bits
            self.bits = grown
        if len(minutes):
            index = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            self.bits[local[index] * DAY_MINUTES + minutes] = True

    @property
    def count(self) -> int:
        return int(self.bits.sum())

    def span(self) -> tuple[int, int] | None:
        covered = np.flatnonzero(self.bits.reshape(-1, DAY_MINUTES).any(axis=0)) if self.bits.size else []
        return (int(covered[0]), int(covered[-1])) if len(covered) else None


@dataclass(frozen=True)
class Coverage:
    """A raw day's GPU-minutes and kube target-minutes, and the first and last minute with GPU samples."""

    gpu_minutes: int
    target_minutes: int
    gpu_span: tuple[int, int] | None  # minutes of the day (0-1439), None when there is none

    def measures(self, stored: Coverage) -> list[Measure]:
        return [
            Measure(GPU_MINUTES, Fraction(stored.gpu_minutes), Fraction(self.gpu_minutes)),
            Measure(TARGET_MINUTES, Fraction(stored.target_minutes), Fraction(self.target_minutes)),
        ]

    def lacks(self, stored: Coverage, source: str) -> str:
        """What the source is missing against the stored day, in a sentence (empty when it is not the time)."""
        if self.gpu_span is None and stored.gpu_span is not None:
            return f"{source} holds no GPU samples of the day"
        if self.gpu_span is None or stored.gpu_span is None:
            return "" if self.target_minutes else f"{source} holds no kube-state-metrics samples of the day"
        first, last = self.gpu_span
        kept_first, kept_last = stored.gpu_span
        if first > kept_first:
            return f"{source} holds GPU samples of the day from {_clock(first)} UTC on, the stored day from {_clock(kept_first)}"
        if last < kept_last:
            return f"{source} holds GPU samples of the day up to {_clock(last)} UTC, the stored day up to {_clock(kept_last)}"
        return ""


def _clock(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


class CoverageCounter:
    """The Coverage of a day handed over part by part (the pull's parts), counted as they come."""

    def __init__(self, day: date) -> None:
        self.start_ms, self.end_ms = day_bounds_ms(day)
        self._gpus = _Minutes()
        self._targets = _Minutes()

    def _in_day(self, ts: pa.Array | pa.ChunkedArray) -> pa.Array:
        return pc.and_(pc.greater_equal(ts, self.start_ms), pc.less(ts, self.end_ms))

    def _minutes(self, ts: pa.Array | pa.ChunkedArray) -> np.ndarray:
        values = ts.to_numpy() if isinstance(ts, pa.ChunkedArray) else ts.to_numpy(zero_copy_only=False)
        return (values.astype(np.int64) - self.start_ms) // MINUTE_MS

    def add_dcgm(self, rows: pa.Table) -> None:
        rows = rows.filter(self._in_day(rows.column("ts_ms")))
        if rows.num_rows:
            gpu = pc.coalesce(
                rows.column("uuid").cast(pa.string()),
                pc.binary_join_element_wise(
                    pc.fill_null(rows.column("hostname").cast(pa.string()), ""),
                    pc.fill_null(rows.column("gpu").cast(pa.string()), ""),
                    "/",
                ),
            )
            self._gpus.add(gpu, self._minutes(rows.column("ts_ms")))

    def add_kube(self, rows: pa.Table) -> None:
        rows = rows.filter(self._in_day(rows.column("ts_ms")))
        if rows.num_rows:
            metric = rows.column("metric").cast(pa.string())
            exporter = pc.list_element(pc.split_pattern(pc.fill_null(metric, ""), "_", max_splits=1), 0)
            target = pc.coalesce(rows.column("target").cast(pa.string()), exporter)
            self._targets.add(target, self._minutes(rows.column("ts_ms")))

    def add_kube_series(self, part: KubeSeries) -> None:
        for (_, metric, _, target), ts in zip(part.keys, part.ts, strict=True):
            inside = ts[(ts >= self.start_ms) & (ts < self.end_ms)]
            if len(inside):
                key = target if target is not None else metric.split("_", 1)[0]
                self._targets.add(
                    pa.array([key] * len(inside), pa.string()), (inside - self.start_ms) // MINUTE_MS
                )

    def coverage(self) -> Coverage:
        return Coverage(self._gpus.count, self._targets.count, self._gpus.span())


def stored_coverage(dcgm_files: list[Path], kube_files: list[Path], day: date) -> Coverage | None:
    """The Coverage of a stored raw day (None when nothing is stored), counted by DuckDB in the files."""
    if not dcgm_files and not kube_files:
        return None
    start_ms, end_ms = day_bounds_ms(day)
    minute = f"(ts_ms - {start_ms}) // {MINUTE_MS}"
    in_day = f"ts_ms >= {start_ms} and ts_ms < {end_ms}"
    con = duckdb.connect()
    try:
        con.execute("set threads to 2")
        gpu_minutes, first, last = 0, None, None
        if dcgm_files:
            files = sql_path_list(duckdb_paths(con, dcgm_files))
            gpu_minutes, first, last = con.execute(
                f"""select count(distinct (coalesce(uuid, coalesce(hostname, '') || '/' || coalesce(gpu, '')), {minute})),
                    min({minute}), max({minute})
                from read_parquet([{files}], union_by_name = true) where {in_day}"""
            ).fetchone()
        target_minutes = 0
        if kube_files:
            files = sql_path_list(duckdb_paths(con, kube_files))
            names = {r[0] for r in con.execute(f"select name from parquet_schema([{files}])").fetchall()}
            # Spans keep one row per scrape of each target (metric null); rows are samples of their target.
            scrapes = "metric is null" if "last_ms" in names else "metric is not null"
            target = (
                "coalesce(target, split_part(metric, '_', 1))"
                if "target" in names
                else "split_part(metric, '_', 1)"
            )
            ((target_minutes,),) = con.execute(
                f"""select count(distinct ({target}, {minute}))
                from read_parquet([{files}], union_by_name = true) where {scrapes} and {in_day}"""
            ).fetchall()
        span = (int(first), int(last)) if first is not None else None
        return Coverage(int(gpu_minutes or 0), int(target_minutes or 0), span)
    finally:
        con.close()
