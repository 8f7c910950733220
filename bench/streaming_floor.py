"""The floor of the one-pass design that bench/README.md names for (a)/(b′) ≤ 4: a day's DCGM rows written sorted
by GPU, time, series and metric at ingest, and the day's per-sample models computed by one pass over each file's
sorted columns (segment reductions in NumPy: no hash table). A measurement, not the meter: it computes what
`stg_dcgm_samples` (the pivot, values judged), `stg_dcgm_series`, `int_gpu_samples` (the per-GPU grouping, mode
runs, energy steps, holders) and `int_mig_instance_samples` compute, and counts the judged rows of the quarantine;
it prices nothing, merges no UUID seen in two files, and with `--store` writes the day's GPU and MIG instance
samples into a DuckDB file, as the models are. tests/test_bench_smoke.py checks it against those models.

    .venv/bin/python -m bench.streaming_floor sort --work /var/tmp/gb/fleet-10000     # the ingest's share, once
    .venv/bin/python -m bench.streaming_floor pass --work /var/tmp/gb/fleet-10000 --store

`sort` writes <work>/sorted/ (every raw column, sorted) and reports its time: what sorting the raw zone after it
is written would cost. `window-keys` times what the Prometheus pull's writer would pay to write each window in
GPU order instead (the same integer argsort it already does, by another key). `pass` reads those files and reports wall and CPU seconds, rows and samples. Run `bench.fleet step
sample_floor` alternated with `pass` for (b′) side by side.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpumeter.config import load_config
from gpumeter.ingest.contract import day_bounds_ms, lookback_ms
from gpumeter.ingest.schema import (
    DCGM_ENERGY,
    DCGM_FB_USED,
    DCGM_GPU_UTIL,
    DCGM_GR_ENGINE_ACTIVE,
    DCGM_POWER,
    DCGM_XID,
)
from gpumeter_sim import FactorySpec

# The metrics read, in name order (the sorted files' order within a sample): a value above its limit is
# clamped to it (utilization) or dropped (a corrupt reading), as stg_dcgm_judged judges it.
LIMITS = {
    DCGM_FB_USED: (1e9, np.nan),
    DCGM_GPU_UTIL: (100.0, 100.0),
    DCGM_POWER: (1e6, np.nan),
    DCGM_ENERGY: (1e18, np.nan),
    DCGM_XID: (np.inf, np.nan),
    DCGM_GR_ENGINE_ACTIVE: (1.0, 1.0),
}
READ = tuple(sorted(LIMITS))
LIMIT_BY_CODE = np.array([LIMITS[m][0] for m in READ] + [np.inf])
CLAMP_BY_CODE = np.array([LIMITS[m][1] for m in READ] + [np.nan])
OBSERVES_CODES = [READ.index(m) for m in (DCGM_GR_ENGINE_ACTIVE, DCGM_GPU_UTIL, DCGM_FB_USED, DCGM_ENERGY)]
COLUMNS = ["series_key", "ts_ms", "metric", "value", "uuid", "gpu_i_id", "gpu_i_profile", "hostname", "pod"]
DICTIONARIES = ["metric", "uuid", "gpu_i_id", "gpu_i_profile", "hostname", "pod"]


def _raw_files(work: Path, day: str) -> list[Path]:
    return sorted((work / "warehouse" / "raw" / "raw_dcgm_samples").glob(f"cluster=*/day={day}/*.parquet"))


def sort_files(work: Path, day: str) -> dict[str, Any]:
    out = work / "sorted"
    out.mkdir(exist_ok=True)
    con = duckdb.connect()
    con.execute("set threads to 2")
    con.execute("set memory_limit = '3GB'")
    started = time.perf_counter()
    rows = 0
    for index, path in enumerate(_raw_files(work, day)):
        target = out / f"part-{index:05d}.parquet"
        con.execute(
            f"copy (select * from read_parquet('{path}') order by uuid, ts_ms, series_key, metric) to '{target}' "
            "(format parquet, compression zstd, row_group_size 1048576)"
        )
        rows += pq.ParquetFile(target).metadata.num_rows
    return {"step": "sort", "wall_s": time.perf_counter() - started, "rows": rows}


def _codes(column: pa.ChunkedArray, names: tuple[str, ...]) -> np.ndarray:
    """Each row's index in `names` (len(names) where it is none of them)."""
    array = column.combine_chunks()
    dictionary = array.dictionary.to_pylist()
    lookup = np.array([names.index(n) if n in names else len(names) for n in dictionary], dtype=np.int8)
    return lookup[array.indices.to_numpy()]


def _indices(column: pa.ChunkedArray) -> np.ndarray:
    """Dictionary indices, -1 for null; within one file, equal strings have equal indices."""
    array = column.combine_chunks()
    return array.indices.fill_null(-1).to_numpy().astype(np.int32)


def _ffill_index(valid: np.ndarray) -> np.ndarray:
    """For each position, the index of the last valid position at or before it (-1: none)."""
    idx = np.where(valid, np.arange(valid.size), -1)
    return np.maximum.accumulate(idx)


def one_file(
    path: Path, start_ms: int, end_ms: int, window_start_ms: int, scrape_ms: int
) -> tuple[dict[str, int], pa.Table, pa.Table]:
    table = pq.read_table(path, columns=COLUMNS, read_dictionary=DICTIONARIES)
    sk = table["series_key"].to_numpy()
    ts = table["ts_ms"].to_numpy()
    metric = _codes(table["metric"], READ)
    value = table["value"].to_numpy(zero_copy_only=False)
    gpu = _indices(table["uuid"])
    instance_id = _indices(table["gpu_i_id"])
    instance = instance_id >= 0
    profile = _indices(table["gpu_i_profile"])
    node = _indices(table["hostname"])
    pod = _indices(table["pod"])

    # The order the pass relies on, checked, not assumed (a raw zone not written by the sorting writer).
    d_gpu, d_ts, d_sk = np.diff(gpu), np.diff(ts), np.diff(sk.view(np.int64)) != 0
    # gpu codes follow first appearance in a file sorted by uuid, so they never decrease
    if not (np.all(d_gpu >= 0) and np.all((d_gpu > 0) | (d_ts >= 0))):
        raise SystemExit(f"{path}: not sorted by GPU and time")

    # Judging (stg_dcgm_judged): rows dropped (outside the day and its lookback, no UUID, MIG labels half
    # there; any metric), rows kept (a metric read, not dropped), their clean values.
    dropped = (ts < window_start_ms) | (ts >= end_ms) | (gpu < 0) | (instance != (profile >= 0))
    keep = (metric < len(READ)) & ~dropped
    first = np.r_[True, (d_gpu != 0) | (d_ts != 0) | d_sk]  # a new (series, time) segment starts
    seg = np.cumsum(first) - 1
    sane = np.isfinite(value) & (value >= 0)
    # The quarantine's judged rows (dropped, a value ignored or clamped; stg_dcgm_quarantine also lists copies
    # deduplicated and nodes merged, which this pass does not look for): counted.
    quarantined_rows = int(dropped.sum()) + int((keep & ~sane).sum())
    seg, metric, value, sane = seg[keep], metric[keep], value[keep], sane[keep]
    row_first = np.flatnonzero(first)  # every segment's first raw row
    clean = np.where(sane, value, np.nan)
    over = clean > LIMIT_BY_CODE[metric]
    quarantined_rows += int(over.sum())
    if over.any():
        clean[over] = CLAMP_BY_CODE[metric[over]]

    # The pivot: one scatter into (segment, metric); the metric codes follow the sort's (name) order, so a
    # metric read twice for one sample is two equal neighbours (kept: the largest value).
    segments = row_first.size
    cell = seg * len(READ) + metric
    pivot = np.full((segments, len(READ)), np.nan)
    present = np.zeros((segments, len(READ)), dtype=bool)
    present.ravel()[cell] = True
    flat = pivot.ravel()
    flat[cell] = clean  # the last of equal neighbours wins; the earlier ones are folded in by max
    twice = np.flatnonzero(cell[1:] == cell[:-1])
    if twice.size:
        np.fmax.at(flat, cell[twice], clean[twice])
    read_values = np.bincount(seg, minlength=segments)
    has_copies = read_values > (~np.isnan(pivot)).sum(axis=1)
    observed = present[:, OBSERVES_CODES].any(axis=1)
    in_pivot = present.any(axis=1)
    gr, util, fb, energy, xid = (
        pivot[:, READ.index(m)]
        for m in (DCGM_GR_ENGINE_ACTIVE, DCGM_GPU_UTIL, DCGM_FB_USED, DCGM_ENERGY, DCGM_XID)
    )
    s_gpu, s_ts, s_inst = gpu[row_first], ts[row_first], instance[row_first]
    s_node, s_pod, s_iid, s_profile = (
        node[row_first],
        pod[row_first],
        instance_id[row_first],
        profile[row_first],
    )
    # The day's series (stg_dcgm_series): each key once, with the labels of its first sample.
    _keys, series_first = np.unique(sk[row_first], return_index=True)
    series_labels = (s_gpu[series_first], s_iid[series_first], s_node[series_first], s_pod[series_first])
    in_pivot = np.bincount(seg, minlength=segments) > 0

    # The GPU's samples (int_gpu_samples' grouping): segments of one GPU and time are adjacent.
    g_first = np.flatnonzero(np.r_[True, (np.diff(s_gpu) != 0) | (np.diff(s_ts) != 0)])
    whole = ~s_inst
    flags = (
        ((np.nan_to_num(xid) != 0) & in_pivot).astype(np.uint8)
        | ((observed & s_inst).astype(np.uint8) << 1)
        | ((observed & whole & (~np.isnan(util) | (s_pod >= 0))).astype(np.uint8) << 2)
        | (observed.astype(np.uint8) << 3)
    )
    g_flags = np.bitwise_or.reduceat(flags, g_first)
    big = np.iinfo(np.int32).max
    g_node = np.minimum.reduceat(np.where(observed, s_node, big), g_first)
    g_first_holder = np.minimum.reduceat(np.where(observed & (s_pod >= 0), s_pod, big), g_first)
    g_last_holder = np.maximum.reduceat(np.where(observed, s_pod, -1), g_first)
    g_energy = np.fmax.reduceat(np.where(whole, energy, np.nan), g_first)
    g_fb = np.fmax.reduceat(np.where(whole, fb, np.nan), g_first)
    g_gr = np.fmax.reduceat(gr, g_first)
    g_util = np.fmax.reduceat(util, g_first)
    g_gpu, g_ts = s_gpu[g_first], s_ts[g_first]
    starts_gpu_sample = np.zeros(segments, dtype=bool)
    starts_gpu_sample[g_first] = True
    seg_gpu_sample = np.cumsum(starts_gpu_sample) - 1  # each segment's GPU sample

    # Observed GPU samples, and the windows over each GPU's time (energy steps, mode runs).
    o = (g_flags & 8) != 0
    g_gpu, g_ts, g_flags, g_energy = g_gpu[o], g_ts[o], g_flags[o], g_energy[o]
    g_node, g_first_holder, g_last_holder, g_fb, g_gr, g_util = (
        g_node[o],
        g_first_holder[o],
        g_last_holder[o],
        g_fb[o],
        g_gr[o],
        g_util[o],
    )
    new_gpu = np.r_[True, g_gpu[1:] != g_gpu[:-1]]
    prev_ts = np.r_[-1, g_ts[:-1]]
    prev_ts[new_gpu] = -1
    last_energy = _ffill_index(~np.isnan(g_energy))
    prev_energy_at = np.r_[-1, last_energy[:-1]]
    gpu_start = np.maximum.accumulate(np.where(new_gpu, np.arange(g_gpu.size), 0))
    prev_energy_at[prev_energy_at < gpu_start] = -1
    prev_energy = np.where(prev_energy_at >= 0, g_energy[np.maximum(prev_energy_at, 0)], np.nan)
    step = g_energy - prev_energy
    energy_step = np.where(np.isnan(g_energy) | np.isnan(step), 0, np.where(step >= 0, step, g_energy))
    run_start = new_gpu | (prev_ts < 0) | (g_ts - prev_ts > 2 * scrape_ms)
    shows = np.where((g_flags & 2) != 0, 1, np.where((g_flags & 4) != 0, 0, -1)).astype(np.int8)
    decided = _ffill_index(shows >= 0)
    run_begin = np.maximum.accumulate(np.where(run_start, np.arange(g_gpu.size), 0))
    is_mig = (decided >= run_begin) & (shows[np.maximum(decided, 0)] == 1)
    in_day = (g_ts >= start_ms) & (g_ts < end_ms)
    busy = np.clip(np.where(np.isnan(g_gr), g_util / 100.0, g_gr), 0.0, 1.0)
    holder = np.where(g_first_holder == g_last_holder, g_first_holder, -1)
    repeats = (prev_ts >= 0) & (g_ts - prev_ts <= scrape_ms // 2)

    # The MIG instances' samples (int_mig_instance_samples): an instance's series at a GPU sample where the GPU
    # is MIG-partitioned; copies of one instance (vgpu) are one sample.
    gpu_samples_all = g_first.size
    kept_at = np.flatnonzero(o)
    mig_all = np.zeros(gpu_samples_all, dtype=bool)
    mig_all[kept_at] = is_mig & in_day
    step_all = np.zeros(gpu_samples_all, dtype=np.int64)
    step_all[kept_at] = np.round(energy_step).astype(np.int64)
    at = np.flatnonzero(s_inst & observed & mig_all[seg_gpu_sample])
    key = seg_gpu_sample[at].astype(np.int64) * 4096 + s_iid[at]
    if at.size and not np.all(key[1:] >= key[:-1]):
        order = np.argsort(key, kind="stable")
        at, key = at[order], key[order]
    i_first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if at.size else at
    i_rows = at[i_first]
    if at.size:
        i_gr, i_util, i_fb = (np.fmax.reduceat(column[at], i_first) for column in (gr, util, fb))
        i_low, i_high = np.minimum.reduceat(s_pod[at], i_first), np.maximum.reduceat(s_pod[at], i_first)
    else:
        i_gr = i_util = i_fb = np.zeros(0)
        i_low = i_high = np.zeros(0, dtype=np.int32)
    instance_rows = pa.table(
        {
            "gpu": s_gpu[i_rows],
            "instance": s_iid[i_rows],
            "ts_ms": s_ts[i_rows],
            "profile": s_profile[i_rows],
            "busy": np.clip(np.where(np.isnan(i_gr), i_util / 100.0, i_gr), 0.0, 1.0),
            "fb_used_mib": i_fb,
            "energy_mj": step_all[seg_gpu_sample[i_rows]],
            "holder": np.where(i_low == i_high, i_low, -1),
        }
    )

    # The GPU samples of the day as int_gpu_samples holds them (less the price columns), for the store.
    day_rows = pa.table(
        {
            "gpu": g_gpu[in_day],
            "ts_ms": g_ts[in_day],
            "node": g_node[in_day],
            "is_mig": is_mig[in_day],
            "unhealthy": (g_flags[in_day] & 1) != 0,
            "energy_mj": np.round(energy_step[in_day]).astype(np.int64),
            "busy": busy[in_day],
            "fb_used_mib": g_fb[in_day],
            "holder": holder[in_day],
            "repeats_scrape": repeats[in_day],
        }
    )
    counts = {
        "raw_rows": int(ts.size),
        "series_samples": int(in_pivot.sum()),
        "series_samples_with_copies": int(has_copies.sum()),
        "gpu_samples_in_day": int(in_day.sum()),
        "mig_gpu_samples_in_day": int((is_mig & in_day).sum()),
        "held_gpu_samples_in_day": int(((holder >= 0) & in_day).sum()),
        "repeated": int(repeats.sum()),
        "energy_mj": int(np.round(energy_step[in_day]).sum()),
        "busy_sum_x1e6": int(np.round(np.nansum(busy[in_day]) * 1e6)),
        "nodes": int(np.unique(g_node[in_day]).size),
    }
    counts |= {
        "series": int(series_labels[0].size),
        "judged_rows_quarantined": quarantined_rows,
        "mig_instance_samples": instance_rows.num_rows,
        "held_mig_instance_samples": int(pc.sum(pc.greater_equal(instance_rows["holder"], 0)).as_py() or 0),
        "mig_busy_sum_x1e6": int(np.round((pc.sum(instance_rows["busy"]).as_py() or 0.0) * 1e6)),
    }
    return counts, day_rows, instance_rows


def run_pass(work: Path, day: str, threads: int, store: bool) -> dict[str, Any]:
    start_ms, end_ms = day_bounds_ms(date.fromisoformat(day))
    config = load_config(work / "config.yaml")
    cluster = config.clusters[0].name
    scrape_ms = config.scrape_interval_of(cluster) * 1000
    window_start_ms = start_ms - lookback_ms(config, cluster)
    totals: dict[str, int] = {}
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    files = sorted((work / "sorted").glob("*.parquet"))
    database = work / ".streaming-floor.duckdb"
    database.unlink(missing_ok=True)
    con = duckdb.connect(str(database))  # a database file, as the runner's models are
    con.execute("set threads to 2")
    con.execute("set memory_limit = '3GB'")
    # One file per thread: NumPy and Arrow release the GIL in their loops, and (b′) runs on two threads.
    with ThreadPoolExecutor(threads) as pool:
        for counts, day_rows, instance_rows in pool.map(
            lambda p: one_file(p, start_ms, end_ms, window_start_ms, scrape_ms), files
        ):
            for key, count in counts.items():
                totals[key] = totals.get(key, 0) + count
            if store:
                for name, rows in (("gpu_samples", day_rows), ("instance_samples", instance_rows)):
                    verb = f"insert into {name}" if name in totals else f"create table {name} as"
                    totals[name] = 1
                    con.register("rows", rows)
                    con.execute(f"{verb} select * from rows")
                    con.unregister("rows")
    if store:
        for name in ("gpu_samples", "instance_samples"):
            totals[name] = con.sql(f"select count(*) from {name}").fetchall()[0][0]
    con.close()
    database.unlink(missing_ok=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "step": "streaming_pass",
        "threads": threads,
        "store": store,
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_mib": after.ru_maxrss / 1024,
        **totals,
    }


def window_keys(work: Path, day: str, window_s: int = 3600) -> dict[str, Any]:
    """The writer's share, made by construction: per pull window, rows laid out series by series in time order
    (as the Prometheus pull holds them), one stable int64 argsort by the pull's own key (ts, series rank;
    gpumeter.ingest.prometheus.answers._sorted_rows) against the same argsort by a GPU-major key (GPU rank,
    ts, series rank). A pulled series is one (series key, metric); the ranks are made once per series,
    untimed. It holds the whole day in memory: run it at 1,000 GPUs, not 10,000."""
    start_ms, end_ms = day_bounds_ms(date.fromisoformat(day))
    config = load_config(work / "config.yaml")
    window_start_ms = start_ms - lookback_ms(config, config.clusters[0].name)
    table = pa.concat_tables(
        pq.read_table(f, columns=["series_key", "ts_ms", "metric", "uuid"]) for f in _raw_files(work, day)
    )
    seconds = {"pull_key_argsort_s": 0.0, "gpu_major_key_argsort_s": 0.0}
    for w0 in range(window_start_ms, end_ms, window_s * 1000):
        w1 = min(w0 + window_s * 1000, end_ms)
        window = table.filter(pc.and_(pc.greater_equal(table["ts_ms"], w0), pc.less(table["ts_ms"], w1)))
        window = window.sort_by(
            [("series_key", "ascending"), ("metric", "ascending"), ("ts_ms", "ascending")]
        )
        sk = window["series_key"].to_numpy().view(np.int64)
        ts = window["ts_ms"].to_numpy()
        metric = _indices(pc.dictionary_encode(window["metric"]))
        uuid = pc.dictionary_encode(window["uuid"]).combine_chunks()
        new = np.r_[True, (np.diff(sk) != 0) | (np.diff(metric) != 0)]
        series = np.cumsum(new) - 1
        first = np.flatnonzero(new)
        count = first.size
        by_name = np.argsort(np.asarray(uuid.dictionary.to_pylist(), dtype=object))
        gpu_rank_of_code = np.empty_like(by_name)
        gpu_rank_of_code[by_name] = np.arange(by_name.size)
        gpu = gpu_rank_of_code[uuid.indices.to_numpy()[first]].astype(np.int64)
        pull_rank = np.empty(count, np.int64)
        pull_rank[np.argsort(metric[first], kind="stable")] = np.arange(count)
        gpu_rank = np.empty(count, np.int64)
        gpu_rank[np.lexsort((metric[first], sk[first], gpu))] = np.arange(count)
        low, span = int(ts.min()), int(ts.max()) - int(ts.min()) + 1
        started = time.perf_counter()
        np.argsort((ts - low) * count + pull_rank[series], kind="stable")
        seconds["pull_key_argsort_s"] += time.perf_counter() - started
        started = time.perf_counter()
        order = np.argsort((gpu[series] * span + (ts - low)) * count + gpu_rank[series], kind="stable")
        seconds["gpu_major_key_argsort_s"] += time.perf_counter() - started
        # The order the pass needs (checked, untimed): by GPU, then time, then series and metric.
        in_order = gpu[series][order], ts[order], gpu_rank[series][order]
        steps = [np.diff(column) for column in in_order]
        if not np.all((steps[0] > 0) | (steps[0] == 0) & ((steps[1] > 0) | (steps[1] == 0) & (steps[2] > 0))):
            raise AssertionError(f"window at {w0}: the GPU-major key does not give GPU, time, series order")
    return {
        "step": "window_keys",
        "rows": table.num_rows,
        "window_s": window_s,
        "gpu_order_checked": True,
        **seconds,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.streaming_floor", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("what", choices=("sort", "pass", "window-keys"))
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--day", default=FactorySpec().start.isoformat())
    parser.add_argument("--threads", type=int, default=2, help="files passed at once (pass)")
    parser.add_argument(
        "--store",
        action="store_true",
        help="store the day's GPU and MIG instance samples in a DuckDB file (pass)",
    )
    args = parser.parse_args(argv)
    if args.what == "sort":
        result = sort_files(args.work, args.day)
    elif args.what == "pass":
        result = run_pass(args.work, args.day, args.threads, args.store)
    else:
        result = window_keys(args.work, args.day)
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
