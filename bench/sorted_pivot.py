"""The DCGM pivot over a narrow, keyed, sorted day: one building block of the single-pass design that
bench/README.md ("What this proves") describes and that is not built.

    .venv/bin/python -m bench.sorted_pivot --work /var/tmp/gb/fleet-1000 [--polars]

From a bench workspace's raw DCGM day it writes one narrow table (one row per raw row: an integer key per
(series, timestamp), a metric code and the value, sorted by key), then times the pivot of that table onto one
row per key: DuckDB's hash aggregation, and with `--polars` polars' group-by on the key marked sorted (polars
holds the whole table in memory: ~4.2 GB at 10,000 GPUs). The values are not judged here (stg_dcgm_judged).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import duckdb

from gpumeter.config import load_config
from gpumeter.ingest.schema import DCGM_METRICS, DCGM_POWER, DCGM_SERIES_LABELS
from gpumeter.models.partition import read_raw_day
from gpumeter.storage.warehouse import Warehouse
from gpumeter_sim import FactorySpec

# A timestamp's offset from the window's start in the key's low bits: 2^27 ms is over 37 hours.
OFFSET_BITS = 27
SERIES_LABELS = ", ".join(DCGM_SERIES_LABELS)
# The readings stg_dcgm_samples pivots onto a series sample; another metric's row has no code (a null).
PIVOTED = (*DCGM_METRICS, DCGM_POWER)


def write_sorted(con: duckdb.DuckDBPyConnection, raw_files: list[str], out: Path) -> int:
    """The raw DCGM rows as (key, metric_code, value), sorted by key; returns the row count."""
    metrics = "[" + ", ".join(f"'{m}'" for m in PIVOTED) + "]"
    con.execute(
        f"""
        copy (
            with raw as (
                select ts_ms, metric, value, hash({SERIES_LABELS}) as series_key from read_parquet({raw_files!r})
            ),
            series as (
                select series_key, row_number() over (order by series_key) - 1 as series_ord
                from (select distinct series_key from raw)
            )
            select
                (s.series_ord << {OFFSET_BITS}) | (r.ts_ms - (select min(ts_ms) from raw)) as key,
                list_position({metrics}, r.metric)::utinyint as metric_code,
                r.value
            from raw as r
            join series as s using (series_key)
            order by key, metric_code
        ) to '{out}' (format parquet)
        """
    )
    count = con.execute(f"select count(*) from '{out}'").fetchone()
    return int(count[0]) if count else 0


def duckdb_pivot(con: duckdb.DuckDBPyConnection, sorted_file: Path) -> int:
    """The pivot by DuckDB's hash aggregation; returns the keys (series samples) made."""
    readings = ", ".join(
        f"max(value) filter (where metric_code = {code}) as m{code}" for code in range(1, len(PIVOTED) + 1)
    )
    con.execute(
        f"""create or replace temp table pivoted as
        select key, {readings}, count(value) filter (where metric_code is not null) as read_values
        from '{sorted_file}' group by key"""
    )
    count = con.execute("select count(*) from pivoted").fetchone()
    return int(count[0]) if count else 0


def polars_pivot(sorted_file: Path) -> tuple[float, float, int]:
    """The pivot by polars' group-by on the key marked sorted: (read s, group-by s, keys made)."""
    import polars as pl

    started = time.perf_counter()
    frame = pl.read_parquet(sorted_file).with_columns(pl.col("key").set_sorted())
    read = time.perf_counter()
    codes = range(1, len(PIVOTED) + 1)
    pivoted = frame.group_by("key", maintain_order=True).agg(
        [pl.col("value").filter(pl.col("metric_code") == code).max().alias(f"m{code}") for code in codes]
        + [pl.col("value").filter(pl.col("metric_code").is_not_null()).count().alias("read_values")]
    )
    return read - started, time.perf_counter() - read, pivoted.height


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Time the DCGM pivot over a narrow, keyed, sorted day (bench/README.md, 'What this proves')."
    )
    parser.add_argument("--work", type=Path, required=True, help="a bench workspace (bench/fleet.py)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--polars", action="store_true", help="also time polars' sorted group-by")
    args = parser.parse_args()
    config = load_config(args.work / "config.yaml")
    warehouse = Warehouse.of(config.warehouse)
    day = FactorySpec().start  # the simulator's first day, which bench/fleet.py meters
    raw_files = [
        str(f) for f in read_raw_day(warehouse, config.clusters[0].name, day).files["raw_dcgm_samples"]
    ]
    scratch = warehouse.scratch_dir("sorted-pivot")
    scratch.mkdir(parents=True, exist_ok=True)
    sorted_file = scratch / "dcgm_sorted.parquet"
    con = duckdb.connect()
    con.execute("set threads to 2")
    con.execute("set memory_limit = ?", [config.warehouse.memory_limit])
    con.execute("set temp_directory = ?", [str(scratch / "tmp")])
    started = time.perf_counter()
    rows = write_sorted(con, raw_files, sorted_file)
    print(
        f"sorted table written (the ingest's work, not metering): {time.perf_counter() - started:.2f} s, {rows:,} rows"
    )
    for _ in range(args.repeat):
        started = time.perf_counter()
        keys = duckdb_pivot(con, sorted_file)
        print(f"DuckDB hash pivot: {time.perf_counter() - started:.2f} s, {keys:,} series samples")
        if args.polars:
            read, grouped, keys = polars_pivot(sorted_file)
            print(
                f"polars sorted group-by: {grouped:.2f} s (+ {read:.2f} s to read), {keys:,} series samples"
            )
    con.close()


if __name__ == "__main__":
    main()
