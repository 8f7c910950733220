"""The Parquet source: raw samples already in the raw-samples schema (the simulator's output, or an earlier
pull), laid out by cluster and day."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, timedelta
from fractions import Fraction
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpumeter.ingest.contract import RawDay, SourceError, concat_parts, day_bounds_ms
from gpumeter.ingest.k8s_objects import K8sObjectError, read_snapshots
from gpumeter.ingest.kube_spans import decode_spans, is_spans
from gpumeter.ingest.schema import OPTIONAL_RAW_COLUMNS, RAW_TABLES
from gpumeter.storage import paths

DAY_MS = 86_400_000


# Timestamps written in another unit than milliseconds, as the factor that makes them milliseconds.
_TIME_UNITS = (
    ("seconds", Fraction(1000)),
    ("microseconds", Fraction(1, 1000)),
    ("nanoseconds", Fraction(1, 10**6)),
)


def _check_time_unit(path: Path, parquet: pq.ParquetFile, day: date) -> None:
    """A day's file whose every timestamp lies far from the day, but in it when read in seconds, microseconds or
    nanoseconds, is one SourceError naming the unit: its rows would all be quarantined as outside the day."""
    ts_column = parquet.schema_arrow.get_field_index("ts_ms")
    lows, highs = [], []
    for index in range(parquet.num_row_groups):
        stats = parquet.metadata.row_group(index).column(ts_column).statistics
        if stats is None or not stats.has_min_max:
            return
        lows.append(stats.min)
        highs.append(stats.max)
    if not lows:
        return
    start_ms, end_ms = day_bounds_ms(day)
    near = (start_ms - DAY_MS, end_ms + DAY_MS)
    low, high = min(lows), max(highs)
    if near[0] <= low < near[1] or near[0] <= high < near[1]:
        return
    for unit, factor in _TIME_UNITS:
        if near[0] <= low * factor and high * factor < near[1]:
            fix = f"multiply them by {factor}" if factor > 1 else f"divide them by {1 / factor}"
            raise SourceError(
                f"{path}: column ts_ms holds {unit} since 1970, not milliseconds (from {low} to {high}, which "
                f"in milliseconds would lie in {day}); write the timestamps in milliseconds ({fix}) and re-run"
            )


def _read_window(
    path: Path, table: str, start_ms: int | None, end_ms: int | None, day: date | None = None
) -> Iterator[pa.Table]:
    """The file's rows with start_ms <= ts_ms < end_ms (every row when the bounds are None), in the
    raw-samples schema, one row group at a time. Any unreadable, truncated or mistyped file is one
    SourceError naming it; so is a file of `day` whose timestamps are in another unit than milliseconds."""
    schema = RAW_TABLES[table]
    try:
        found = pq.read_schema(path)
    except (pa.ArrowException, OSError) as exc:
        raise SourceError(
            f"{path}: not a readable Parquet file ({exc}); re-create it (gpumeter simulate, or re-export "
            "the day) or remove it"
        ) from None
    if table == "raw_kube_samples" and is_spans(found):  # an earlier pull's kube samples, stored as spans
        yield from _read_spans(path, start_ms, end_ms)
        return
    optional = OPTIONAL_RAW_COLUMNS.get(table, frozenset())
    absent = [name for name in schema.names if name in optional and name not in found.names]
    missing = [name for name in schema.names if name not in found.names and name not in absent]
    if missing:
        raise SourceError(
            f"{path}: missing column(s) {', '.join(missing)} of the raw-samples schema ({table}); "
            "docs/config.md lists the columns a Parquet source needs"
        )
    wrong = [
        f"{f.name} is {found.field(f.name).type}, expected {f.type}"
        for f in schema
        if f.name not in absent and not _castable(found.field(f.name).type, f.type)
    ]
    if wrong:
        raise SourceError(
            f"{path}: column types do not match the raw-samples schema ({table}): {'; '.join(wrong)}"
        )
    try:
        parquet = pq.ParquetFile(path)
        if day is not None:
            _check_time_unit(path, parquet, day)
        ts_column = parquet.schema_arrow.get_field_index("ts_ms")
        bounded = start_ms is not None and end_ms is not None
        for index in range(parquet.num_row_groups):
            if bounded:
                stats = parquet.metadata.row_group(index).column(ts_column).statistics
                if stats is not None and stats.has_min_max and (stats.max < start_ms or stats.min >= end_ms):
                    continue  # the row group lies outside the window
            rows = parquet.read_row_group(index, columns=[n for n in schema.names if n not in absent])
            for name in absent:
                rows = rows.append_column(name, pa.nulls(rows.num_rows, schema.field(name).type))
            rows = rows.select(schema.names)
            if bounded:
                ts = rows.column("ts_ms")
                rows = rows.filter(pc.and_(pc.greater_equal(ts, start_ms), pc.less(ts, end_ms)))
            yield rows.cast(schema)
    except (pa.ArrowException, OSError) as exc:
        raise SourceError(
            f"{path}: cannot be read as the raw-samples schema ({table}): {exc}; re-create it or remove it"
        ) from None


def _read_spans(path: Path, start_ms: int | None, end_ms: int | None) -> Iterator[pa.Table]:
    """The kube rows a file of spans stands for (gpumeter.ingest.kube_spans), with start_ms <= ts_ms < end_ms
    when bounded. A span's samples are at its target's scrapes, which the file keeps: it is read whole."""
    try:
        spans = pq.read_table(path)
        yield from decode_spans(spans, start_ms, end_ms)
    except (pa.ArrowException, OSError) as exc:
        raise SourceError(
            f"{path}: cannot be read as kube spans ({exc}); re-pull the day or remove it"
        ) from None


def _castable(found: pa.DataType, wanted: pa.DataType) -> bool:
    """Same kind of column (integers for ts_ms, floats or integers for value, text for labels): a file
    written by another tool with int32 timestamps or large strings is read; a text timestamp is not."""
    if found == wanted or pa.types.is_null(found):
        return True
    if pa.types.is_integer(wanted):
        return pa.types.is_integer(found)
    if pa.types.is_floating(wanted):
        return pa.types.is_integer(found) or pa.types.is_floating(found)
    if pa.types.is_string(wanted):
        return pa.types.is_string(found) or pa.types.is_large_string(found) or pa.types.is_dictionary(found)
    return False


class ParquetRawSource:
    """Raw samples in the raw-samples schema, laid out as `<table>/cluster=<c>/day=<d>/data.parquet` with
    Kubernetes object snapshots in `k8s/cluster=<c>/day=<d>/`: `{resourceclaims,resourceslices}-<time>.json`
    and, of unknown time, `{resourceclaims,resourceslices}.json` (gpumeter/ingest/k8s_objects.py).
    Those snapshots are kept where they are: its days carry no `k8s_snapshot` for the pull to keep."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _day_files(self, table: str, cluster: str, day: date) -> list[Path]:
        # A fleet's day is written in parts (simulator.write_parquet): every Parquet file of the folder.
        return sorted(paths.partition_dir(self.root / table, cluster, day).glob("*.parquet"))

    def fetch_day(self, cluster: str, day: date, lookback_ms: int) -> RawDay:
        return concat_parts(self.fetch_day_parts(cluster, day, lookback_ms))

    def fetch_day_parts(self, cluster: str, day: date, lookback_ms: int) -> Iterator[RawDay]:
        """The day in parts of one Parquet row group each (the DRA objects in the last part)."""
        if not self.root.exists():
            raise SourceError(
                f"raw source directory {self.root} does not exist; run `gpumeter simulate` first"
            )
        start_ms, end_ms = day_bounds_ms(day)
        window_start = start_ms - lookback_ms
        empty = {table: RAW_TABLES[table].empty_table() for table in RAW_TABLES}
        for table in ("raw_dcgm_samples", "raw_kube_samples"):
            # The day before: only its rows inside the lookback. The day's own files: every row, also one
            # timestamped outside the day (misfiled, or far in the past or future). The accounting counts
            # those as quarantined (int_dcgm_quarantine, R2) instead of their vanishing here.
            for d, bounds in ((day - timedelta(days=1), (window_start, end_ms)), (day, (None, None))):
                for path in self._day_files(table, cluster, d):
                    for rows in _read_window(path, table, *bounds, day=day if d == day else None):
                        if rows.num_rows:
                            found = empty | {table: rows}
                            yield RawDay(found["raw_dcgm_samples"], found["raw_kube_samples"])
        allocations, devices = self._k8s_objects(cluster, day)
        yield RawDay(empty["raw_dcgm_samples"], empty["raw_kube_samples"], allocations, devices)

    def _k8s_objects(self, cluster: str, day: date) -> tuple[pa.Table, pa.Table]:
        """Every DRA snapshot kept for the day and the day before (`k8s/cluster=<c>/day=<d>/`, k8s_objects): the
        time-named `resourceclaims-<time>.json` / `resourceslices-<time>.json` with their time, and the plain
        `resourceclaims.json` / `resourceslices.json` as a snapshot of unknown time, valid for the whole
        window (a claims or slices file, or the API listed at pull time, as the pull keeps it). Staging
        decides when each object is valid (R5)."""
        try:
            found = read_snapshots(self.root / paths.K8S, cluster, (day - timedelta(days=1), day))
        except K8sObjectError as exc:
            raise SourceError(str(exc)) from exc
        return found.allocations, found.devices
