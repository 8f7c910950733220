"""Durable storage: Parquet files partitioned by cluster and day, DuckDB as the engine.

Layout (Hive-style, so DuckDB reads `cluster` and `day` back as columns):

    <root>/<zone>/<table>/cluster=<cluster>/day=<YYYY-MM-DD>/data.parquet     daily tables
    <root>/<zone>/<table>/period=<YYYY-MM>/data.parquet                       monthly tables

Why files and not one DuckDB database: a DuckDB file opened by the pipeline for writing cannot be
opened by the dashboard at the same time, and a reader holding it read-only blocks the writer. Parquet
files are replaced with an atomic rename, so a reader sees the old day or the new day, never half of one,
and a killed run leaves the previous file in place (R15).
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

RAW = "raw"
MARTS = "marts"
INTERMEDIATE = "intermediate"
STAGING = "staging"


class WarehouseError(RuntimeError):
    """A storage problem, with the path and what to do next."""


@dataclass(frozen=True)
class Warehouse:
    root: Path

    @classmethod
    def at(cls, root: str | os.PathLike[str]) -> Warehouse:
        return cls(Path(root).expanduser().resolve())

    # --- paths -------------------------------------------------------------------------------
    def table_dir(self, zone: str, table: str) -> Path:
        return self.root / zone / table

    def day_path(self, zone: str, table: str, cluster: str, day: date) -> Path:
        return self.table_dir(zone, table) / f"cluster={cluster}" / f"day={day.isoformat()}" / "data.parquet"

    def period_path(self, zone: str, table: str, period: str) -> Path:
        return self.table_dir(zone, table) / f"period={period}" / "data.parquet"

    def day_paths(
        self, zone: str, table: str, days: Iterable[date], cluster: str | None = None
    ) -> list[Path]:
        wanted = {d.isoformat() for d in days}
        base = self.table_dir(zone, table)
        if not base.exists():
            return []
        found = []
        for path in sorted(base.glob("cluster=*/day=*/data.parquet")):
            c = path.parent.parent.name.removeprefix("cluster=")
            d = path.parent.name.removeprefix("day=")
            if d in wanted and (cluster is None or c == cluster):
                found.append(path)
        return found

    def days(self, zone: str, table: str) -> list[tuple[str, date]]:
        base = self.table_dir(zone, table)
        out = []
        for path in sorted(base.glob("cluster=*/day=*/data.parquet")):
            out.append(
                (
                    path.parent.parent.name.removeprefix("cluster="),
                    date.fromisoformat(path.parent.name.removeprefix("day=")),
                )
            )
        return out

    # --- writes ------------------------------------------------------------------------------
    def write_day(self, zone: str, table: str, cluster: str, day: date, rows: pa.Table) -> Path:
        return atomic_write_parquet(self.day_path(zone, table, cluster, day), rows)

    def write_period(self, zone: str, table: str, period: str, rows: pa.Table) -> Path:
        return atomic_write_parquet(self.period_path(zone, table, period), rows)

    # --- reads -------------------------------------------------------------------------------
    def read_days(
        self, zone: str, table: str, days: Iterable[date], cluster: str | None = None
    ) -> pa.Table | None:
        paths = self.day_paths(zone, table, days, cluster)
        if not paths:
            return None
        # Every stored table carries its own cluster/day columns: read files without hive inference.
        return pa.concat_tables(
            [pq.read_table(p, partitioning=None) for p in paths], promote_options="default"
        )

    def connect(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB session with a view per stored table: reading never locks a writer.
        Stored tables carry their own cluster/day columns, so the Hive path is not read back."""
        con = duckdb.connect()
        for zone in (RAW, STAGING, INTERMEDIATE, MARTS):
            zone_dir = self.root / zone
            if not zone_dir.exists():
                continue
            for table_dir in sorted(p for p in zone_dir.iterdir() if p.is_dir()):
                if not any(table_dir.glob("**/data.parquet")):
                    continue
                pattern = str(table_dir / "**" / "data.parquet").replace(
                    "'", "''"
                )  # a view takes no parameters
                con.execute(
                    f'CREATE OR REPLACE VIEW "{table_dir.name}" AS '
                    f"SELECT * FROM read_parquet('{pattern}', hive_partitioning = false, union_by_name = true)"
                )
        return con


def atomic_write_parquet(path: Path, rows: pa.Table) -> Path:
    """Write `rows` to `path` so that the file is either the old one or the complete new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=f".{uuid.uuid4().hex[:8]}.tmp", dir=path.parent
    )
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        pq.write_table(rows, tmp, compression="zstd")
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise WarehouseError(
            f"could not write {path}: {exc.strerror or exc}. Earlier results are untouched; "
            "free disk space or fix permissions on the warehouse, then re-run the day."
        ) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return path
