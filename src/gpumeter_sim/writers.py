"""Writing the factory out: as a Parquet source (the raw tables and the DRA snapshots, one folder per day, as
gpumeter.ingest.parquet reads them) or as one OpenMetrics file for `promtool tsdb create-blocks-from
openmetrics` (what a Prometheus that scraped the factory would hold). Both stream a day by node groups."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from gpumeter.storage import paths
from gpumeter.storage.files import atomic_write_parquet, atomic_write_text
from gpumeter_sim import openmetrics
from gpumeter_sim.activity import DayContext, build_day
from gpumeter_sim.dra import claim_snapshots, resource_claims, resource_slices, slice_snapshots
from gpumeter_sim.signals import day_parts, iter_day_parts
from gpumeter_sim.spec import DAY_S, REPLICA_B_OFFSET_MS, REPLICA_GAPS_S, FactorySpec, epoch


def write_parquet(
    spec: FactorySpec,
    out_dir: Path,
    progress: Callable[[date], None] | None = None,
    nodes_per_part: int = 16,
    lookback_s: int = 0,
) -> None:
    """The "parquet source": raw_dcgm_samples/, raw_kube_samples/ and k8s/ snapshots, one folder per day,
    streamed by node groups (`iter_day_parts`): `data.parquet` when the day is one part, else
    `part-NNNNN.parquet` files. With `lookback_s` each day's folder also holds the previous day's last
    `lookback_s` seconds (`lookback-NNNNN.parquet`): the self-contained day of the warehouse raw zone."""
    out_dir = Path(out_dir)
    tails: dict[str, list[pa.Table]] = {}
    for day in spec.day_list:
        staged = {
            table: _staging_dir(_day_dir(out_dir, table, spec.cluster, day))
            for table in ("raw_dcgm_samples", "raw_kube_samples")
        }
        for table, parts in tails.items():
            for i, part in enumerate(parts):
                atomic_write_parquet(staged[table] / paths.LOOKBACK_FILE.format(index=i), part)
        tails = {table: [] for table in staged}
        end_ms = (epoch(day) + DAY_S) * 1000
        ctx = build_day(spec, day)
        single = len(ctx.layout.nodes) <= nodes_per_part
        # The DCGM rows in the order the raw zone stores them, as a tool that writes it would.
        for i, part in enumerate(day_parts(ctx, nodes_per_part, gpu_order=True)):
            for table, rows in (("raw_dcgm_samples", part.dcgm), ("raw_kube_samples", part.kube)):
                name = paths.DATA_FILE if single and not lookback_s else paths.PART_FILE.format(index=i)
                atomic_write_parquet(staged[table] / name, rows)
                if lookback_s:
                    ts = rows.column("ts_ms")
                    tails[table].append(rows.filter(pc.greater_equal(ts, end_ms - lookback_s * 1000)))
        for table, folder in staged.items():
            _swap_in(folder, _day_dir(out_dir, table, spec.cluster, day))
        _write_k8s_day(ctx, _day_dir(out_dir, paths.K8S, spec.cluster, day))
        if progress:
            progress(day)


def _day_dir(out_dir: Path, table: str, cluster: str, day: date) -> Path:
    return paths.partition_dir(out_dir / table, cluster, day)


def _write_k8s_day(ctx: DayContext, final: Path) -> None:
    """The day's DRA objects (gpumeter/ingest/k8s_objects.py): with dra_snapshots_s, the snapshot job's
    time-named files `resourceclaims-<time>.json` / `resourceslices-<time>.json`; else one plain list per
    kind (a snapshot of unknown time). The folder is replaced whole, so no file of an earlier layout
    lingers."""
    spec, day = ctx.spec, ctx.day
    staged = _staging_dir(final)
    if spec.dra_snapshots_s:
        for kind, snapshots in (
            (paths.RESOURCE_CLAIMS, claim_snapshots(spec, day, ctx.pods)),
            (paths.RESOURCE_SLICES, slice_snapshots(spec, day)),
        ):
            for taken_ms, doc in snapshots:
                text = json.dumps(doc, separators=(",", ":")) + "\n"
                (staged / paths.snapshot_name(kind, taken_ms)).write_text(text, encoding="utf-8")
    else:
        atomic_write_text(
            staged / paths.snapshot_name(paths.RESOURCE_CLAIMS),
            json.dumps(resource_claims(spec, ctx.pods), indent=1) + "\n",
        )
        atomic_write_text(
            staged / paths.snapshot_name(paths.RESOURCE_SLICES),
            json.dumps(resource_slices(spec), indent=1) + "\n",
        )
    _swap_in(staged, final)


def _staging_dir(final: Path) -> Path:
    staging = final.with_name(f".{final.name}.staging")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    return staging


def _swap_in(staging: Path, final: Path) -> None:
    """Replace a day folder by its fully written successor: readers see the old day or the new one."""
    old = final.with_name(f".{final.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        os.replace(final, old)
    os.replace(staging, final)
    shutil.rmtree(old, ignore_errors=True)


def write_openmetrics(spec: FactorySpec, out_path: Path, nodes_per_part: int = 16) -> None:
    """Every day of the spec as one OpenMetrics file for `promtool tsdb create-blocks-from openmetrics`,
    streamed by node groups like `write_parquet`: a series lives on one node, so each series still comes in
    time order, and a fleet's day is never whole in memory (a fleet's kube labels alone overflow one Arrow
    string array)."""
    parts = (
        (part.dcgm, part.kube) for day in spec.day_list for part in iter_day_parts(spec, day, nodes_per_part)
    )
    openmetrics.write_openmetrics(parts, Path(out_path), replicas=ha_replicas(spec))


def ha_replicas(spec: FactorySpec) -> tuple[openmetrics.Replica, ...]:
    """The HA Prometheus pair that scraped the factory (label `prometheus_replica`): with `ha_replicas`,
    replica "a" on the exporters' timestamps and "b" 2 s later, "a" down 10:05-10:20Z and "b" 10:35-10:50Z
    every day (rolling restarts); else none (one scraper). For
    `openmetrics.write_openmetrics(..., replicas=ha_replicas(spec))`: the Parquet source has no replicas."""
    if not spec.ha_replicas:
        return ()
    out: list[openmetrics.Replica] = []
    for name, offset in (("a", 0), ("b", REPLICA_B_OFFSET_MS)):
        lo, hi = REPLICA_GAPS_S[name]
        gaps = tuple(((epoch(d) + lo) * 1000, (epoch(d) + hi) * 1000) for d in spec.day_list)
        out.append(openmetrics.Replica(name, offset_ms=offset, gaps_ms=gaps))
    return tuple(out)
