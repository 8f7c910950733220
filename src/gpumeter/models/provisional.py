"""Today so far: a (cluster, day) metered before it ends, up to its last full hour (`through`), as provisional
figures (gpumeter.storage.provisional has where they live and who reads them).

The run is the nightly run's, cut at `through`: the source hands over the day with its usual lookback, the
rows from `through` on are left out, and every model runs with the day ending at `through` for everything
"in the day" means (R2's window, coverage, idle). Its raw pull and its marts go to the provisional zone only:
the raw zone's files and the marts the nightly run writes are never touched.

It never blocks or corrupts the nightly run: it takes the (cluster, day) lock without waiting, and skips
when another run holds it; it never writes a day that has final marts. The nightly run of the complete day
removes the provisional files (gpumeter.models.partition).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime

import pyarrow as pa
import pyarrow.compute as pc

from gpumeter.config import Config
from gpumeter.ingest.contract import PartedRawSource, RawFiles, RawSource, day_bounds_ms, lookback_ms
from gpumeter.ingest.schema import RAW_TABLES
from gpumeter.models.project import load_models
from gpumeter.models.runner import meter_day
from gpumeter.storage import provisional
from gpumeter.storage.day_parts import DayInParts
from gpumeter.storage.locks import LockBusy
from gpumeter.storage.paths import MARTS, RAW
from gpumeter.storage.warehouse import Warehouse

Log = Callable[[str], None]

# The raw tables of samples (cut by their time) and of DRA snapshots (cut by the time they were taken).
_SAMPLE_TABLES = ("raw_dcgm_samples", "raw_kube_samples")


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class SoFar:
    """What a provisional run did: metered the (cluster, day) up to `through`, or skipped it (`message` says
    why, in words)."""

    cluster: str
    day: date
    through: datetime
    metered: bool
    message: str
    rows: dict[str, int] = field(default_factory=dict)  # mart -> rows written, when metered


def last_full_hour(moment: datetime) -> datetime:
    """The end of the last full UTC hour at `moment`: 14:10 -> 14:00."""
    if moment.tzinfo is None:
        raise ValueError(f"{moment.isoformat()} has no time zone; give it in UTC")
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def through_text(through: datetime) -> str:
    """`14:00 UTC`: how the pages and the CLI name the end of a provisional day."""
    return f"{through.astimezone(UTC):%H:%M} UTC"


def mart_tables() -> list[str]:
    """The stored tables of the marts layer: a day with any of them has final figures."""
    return [m.table for m in load_models() if m.layer == "marts" and not m.ephemeral]


def meter_day_so_far(
    config: Config,
    warehouse: Warehouse,
    cluster: str,
    through: datetime,
    source_for: Callable[[str], RawSource],
    log: Log = _quiet,
) -> SoFar:
    """Meter `cluster`'s day up to `through` (a whole UTC hour, exclusive) into the provisional zone, or skip
    it with a message: the day has no full hour yet, it has final marts, or another run holds its lock."""
    if through.tzinfo is None or through != last_full_hour(through):
        raise ValueError(f"through {through.isoformat()} is not a whole UTC hour, e.g. 2026-11-17T14:00:00Z")
    through = through.astimezone(UTC)
    day = through.date()
    start_ms, _ = day_bounds_ms(day)
    through_ms = int(through.timestamp() * 1000)

    def skipped(why: str) -> SoFar:
        message = f"{cluster} {day}: {why}"
        log(message)
        return SoFar(cluster, day, through, False, message)

    if through_ms == start_ms:
        return skipped("nothing to meter yet: the day's first hour ends at 01:00 UTC")
    tables = mart_tables()
    if provisional.has_final(warehouse, cluster, day, tables):
        return skipped(_FINAL)
    zone = provisional.zone(warehouse)
    staged = zone.day_in_parts(RAW, cluster, day, dict(RAW_TABLES))
    try:
        # Fetched before the lock, as the nightly pull does: a slow source never holds a day's lock.
        source = source_for(cluster)
        lookback = lookback_ms(config, cluster)
        if isinstance(source, PartedRawSource):
            parts = source.fetch_day_parts(cluster, day, lookback)
        else:
            parts = iter([source.fetch_day(cluster, day, lookback)])
        for part in parts:
            for table, rows in part.stored_tables().items():
                kept = _before(table, rows, through_ms)
                if kept.num_rows:
                    staged.write(table, kept)
        try:
            with warehouse.day_lock(day, cluster=cluster, timeout_s=0):
                return _meter_locked(config, warehouse, cluster, day, through, tables, staged, log)
        except LockBusy:
            return skipped(
                "skipped: another run is writing the day (the nightly run, or another provisional one); "
                "nothing was written, and the next hourly run meters it again"
            )
    finally:
        staged.discard()


_FINAL = (
    "skipped: the day has its final figures already (the nightly run metered it); provisional figures are "
    "never written over them"
)


def _meter_locked(
    config: Config,
    warehouse: Warehouse,
    cluster: str,
    day: date,
    through: datetime,
    tables: list[str],
    staged: DayInParts,
    log: Log,
) -> SoFar:
    """Under the (cluster, day) lock: store the cut raw day and meter it, both in the provisional zone."""
    if provisional.has_final(warehouse, cluster, day, tables):  # the nightly run finished while we fetched
        message = f"{cluster} {day}: {_FINAL}"
        log(message)
        return SoFar(cluster, day, through, False, message)
    zone = provisional.zone(warehouse)
    staged.commit()
    raw = RawFiles({name: zone.day_files(RAW, name, cluster, day) for name in RAW_TABLES})
    spill = warehouse.scratch_dir(f"duckdb-provisional-{cluster}-{day.isoformat()}-{os.getpid()}")
    try:
        results = meter_day(
            raw,
            config,
            cluster,
            day,
            keep_layers=("marts",),
            temp_directory=spill,
            through_ms=int(through.timestamp() * 1000),
        )
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    models = {m.name: m for m in load_models()}
    rows = {}
    with zone.day_commit(cluster, day) as commit:  # the day's marts replace the former ones together
        for name, table in results.items():
            target = zone.day_path(MARTS, models[name].table, cluster, day)
            commit.stage_table(target, provisional.with_through(table, through))
            rows[models[name].table] = table.num_rows
    message = f"{cluster} {day}: metered through {through_text(through)}, provisional"
    log(message)
    return SoFar(cluster, day, through, True, message, rows)


def _before(table: str, rows: pa.Table, through_ms: int) -> pa.Table:
    """The rows of a raw table before `through`: samples by their time, DRA snapshots by the time they were
    taken (one of unknown time stays: it stands for the whole window). A sample without a time stays too:
    staging quarantines it as the nightly run does."""
    column = "ts_ms" if table in _SAMPLE_TABLES else "snapshot_ms"
    if not rows.num_rows or column not in rows.column_names:
        return rows
    moments = rows.column(column)
    return rows.filter(pc.or_kleene(pc.is_null(moments), pc.less(moments, through_ms)))
