"""Raw sources: where a (cluster, day) of raw samples comes from.

Each source returns a `RawDay` holding the samples in [day start − lookback, day end): the lookback lets
counters and pod/node states reach back across midnight, so every day is self-contained and days can be
metered in any order (R15).
"""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from metering.accounting import RawDay, day_bounds_ms
from metering.schema import RAW_TABLES


class SourceError(RuntimeError):
    """Raw data could not be read; names the file or endpoint and what to do."""


class RawSource(Protocol):
    def fetch_day(self, cluster: str, day: date, lookback_ms: int) -> RawDay: ...


def _read_window(path: Path, table: str, start_ms: int, end_ms: int) -> pa.Table | None:
    if not path.exists():
        return None
    try:
        rows = pq.read_table(path, filters=[("ts_ms", ">=", start_ms), ("ts_ms", "<", end_ms)])
    except (pa.ArrowInvalid, OSError) as exc:
        raise SourceError(
            f"{path}: not a readable Parquet file ({exc}); re-create it or remove the day"
        ) from exc
    schema = RAW_TABLES[table]
    missing = [name for name in schema.names if name not in rows.column_names]
    if missing:
        raise SourceError(
            f"{path}: missing column(s) {', '.join(missing)} of the raw-samples schema ({table})"
        )
    try:
        return rows.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SourceError(f"{path}: columns do not cast to the raw-samples schema ({exc})") from exc


class ParquetRawSource:
    """Raw samples in the raw-samples schema, laid out as `<table>/cluster=<c>/day=<d>/data.parquet` with
    Kubernetes object snapshots in `k8s/cluster=<c>/day=<d>/{resourceclaims,resourceslices}.json`."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _day_files(self, table: str, cluster: str, day: date) -> list[Path]:
        # A fleet's day is written in parts (simulator.write_parquet): every Parquet file of the folder.
        return sorted((self.root / table / f"cluster={cluster}" / f"day={day.isoformat()}").glob("*.parquet"))

    def fetch_day(self, cluster: str, day: date, lookback_ms: int) -> RawDay:
        if not self.root.exists():
            raise SourceError(
                f"raw source directory {self.root} does not exist; run `gpumeter simulate` first"
            )
        start_ms, end_ms = day_bounds_ms(day)
        window_start = start_ms - lookback_ms
        tables: dict[str, pa.Table] = {}
        for table in ("raw_dcgm_samples", "raw_kube_samples"):
            parts = []
            for d in (day - timedelta(days=1), day):
                for path in self._day_files(table, cluster, d):
                    part = _read_window(path, table, window_start, end_ms)
                    if part is not None and part.num_rows:
                        parts.append(part)
            tables[table] = pa.concat_tables(parts) if parts else RAW_TABLES[table].empty_table()
        allocations, devices = self._k8s_objects(cluster, day)
        return RawDay(tables["raw_dcgm_samples"], tables["raw_kube_samples"], allocations, devices)

    def _k8s_objects(self, cluster: str, day: date) -> tuple[pa.Table, pa.Table]:
        from metering.k8s_objects import (
            K8sObjectError,
            load_k8s_json,
            parse_resource_claims,
            parse_resource_slices,
        )

        claims, slices = [], []
        for d in (day - timedelta(days=1), day):
            folder = self.root / "k8s" / f"cluster={cluster}" / f"day={d.isoformat()}"
            claims_file, slices_file = folder / "resourceclaims.json", folder / "resourceslices.json"
            try:
                if claims_file.exists():
                    claims.append(
                        parse_resource_claims(load_k8s_json(claims_file), cluster, str(claims_file))
                    )
                if slices_file.exists():
                    slices.append(
                        parse_resource_slices(load_k8s_json(slices_file), cluster, str(slices_file))
                    )
            except K8sObjectError as exc:
                raise SourceError(str(exc)) from exc
        return (
            pa.concat_tables(claims) if claims else RAW_TABLES["raw_dra_allocations"].empty_table(),
            pa.concat_tables(slices) if slices else RAW_TABLES["raw_dra_devices"].empty_table(),
        )
