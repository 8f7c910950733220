"""The floor of the one-pass design that bench/README.md names for (a)/(b′) ≤ 4: a day's DCGM rows written sorted
by GPU, time, series and metric at ingest, and the day's per-sample models computed by one pass over each file's
sorted columns (segment reductions in NumPy: no hash table). A measurement, not the meter. It computes what
`stg_dcgm_samples` (the pivot, values judged), `stg_dcgm_series`, `int_gpu_samples` (the per-GPU grouping, mode
runs, energy steps, holders, prices, unschedulable nodes) and `int_mig_instance_samples` (weights, prices)
compute, and what the models left in SQL would read from the series samples it does not store: the series holders
of shared device samples, vgpu copies that disagree, and readings written twice. It counts the judged rows of
the quarantine, GPU samples reported by two nodes and GPUs whose rows are in two files (not merged). With
`--store` it writes the day's GPU and MIG instance samples and the shared samples' holders into a DuckDB file,
as the models are. `check` runs it and the models over one workspace's day and compares their counts and sums;
tests/test_bench_smoke.py does so in CI.

    .venv/bin/python -m bench.streaming_floor sort --work /var/tmp/gb/fleet-10000     # the ingest's share, once
    .venv/bin/python -m bench.streaming_floor inputs --work /var/tmp/gb/fleet-10000   # classes and spans, once
    .venv/bin/python -m bench.streaming_floor pass --work /var/tmp/gb/fleet-10000 --store
    .venv/bin/python -m bench.streaming_floor check --work /var/tmp/gb/fleet-1000

`sort` writes <work>/sorted/ (every raw column, sorted) and reports its time: what sorting the raw zone after it
is written would cost (a file already in GPU order, as the raw zone now stores DCGM rows, is linked as it is).
`inputs` runs the models the pass reads (device classes, OpenCost price spans, unschedulable spans: they run
before it in (a)) and writes them to <work>/floor-inputs/, untimed.
`window-keys` times what the Prometheus pull's writer would pay to write each window in GPU order instead (the
same integer argsort it already does, by another key). `pass` reads the sorted files and reports wall and CPU
seconds, rows and samples. `downstream` meters the day with the models' own GPU and MIG instance samples
given as DuckDB tables or Parquet views (`--stored setup` writes them once): what the models after the pass
cost either way. `pass --store hourly` carries the pass on to the grain the marts sum (each file's GPU and MIG
instance samples summed per device, holder and hour, nothing per sample stored) and `rest` meters the models no
DCGM row reaches: together, the floor of a design that stores nothing per sample, without the billing rules
it would still apply. `pass --store compressed --bucket-s N` compresses each file's samples instead: a device's
samples in one N-second bucket that agree on every key the later models read become one row with their count
and sums, and `downstream --bucket-s N` meters the later SQL models over the models' own two tables so
compressed (`--stored setup --bucket-s N` compresses them once): the floor of the compressed-samples design,
which keeps the billing rules in SQL. `cuts` counts the span boundaries inside the day that such rows would
also be cut at. Run `bench.fleet step sample_floor` alternated with `pass` for (b′) side by side
(`bench.cores` runs every step so).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.profile import meter_workspace_day, model_timer
from gpumeter.config import load_config
from gpumeter.ingest.contract import day_bounds_ms, lookback_ms
from gpumeter.ingest.row_order import DCGM_ROW_ORDER, in_gpu_order
from gpumeter.ingest.schema import (
    DCGM_ENERGY,
    DCGM_FB_USED,
    DCGM_GPU_UTIL,
    DCGM_GR_ENGINE_ACTIVE,
    DCGM_POWER,
    DCGM_XID,
)
from gpumeter.models.project import load_models, reads
from gpumeter.models.python_models import SAMPLE_PASS_MODELS
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
COLUMNS = [
    "series_key",
    "ts_ms",
    "metric",
    "value",
    "uuid",
    "gpu_i_id",
    "gpu_i_profile",
    "hostname",
    "pod",
    "model_name",
    "vgpu",
]
DICTIONARIES = ["metric", "uuid", "gpu_i_id", "gpu_i_profile", "hostname", "pod", "model_name", "vgpu"]
# The models the pass reads its prices, weights and node spans from: they run before it, as in (a).
INPUT_MODELS = ("int_device_classes", "int_node_gpu_price_spans", "int_node_unschedulable_spans")
BIG = np.iinfo(np.int32).max


def _raw_files(work: Path, day: str) -> list[Path]:
    return sorted((work / "warehouse" / "raw" / "raw_dcgm_samples").glob(f"cluster=*/day={day}/*.parquet"))


def _session(database: Path | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB session with the threads (2) and memory limit of a metering run, in memory or on `database`."""
    con = duckdb.connect(str(database) if database else ":memory:")
    con.execute("set threads to 2")
    con.execute("set memory_limit = '3GB'")
    return con


def sort_files(work: Path, day: str) -> dict[str, Any]:
    """<work>/sorted/: each raw file in GPU order. A file the simulator wrote in that order already (as it does
    since the raw zone stores DCGM rows so) is linked, not rewritten; the time is the rewriting's."""
    out = work / "sorted"
    out.mkdir(exist_ok=True)
    con = _session()
    wall_s, rows, linked = 0.0, 0, 0
    for index, path in enumerate(_raw_files(work, day)):
        target = out / f"part-{index:05d}.parquet"
        target.unlink(missing_ok=True)
        if in_gpu_order(pq.read_table(path, columns=list(DCGM_ROW_ORDER))):
            target.hardlink_to(path)
            linked += 1
        else:
            started = time.perf_counter()
            con.execute(
                f"copy (select * from read_parquet('{path}') order by {', '.join(DCGM_ROW_ORDER)}) to '{target}' "
                "(format parquet, compression zstd, row_group_size 1048576)"
            )
            wall_s += time.perf_counter() - started
        rows += pq.ParquetFile(target).metadata.num_rows
    return {"step": "sort", "wall_s": wall_s, "rows": rows, "files_already_in_gpu_order": linked}


def compute_inputs(work: Path, day: str) -> dict[str, Any]:
    """Run the input models alone (and what they read) over the day, untimed, and write them for the pass as
    <work>/floor-inputs/<model>.parquet."""
    tables = meter_workspace_day(work, date.fromisoformat(day), "streaming-floor", select=INPUT_MODELS)
    out = work / "floor-inputs"
    out.mkdir(exist_ok=True)
    for name in INPUT_MODELS:
        pq.write_table(tables[name], out / f"{name}.parquet")
    return {"step": "inputs", **{name: tables[name].num_rows for name in INPUT_MODELS}}


def _spans_by_node(table: pa.Table, value: str | None) -> dict[str, tuple[np.ndarray, ...]]:
    """{node: (from_ms, until_ms[, value])}, each node's spans by start (disjoint per node)."""
    spans: dict[str, list[tuple[int, int, float]]] = {}
    for row in table.to_pylist():
        spans.setdefault(row["node"], []).append(
            (row["from_ms"], row["until_ms"], row[value] if value else 0.0)
        )
    out: dict[str, tuple[np.ndarray, ...]] = {}
    for node, rows in spans.items():
        rows.sort()
        out[node] = (
            np.array([r[0] for r in rows], np.int64),
            np.array([r[1] for r in rows], np.int64),
            np.array([r[2] for r in rows], np.float64),
        )
    return out


@dataclass(frozen=True)
class DayInputs:
    """What the pass reads from the models that run before it: each device class's weight and prices (the rate
    card's, exact: int_device_classes) and each node's OpenCost price spans and unschedulable spans."""

    classes: dict[tuple[str, str | None], tuple[float, int | None, int | None]]
    price_spans: dict[str, tuple[np.ndarray, ...]]
    unschedulable: dict[str, tuple[np.ndarray, ...]]

    @classmethod
    def load(cls, work: Path) -> DayInputs:
        read = {name: pq.read_table(work / "floor-inputs" / f"{name}.parquet") for name in INPUT_MODELS}
        classes = {
            (r["model_name"], r["mig_profile"]): (r["weight"], r["gpu_price_units"], r["device_price_units"])
            for r in read["int_device_classes"].to_pylist()
        }
        return cls(
            classes,
            _spans_by_node(read["int_node_gpu_price_spans"], "gpu_price_per_hour"),
            _spans_by_node(read["int_node_unschedulable_spans"], None),
        )


def _in_spans(
    spans: dict[str, tuple[np.ndarray, ...]], node_names: list[str], node: np.ndarray, ts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each (node code, ts), whether a span of the node holds ts, and that span's value (nan: none). One
    searchsorted over every node's spans at once: (node code, start) as one int64 key."""
    starts, ends, values, codes = [], [], [], []
    for code, name in enumerate(node_names):
        if name in spans:
            f, u, v = spans[name]
            starts.append(f), ends.append(u), values.append(v), codes.append(np.full(f.size, code, np.int64))
    if not starts:
        return np.zeros(ts.size, dtype=bool), np.full(ts.size, np.nan)
    shift = np.int64(1) << np.int64(42)  # epoch ms stay below 2^42 until the year 2109
    span_key = np.concatenate(codes) * shift + np.concatenate(starts)
    order = np.argsort(span_key, kind="stable")
    span_key, until = span_key[order], np.concatenate(ends)[order]
    span_value, span_node = np.concatenate(values)[order], np.concatenate(codes)[order]
    at = np.searchsorted(span_key, node.astype(np.int64) * shift + ts, side="right") - 1
    found = at >= 0
    at = np.maximum(at, 0)
    held = found & (span_node[at] == node) & (ts < until[at])
    value = np.where(held, span_value[at], np.nan)
    return held, value


def _codes(column: pa.ChunkedArray, names: tuple[str, ...]) -> np.ndarray:
    """Each row's index in `names` (len(names) where it is none of them)."""
    array = column.combine_chunks()
    dictionary = array.dictionary.to_pylist()
    lookup = np.array([names.index(n) if n in names else len(names) for n in dictionary], dtype=np.int8)
    return lookup[array.indices.to_numpy()]


def _coded(column: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Dictionary indices (-1 for null; within one file, equal strings have equal indices) and the
    dictionary's strings."""
    array = column.combine_chunks()
    return array.indices.fill_null(-1).to_numpy().astype(np.int32), array.dictionary.to_pylist()


def _by_name(names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(rank of each code by name, code of each rank): a least key by name is a least rank (stg_dcgm_series
    ranks its keys in name order)."""
    code_of_rank = np.argsort(np.asarray(names, dtype=object)).astype(np.int32)
    rank_of_code = np.empty_like(code_of_rank)
    rank_of_code[code_of_rank] = np.arange(code_of_rank.size, dtype=np.int32)
    return rank_of_code, code_of_rank


def _ranked(rank_of_code: np.ndarray, codes: np.ndarray, where: np.ndarray, none: int) -> np.ndarray:
    """Each code's rank where `where` and the code is not null, else `none` (for a min or max to skip)."""
    if rank_of_code.size == 0:
        return np.full(codes.size, none, np.int32)
    return np.where(where & (codes >= 0), rank_of_code[np.maximum(codes, 0)], none).astype(np.int32)


def _code_at(code_of_rank: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """The code of each rank, -1 where the rank is BIG (none was ranked)."""
    if code_of_rank.size == 0:
        return np.full(rank.size, -1, np.int32)
    return np.where(rank < BIG, code_of_rank[np.minimum(rank, code_of_rank.size - 1)], -1).astype(np.int32)


def _indices(column: pa.ChunkedArray) -> np.ndarray:
    return _coded(column)[0]


def _ffill_index(valid: np.ndarray) -> np.ndarray:
    """For each position, the index of the last valid position at or before it (-1: none)."""
    idx = np.where(valid, np.arange(valid.size), -1)
    return np.maximum.accumulate(idx)


def one_file(
    path: Path, start_ms: int, end_ms: int, window_start_ms: int, scrape_ms: int, inputs: DayInputs
) -> tuple[dict[str, int], dict[str, pa.Table], frozenset[str]]:
    table = pq.read_table(path, columns=COLUMNS, read_dictionary=DICTIONARIES)
    sk = table["series_key"].to_numpy()
    ts = table["ts_ms"].to_numpy()
    metric = _codes(table["metric"], READ)
    value = table["value"].to_numpy(zero_copy_only=False)
    gpu, gpu_names = _coded(table["uuid"])
    instance_id = _indices(table["gpu_i_id"])
    instance = instance_id >= 0
    profile, profile_names = _coded(table["gpu_i_profile"])
    node, node_names = _coded(table["hostname"])
    model, model_names = _coded(table["model_name"])
    pod = _indices(table["pod"])
    vgpu = _indices(table["vgpu"]) >= 0
    node_rank, node_of_rank = _by_name(node_names)
    model_rank, model_of_rank = _by_name(model_names)
    profile_rank, profile_of_rank = _by_name(profile_names)

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
    # The quarantine's judged rows (dropped, a value ignored or clamped): counted. Readings written twice
    # (rows) and GPU samples seen on two nodes, its other reasons, are counted below.
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
    s_node, s_pod, s_iid, s_profile, s_model, s_vgpu = (
        node[row_first],
        pod[row_first],
        instance_id[row_first],
        profile[row_first],
        model[row_first],
        vgpu[row_first],
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
    # The first node and model by name of the sample's observed series (min(node_key), min(model_key)).
    g_node_rank = np.minimum.reduceat(_ranked(node_rank, s_node, observed, BIG), g_first)
    g_node_last = np.maximum.reduceat(_ranked(node_rank, s_node, observed, -1), g_first)
    g_model_rank = np.minimum.reduceat(_ranked(model_rank, s_model, observed, BIG), g_first)
    g_node, g_model = _code_at(node_of_rank, g_node_rank), _code_at(model_of_rank, g_model_rank)
    g_several_nodes = (g_node_last >= 0) & (g_node_last > g_node_rank)
    g_first_holder = np.minimum.reduceat(np.where(observed & (s_pod >= 0), s_pod, BIG), g_first)
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
    several_nodes = int((o & g_several_nodes).sum())
    g_gpu, g_ts, g_flags, g_energy, g_model = g_gpu[o], g_ts[o], g_flags[o], g_energy[o], g_model[o]
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
    # Prices (int_gpu_samples' `priced`): the class of the GPU's model (the rate card's, exact), else the
    # node's OpenCost price span at the sample; and whether the node is unschedulable then. A sample of no
    # known model has no class, and the inner join leaves it out.
    class_gpu = np.full(len(model_names) + 1, np.nan)
    class_device = np.full(len(model_names) + 1, np.nan)
    known = np.zeros(len(model_names) + 1, dtype=bool)
    for code, name in enumerate(model_names):
        if (name, None) in inputs.classes:
            _weight, gpu_units, device_units = inputs.classes[(name, None)]
            known[code] = True
            class_gpu[code] = np.nan if gpu_units is None else gpu_units
            class_device[code] = np.nan if device_units is None else device_units
    _, span_price = _in_spans(inputs.price_spans, node_names, g_node, g_ts)
    gpu_units = np.where(np.isnan(class_gpu[g_model]), np.round(span_price * 1e8), class_gpu[g_model])
    price_units = np.where(np.isnan(class_device[g_model]), gpu_units, class_device[g_model])
    unschedulable, _ = _in_spans(inputs.unschedulable, node_names, g_node, g_ts)
    priced = known[g_model] & (g_model >= 0)

    # The MIG instances' samples (int_mig_instance_samples): an instance's series at a GPU sample where the GPU
    # is MIG-partitioned; copies of one instance (vgpu) are one sample.
    gpu_samples_all = g_first.size
    kept_at = np.flatnonzero(o)

    def over_all(values: np.ndarray, fill: Any) -> np.ndarray:
        """A per-observed-GPU-sample column, indexed by every GPU sample (observed or not)."""
        out = np.full(gpu_samples_all, fill, dtype=values.dtype)
        out[kept_at] = values
        return out

    mig_all = over_all(is_mig & in_day & priced, False)
    step_all = over_all(energy_step, 0.0)
    gpu_units_all = over_all(gpu_units, np.nan)
    unschedulable_all = over_all(unschedulable, False)
    unhealthy_all = over_all((g_flags & 1) != 0, False)
    fb_all = over_all(g_fb, np.nan)
    at = np.flatnonzero(s_inst & observed & mig_all[seg_gpu_sample])
    key = seg_gpu_sample[at].astype(np.int64) * 4096 + s_iid[at]
    if at.size and not np.all(key[1:] >= key[:-1]):
        order = np.argsort(key, kind="stable")
        at, key = at[order], key[order]
    i_first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if at.size else at
    i_rows = at[i_first]
    if at.size:
        i_gr, i_util, i_fb = (np.fmax.reduceat(column[at], i_first) for column in (gr, util, fb))
        i_low = np.minimum.reduceat(np.where(s_pod[at] >= 0, s_pod[at], BIG), i_first)
        i_high = np.maximum.reduceat(s_pod[at], i_first)
        i_model = np.minimum.reduceat(_ranked(model_rank, s_model[at], np.ones(at.size, bool), BIG), i_first)
        i_profile = np.minimum.reduceat(
            _ranked(profile_rank, s_profile[at], np.ones(at.size, bool), BIG), i_first
        )
    else:
        i_gr = i_util = i_fb = np.zeros(0)
        i_low = i_high = i_model = i_profile = np.zeros(0, dtype=np.int32)
    # The instance's class (model, profile): its weight, and its own price or its GPU's.
    i_weight = np.full(i_rows.size, np.nan)
    i_device_units = np.full(i_rows.size, np.nan)
    pairs = i_model.astype(np.int64) * (len(profile_names) + 1) + i_profile
    for pair in np.unique(pairs):
        m, pr = divmod(int(pair), len(profile_names) + 1)
        if m >= len(model_names) or pr >= len(profile_names):
            continue
        found = inputs.classes.get((model_names[model_of_rank[m]], profile_names[profile_of_rank[pr]]))
        if found is not None:
            here = pairs == pair
            i_weight[here] = found[0]
            i_device_units[here] = np.nan if found[2] is None else found[2]
    i_classed = ~np.isnan(i_weight)
    i_gpu_sample = seg_gpu_sample[i_rows]
    instance_rows = pa.table(
        {
            "gpu": s_gpu[i_rows],
            "instance": s_iid[i_rows],
            "ts_ms": s_ts[i_rows],
            "profile": s_profile[i_rows],
            "weight": i_weight,
            "price_units": np.where(np.isnan(i_device_units), gpu_units_all[i_gpu_sample], i_device_units),
            "busy": np.clip(np.where(np.isnan(i_gr), i_util / 100.0, i_gr), 0.0, 1.0),
            "fb_used_mib": np.where(np.isnan(i_fb), fb_all[i_gpu_sample] * i_weight, i_fb),
            "unhealthy": unhealthy_all[i_gpu_sample],
            "energy_joules": step_all[i_gpu_sample] / 1000.0 * i_weight,
            "energy_mj": np.round(step_all[i_gpu_sample]).astype(np.int64),
            "unschedulable": unschedulable_all[i_gpu_sample],
            "holder": np.where(i_low == i_high, i_low, -1),
        }
    ).filter(pa.array(i_classed))

    # What the models left in SQL read from the series samples, which the pass does not store: the series
    # holders of shared device samples (int_keyed_device_holders), device samples whose vgpu copies disagree
    # (int_vgpu_copy_conflicts), and the count of rows that copy a reading (int_dcgm_quarantine).
    shared_gpu = over_all(
        in_day & priced & ~is_mig & (g_first_holder < BIG) & (g_first_holder != g_last_holder), False
    )
    holder_rows = np.flatnonzero(observed & ~s_inst & (s_pod >= 0) & shared_gpu[seg_gpu_sample])
    i_shared = np.flatnonzero((i_low < BIG) & (i_low != i_high) & i_classed)
    instance_of_row = np.repeat(np.arange(i_first.size), np.diff(np.r_[i_first, at.size])) if at.size else at
    shared_instance = np.zeros(i_first.size, dtype=bool)
    shared_instance[i_shared] = True
    shared_instance_rows = at[shared_instance[instance_of_row] & (s_pod[at] >= 0)] if at.size else at
    holder_pairs = np.unique(
        np.r_[
            seg_gpu_sample[holder_rows].astype(np.int64) * 2**32 * 4096 + s_pod[holder_rows],
            (seg_gpu_sample[shared_instance_rows].astype(np.int64) * 4096 + 1 + s_iid[shared_instance_rows])
            * 2**32
            + s_pod[shared_instance_rows],
        ]
    )
    copies = np.flatnonzero(s_vgpu & (s_ts >= start_ms) & (s_ts < end_ms))
    conflicts = 0
    if copies.size:
        device = seg_gpu_sample[copies].astype(np.int64) * 4096 + 1 + s_iid[copies]
        order = np.argsort(device, kind="stable")
        copies, device = copies[order], device[order]
        d_first = np.flatnonzero(np.r_[True, device[1:] != device[:-1]])
        disagree = np.zeros(d_first.size, dtype=bool)
        for column in (gr, util):
            disagree |= np.fmin.reduceat(column[copies], d_first) < np.fmax.reduceat(column[copies], d_first)
        conflicts = int(disagree.sum())

    # The GPU samples of the day as int_gpu_samples holds them, for the store.
    stored = in_day & priced
    day_rows = pa.table(
        {
            "gpu": g_gpu[stored],
            "ts_ms": g_ts[stored],
            "node": g_node[stored],
            "is_mig": is_mig[stored],
            "unhealthy": (g_flags[stored] & 1) != 0,
            "gpu_price_units": gpu_units[stored],
            "price_units": price_units[stored],
            "energy_mj": np.round(energy_step[stored]).astype(np.int64),
            "busy": busy[stored],
            "fb_used_mib": g_fb[stored],
            "unschedulable": unschedulable[stored],
            "holder": holder[stored],
            "repeats_scrape": repeats[stored],
        }
    )
    counts = {
        "raw_rows": int(ts.size),
        "series_samples": int(in_pivot.sum()),
        "series_samples_with_copies": int(has_copies.sum()),
        "copied_reading_rows": int(twice.size),
        "gpu_samples_in_day": int(stored.sum()),
        "mig_gpu_samples_in_day": int((is_mig & stored).sum()),
        "held_gpu_samples_in_day": int(((holder >= 0) & stored).sum()),
        "repeated": int(repeats.sum()),
        "energy_mj": int(np.round(energy_step[stored]).sum()),
        "busy_sum_x1e6": int(np.round(np.nansum(busy[stored]) * 1e6)),
        "nodes": int(np.unique(g_node[stored]).size),
        "price_units": int(price_units[stored].sum()),
        "unschedulable_gpu_samples": int(unschedulable[stored].sum()),
        "gpu_samples_on_several_nodes": several_nodes,
        "shared_holder_pairs": int(holder_pairs.size),
        "vgpu_copy_conflicts": conflicts,
    }
    counts |= {
        "series": int(series_labels[0].size),
        "judged_rows_quarantined": quarantined_rows,
        "mig_instance_samples": instance_rows.num_rows,
        "held_mig_instance_samples": int(pc.sum(pc.greater_equal(instance_rows["holder"], 0)).as_py() or 0),
        "mig_busy_sum_x1e6": int(np.round((pc.sum(instance_rows["busy"]).as_py() or 0.0) * 1e6)),
        "mig_price_units": int(pc.sum(instance_rows["price_units"]).as_py() or 0),
        "mig_weight_sum_x1e6": int(np.round((pc.sum(instance_rows["weight"]).as_py() or 0.0) * 1e6)),
    }
    tables = {
        "gpu_samples": day_rows,
        "instance_samples": instance_rows,
        "shared_holders": pa.table({"pair": holder_pairs}),
    }
    return counts, tables, frozenset(gpu_names)


HOUR_MS = 3_600_000
# The mart grain's keys (`--store hourly`): a GPU's or MIG instance's samples summed per hour and holder, and
# per what decides their category (R11: held or not, MIG, unhealthy, on an unschedulable node).
HOURLY = {
    "gpu_samples": (
        ("gpu", "bucket", "holder", "is_mig", "unhealthy", "unschedulable"),
        [
            ("ts_ms", "count"),
            ("busy", "sum"),
            ("price_units", "sum"),
            ("energy_mj", "sum"),
            ("fb_used_mib", "max"),
        ],
    ),
    "instance_samples": (
        ("gpu", "instance", "bucket", "holder", "unhealthy", "unschedulable"),
        [
            ("ts_ms", "count"),
            ("busy", "sum"),
            ("price_units", "sum"),
            ("energy_mj", "sum"),
            ("weight", "sum"),
        ],
    ),
}


# The compressed-samples design's keys (`--store compressed`): a device's samples in one time bucket made one
# row where they agree on every key the later models read (node, holder, prices, flags, the side of the idle
# threshold), with their count, first time and sums: what the SQL models would then read instead of samples.
COMPRESSED = {
    "gpu_samples": (
        (
            "gpu",
            "bucket",
            "node",
            "holder",
            "is_mig",
            "unhealthy",
            "unschedulable",
            "gpu_price_units",
            "price_units",
            "repeats_scrape",
            "active",
        ),
        [("ts_ms", "count"), ("ts_ms", "min"), ("busy", "sum"), ("energy_mj", "sum"), ("fb_used_mib", "max")],
    ),
    "instance_samples": (
        (
            "gpu",
            "instance",
            "bucket",
            "profile",
            "holder",
            "unhealthy",
            "unschedulable",
            "price_units",
            "active",
        ),
        [("ts_ms", "count"), ("ts_ms", "min"), ("busy", "sum"), ("energy_mj", "sum"), ("fb_used_mib", "max")],
    ),
}


def _summed(
    tables: dict[str, pa.Table],
    grain: dict[str, tuple[tuple[str, ...], list[tuple[str, str]]]],
    bucket_ms: int,
    idle_threshold: float,
) -> dict[str, pa.Table]:
    """One file's GPU and MIG instance samples grouped by `grain`'s keys (HOURLY or COMPRESSED) within time
    buckets of `bucket_ms`. HOURLY per hour: the grain the marts sum, the design that stores nothing per
    sample, without its rules. COMPRESSED: the compressed-samples design's rows, without the holder sets of
    shared samples or the span boundaries it would also cut at. Both floors."""
    out = {}
    for name, (keys, aggregates) in grain.items():
        rows = tables[name]
        rows = rows.append_column("bucket", pc.divide(rows["ts_ms"], bucket_ms))
        if (
            "active" in keys
        ):  # the side of the idle threshold (no reading is idle, as capacity_category reads it)
            busy = rows["busy"].to_numpy(zero_copy_only=False)
            rows = rows.append_column("active", pa.array(np.nan_to_num(busy) >= idle_threshold))
        out[name] = rows.group_by(list(keys)).aggregate(aggregates)
    return out


def _write_parquet(out: Path, part: str, tables: dict[str, pa.Table]) -> None:
    """One file's tables as <out>/<table>/<part>.parquet (Snappy), written by the thread that made them."""
    for name, rows in tables.items():
        (out / name).mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, out / name / f"{part}.parquet", compression="snappy")


def run_pass(work: Path, day: str, threads: int, store: str | None, bucket_s: int = 3600) -> dict[str, Any]:
    """The pass over the day's sorted files, `threads` files at a time. `store`: none, "duckdb" (the tables in
    a DuckDB database file, inserted by this thread, as the runner's models are), "parquet" (one Parquet
    file per table and sorted file, written by the thread that made it), "hourly" (each file's samples
    summed to the mart grain by its thread, `_summed`, and kept in memory: nothing per sample is stored) or
    "compressed" (each file's samples compressed per `bucket_s` by its thread, `_summed`, in memory)."""
    start_ms, end_ms = day_bounds_ms(date.fromisoformat(day))
    config = load_config(work / "config.yaml")
    cluster = config.clusters[0].name
    scrape_ms = config.scrape_interval_of(cluster) * 1000
    window_start_ms = start_ms - lookback_ms(config, cluster)
    totals: dict[str, int] = {}
    stored: set[str] = set()
    gpus_seen: dict[str, int] = {}
    summed = {"hourly": HOURLY, "compressed": COMPRESSED}.get(store or "", {})
    sums: dict[str, list[pa.Table]] = {name: [] for name in summed}
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    inputs = DayInputs.load(work)
    files = sorted((work / "sorted").glob("*.parquet"))
    out = work / ".streaming-floor"
    shutil.rmtree(out, ignore_errors=True)
    database = work / ".streaming-floor.duckdb"
    database.unlink(missing_ok=True)
    con = _session(database)  # a database file, as the runner's models are
    # One file per thread: NumPy and Arrow release the GIL in their loops, and (b′) runs on two threads.
    with ThreadPoolExecutor(threads) as pool:

        def work_file(path: Path) -> tuple[dict[str, int], dict[str, pa.Table], frozenset[str]]:
            counts, tables, gpus = one_file(path, start_ms, end_ms, window_start_ms, scrape_ms, inputs)
            if store == "parquet":
                _write_parquet(out, path.stem, tables)
            elif summed:
                bucket_ms = HOUR_MS if store == "hourly" else bucket_s * 1000
                tables = _summed(tables, summed, bucket_ms, config.idle_threshold)
            return counts, tables, gpus

        for counts, tables, gpus in pool.map(work_file, files):
            for key, count in counts.items():
                totals[key] = totals.get(key, 0) + count
            for uuid in gpus:
                gpus_seen[uuid] = gpus_seen.get(uuid, 0) + 1
            if sums:
                for name in sums:
                    sums[name].append(tables[name])
            elif store == "duckdb":
                for name, rows in tables.items():
                    verb = f"insert into {name}" if name in stored else f"create table {name} as"
                    stored.add(name)
                    con.register("rows", rows)
                    con.execute(f"{verb} select * from rows")
                    con.unregister("rows")
    # A GPU whose rows are in two files would be two partial GPUs to this pass: counted (the design must merge
    # them, as a second pass over those GPUs' rows).
    totals["gpus_in_several_files"] = sum(1 for n in gpus_seen.values() if n > 1)
    for name in sorted(stored):
        totals[f"stored_{name}"] = con.sql(f"select count(*) from {name}").fetchall()[0][0]
    con.close()
    if store == "parquet":
        for folder in sorted(out.iterdir()):
            totals[f"stored_{folder.name}"] = sum(
                pq.ParquetFile(f).metadata.num_rows for f in folder.iterdir()
            )
    for name, parts in sums.items():
        totals[f"{store}_{name}"] = sum(part.num_rows for part in parts)
        totals[f"{store}_{name}_ts_ms_count"] = sum(
            int(pc.sum(part["ts_ms_count"]).as_py() or 0) for part in parts
        )
        # A compressed row's price units are a key: its samples' sum is the key times their count.
        units = (
            (part["price_units_sum"] for part in parts)
            if store == "hourly"
            else (
                pc.multiply(pc.cast(part["price_units"], pa.int64()), part["ts_ms_count"]) for part in parts
            )
        )
        totals[f"{store}_{name}_price_units_sum"] = sum(int(pc.sum(u).as_py() or 0) for u in units)
    database.unlink(missing_ok=True)
    shutil.rmtree(out, ignore_errors=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "step": "streaming_pass",
        "threads": threads,
        "store": store,
        **({"bucket_s": bucket_s} if store == "compressed" else {}),
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_mib": after.ru_maxrss / 1024,
        **totals,
    }


# What the pass's counts are checked against: the same counts and sums over the models' own tables.
MODELS_CHECKED = (
    "stg_dcgm_series",
    "int_gpu_samples",
    "int_mig_instance_samples",
    "int_vgpu_copy_conflicts",
    "int_dcgm_copied_samples",
    "int_shared_sample_series_holders",
)
TRUTH_SQL = """
select
    (select count(*) from int_dcgm_copied_samples) as series_samples_with_copies,
    (select count(*) from stg_dcgm_series) as series,
    (select count(*) from int_gpu_samples) as gpu_samples_in_day,
    (select count(*) filter (where is_mig) from int_gpu_samples) as mig_gpu_samples_in_day,
    (select count(holder_key) from int_gpu_samples) as held_gpu_samples_in_day,
    (select sum(energy_mj) from int_gpu_samples) as energy_mj,
    (select round(sum(busy) * 1e6) from int_gpu_samples) as busy_sum_x1e6,
    (select sum(price_units) from int_gpu_samples) as price_units,
    (select count(*) filter (where unschedulable) from int_gpu_samples) as unschedulable_gpu_samples,
    (select count(*) from int_mig_instance_samples) as mig_instance_samples,
    (select count(holder_key) from int_mig_instance_samples) as held_mig_instance_samples,
    (select round(sum(busy) * 1e6) from int_mig_instance_samples) as mig_busy_sum_x1e6,
    (select sum(price_units) from int_mig_instance_samples) as mig_price_units,
    (select round(sum(weight) * 1e6) from int_mig_instance_samples) as mig_weight_sum_x1e6,
    (select count(*) from int_vgpu_copy_conflicts) as vgpu_copy_conflicts,
    (select count(*) from int_shared_sample_series_holders) as shared_holder_pairs
"""
# The hourly sums (`--store hourly`) against the models' counts and sums.
HOURLY_CHECKED = {
    "hourly_gpu_samples_ts_ms_count": "gpu_samples_in_day",
    "hourly_gpu_samples_price_units_sum": "price_units",
    "hourly_instance_samples_ts_ms_count": "mig_instance_samples",
    "hourly_instance_samples_price_units_sum": "mig_price_units",
}
# Sums of floating-point fractions, added in another order: equal to within the last digit.
ROUNDED = ("busy_sum_x1e6", "mig_busy_sum_x1e6", "mig_weight_sum_x1e6")


def _one_row(
    sql: str, tables: dict[str, pa.Table], parameters: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The one row `sql` returns over `tables` (registered under their names), by column."""
    con = duckdb.connect()
    for name, rows in tables.items():
        con.register(name, rows)
    relation = con.execute(sql, parameters or {})
    columns = [d[0] for d in relation.description or ()]
    return dict(zip(columns, relation.fetchall()[0], strict=True))


def model_truth(tables: dict[str, pa.Table]) -> dict[str, int]:
    """TRUTH_SQL over the models' tables (MODELS_CHECKED, kept by meter_day)."""
    truth = _one_row(TRUTH_SQL, {name: tables[name] for name in MODELS_CHECKED})
    return {k: int(v or 0) for k, v in truth.items()}


def check(work: Path, day: str) -> dict[str, Any]:
    """The pass against the models over one bench workspace's day (both run here; untimed)."""
    truth = model_truth(meter_workspace_day(work, date.fromisoformat(day), select=MODELS_CHECKED))
    got = run_pass(work, day, threads=2, store="hourly")
    differ = {
        k: (got[k], truth[k])
        for k in truth
        if (abs(got[k] - truth[k]) > 1 if k in ROUNDED else got[k] != truth[k])
    }
    # The mart grain's sums, and the compressed rows (at a quarter hour), keep every sample and every unit of
    # price the models hold.
    compressed = run_pass(work, day, threads=2, store="compressed", bucket_s=900)
    for summed, counted in HOURLY_CHECKED.items():
        if got[summed] != truth[counted]:
            differ[summed] = (got[summed], truth[counted])
        in_compressed = summed.replace("hourly_", "compressed_", 1)
        if compressed[in_compressed] != truth[counted]:
            differ[in_compressed] = (compressed[in_compressed], truth[counted])
    return {"step": "check", "equal": not differ, "differ": differ, **truth}


# The tables of the product's sample pass (gpumeter.models.sample_pass), which the floor's pass stands for,
# the two of them that hold samples, and the models the floor's pass stood for before the product had one.
PASS_TABLES = tuple(SAMPLE_PASS_MODELS)
SAMPLE_TABLES = PASS_TABLES[:2]
PASS_MODELS = ("stg_dcgm_series", "int_dcgm_quarantine", *PASS_TABLES)


# What a device sample's later models read as a value, not as a key: summed (energy), taken at their largest
# (frame buffer) or averaged (busy, whose side of the idle threshold is a key) over a compressed row's samples.
COMPRESSED_VALUES = {
    "busy": "avg",
    "energy_joules": "sum",
    "energy_mj": "sum",
    "gpu_fb_used_mib": "max",
    "fb_used_mib": "max",
}


def compressed_sql(columns: list[str], files: str, bucket_ms: int, idle_threshold: float) -> str:
    """The device samples of `files` (the models' own int_gpu_samples or int_mig_instance_samples) with
    the samples of one device and time bucket that agree on every other column (holder, prices, flags, the
    side of the idle threshold) made one row, at the first one's time. What the later models would read in the
    compressed-samples design, whose cuts (time buckets here) stand for the span boundaries it would cut at."""
    keys = [c for c in columns if c != "ts_ms" and c not in COMPRESSED_VALUES]
    values = [
        f"{COMPRESSED_VALUES[c]}({c})::{'bigint' if c == 'energy_mj' else 'double'} as {c}"
        for c in columns
        if c in COMPRESSED_VALUES
    ]
    return (
        f"select min(ts_ms) as ts_ms, {', '.join(values)}, {', '.join(keys)} from read_parquet([{files}]) "
        f"group by {', '.join(keys)}, ts_ms // {bucket_ms}, coalesce(busy, 0) >= {idle_threshold}"
    )


def _write_parts(folder: Path, rows: pa.Table, parts: int) -> None:
    """`rows` as `parts` Snappy Parquet files in `folder`, as `pass --store parquet` writes a table."""
    folder.mkdir(parents=True)
    size = -(-rows.num_rows // parts)
    for part in range(parts):
        pq.write_table(
            rows.slice(part * size, size), folder / f"part-{part:05d}.parquet", compression="snappy"
        )


def _compress(work: Path, bucket_s: int, parts: int) -> dict[str, Any]:
    """`downstream`'s tables (its setup) compressed per `bucket_s` into <work>/downstream-<bucket_s>s/."""
    idle_threshold = load_config(work / "config.yaml").idle_threshold
    folder = work / f"downstream-{bucket_s}s"
    shutil.rmtree(folder, ignore_errors=True)
    con = _session()
    rows: dict[str, int] = {}
    for name in SAMPLE_TABLES:
        found = sorted((work / "downstream" / name).glob("*.parquet"))
        if not found:
            raise SystemExit(f"{work / 'downstream' / name}: no files; run `downstream --stored setup` first")
        files = ", ".join(f"'{f}'" for f in found)
        columns = pq.read_schema(found[0]).names
        table = con.sql(compressed_sql(columns, files, bucket_s * 1000, idle_threshold)).to_arrow_table()
        table = table.select(columns)
        rows[name] = table.num_rows
        _write_parts(folder / name, table, parts)
    con.close()
    return {"step": f"downstream_setup_{bucket_s}s", **rows}


def downstream(
    work: Path, day: str, stored: str, parts: int = 80, bucket_s: int | None = None
) -> dict[str, Any]:
    """What the models after the pass cost when its tables are DuckDB tables or Parquet files. `setup` writes
    the sample pass's tables (PASS_TABLES) as `parts` Parquet files each (Snappy, as `pass --store parquet`
    writes them); `duckdb` meters the day with those models loaded from the files into tables (the load is the
    pass's store, not counted), `parquet` with them as views over the files. With `bucket_s`, the same with
    the two sample tables compressed (`compressed_sql`; setup compresses the files the plain setup wrote): the
    later models' cost in the compressed-samples design, whose totals would need each row's sample count,
    which these rows do not carry (the time, not the result, is measured). Reported: the seconds of the models
    other than those the pass stands for (PASS_MODELS)."""
    metered = date.fromisoformat(day)
    folder = work / ("downstream" if bucket_s is None else f"downstream-{bucket_s}s")
    if stored == "setup" and bucket_s is not None:
        return _compress(work, bucket_s, parts)
    if stored == "setup":
        tables = meter_workspace_day(work, metered, select=PASS_TABLES)
        shutil.rmtree(folder, ignore_errors=True)
        for name, rows in tables.items():
            _write_parts(folder / name, rows, parts)
        return {"step": "downstream_setup", **{name: rows.num_rows for name, rows in tables.items()}}
    models = []
    for model in load_models():
        if bucket_s is not None:
            # Compressed rows without their sample counts break the sums the assertions hold (capacity,
            # conservation): each assertion still runs over them, at its cost, and its rows are discarded.
            model = replace(
                model,
                assertions=tuple(
                    replace(a, sql=f"select * from ({a.sql.rstrip().rstrip(';')}) where message is null")
                    for a in model.assertions
                ),
            )
        if model.name in PASS_TABLES:
            kept = folder if model.name in SAMPLE_TABLES else work / "downstream"
            files = ", ".join(f"'{f}'" for f in sorted((kept / model.name).glob("*.parquet")))
            model = replace(
                model,
                sql=f"select * from read_parquet([{files}])",
                deps=(),
                materialized="ephemeral" if stored == "parquet" else "table",
            )
        models.append(model)
    seconds, on_model = model_timer()
    started = time.perf_counter()
    meter_workspace_day(work, metered, "downstream", on_model=on_model, keep_layers=("marts",), models=models)
    return {
        "step": f"downstream_{stored}" + ("" if bucket_s is None else f"_{bucket_s}s"),
        "meter_s": time.perf_counter() - started,
        "other_models_s": sum(v for k, v in seconds.items() if k not in PASS_MODELS),
        "pass_tables_s": {k: seconds.get(k, 0.0) for k in SAMPLE_TABLES},
        "slowest_other_models_s": dict(
            sorted(((k, v) for k, v in seconds.items() if k not in PASS_MODELS), key=lambda kv: -kv[1])[:8]
        ),
    }


def models_reading_no_dcgm_row() -> tuple[str, ...]:
    """The models nothing of the day's DCGM rows reaches (kube-state-metrics, OpenCost, Kueue and DRA spans):
    what a design that sums the samples to the mart grain in one pass would still run before it."""
    reached = {"raw_dcgm_samples"}
    models = load_models()
    for model in models:  # in dependency order; what it reads as the runner selects it (assertions, views)
        if reached.intersection(reads(model, models)):
            reached.add(model.name)
    return tuple(model.name for model in models if model.name not in reached)


def rest(work: Path, day: str) -> dict[str, Any]:
    """The day's models that read no DCGM row (`models_reading_no_dcgm_row`), metered alone and timed."""
    selected = models_reading_no_dcgm_row()
    seconds, on_model = model_timer()
    started = time.perf_counter()
    meter_workspace_day(work, date.fromisoformat(day), "rest", on_model=on_model, select=selected)
    wall = time.perf_counter() - started
    return {
        "step": "no_dcgm_models",
        "wall_s": wall,
        "models_s": sum(seconds.values()),
        "models": len(selected),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "slowest_models_s": dict(sorted(seconds.items(), key=lambda kv: -kv[1])[:6]),
    }


# The spans the later models join device samples to by time: a compressed row must not straddle one of their
# boundaries (`cuts`).
SPAN_MODELS = (
    "int_node_gpu_price_spans",
    "int_node_unschedulable_spans",
    "int_pod_running_spans",
    "int_pod_label_periods",
    "int_dra_device_map",
    "stg_dra_allocations",
    "int_holders",
)
CUTS_SQL = """
with bounds as (
    select 'node' as kind, node as entity, unnest([from_ms, until_ms]) as at_ms from int_node_gpu_price_spans
    union all
    select 'node', node, unnest([from_ms, until_ms]) from int_node_unschedulable_spans
    union all
    select 'pod', namespace || '/' || pod, unnest([from_ms, until_ms]) from int_pod_running_spans
    semi join int_holders using (namespace, pod)
    union all
    select 'pod', namespace || '/' || pod, unnest([from_ms, until_ms]) from int_pod_label_periods
    semi join int_holders using (namespace, pod)
    union all
    select 'dra', device_id, unnest([valid_from_ms, valid_until_ms]) from int_dra_device_map
    union all
    select 'dra', driver || '/' || pool || '/' || device, unnest([valid_from_ms, valid_until_ms])
    from stg_dra_allocations
),
inside as (select distinct * from bounds where at_ms > $start_ms and at_ms < $end_ms)
select
    (select count(distinct node) from int_node_gpu_price_spans) as nodes_priced_by_spans,
    (select count(distinct (namespace, pod)) from int_holders) as holder_pods,
    count(*) filter (where kind = 'node') as node_boundaries,
    count(*) filter (where kind = 'pod') as holder_pod_boundaries,
    count(*) filter (where kind = 'dra') as dra_boundaries
from inside
"""


def cuts(work: Path, day: str) -> dict[str, Any]:
    """How many span boundaries fall inside the day (untimed): where the compressed-samples design would have to
    cut a device's rows besides its time buckets. A node's boundary cuts the rows of each GPU on it, a holder
    pod's those of the devices it holds, a DRA boundary those of its device."""
    start_ms, end_ms = day_bounds_ms(date.fromisoformat(day))
    tables = meter_workspace_day(work, date.fromisoformat(day), "cuts", select=SPAN_MODELS)
    spans = {name: tables[name] for name in SPAN_MODELS}
    return {"step": "cuts", **_one_row(CUTS_SQL, spans, {"start_ms": start_ms, "end_ms": end_ms})}


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
    parser.add_argument(
        "what", choices=("sort", "inputs", "pass", "check", "downstream", "rest", "cuts", "window-keys")
    )
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--day", default=FactorySpec().start.isoformat())
    parser.add_argument("--threads", type=int, default=2, help="files passed at once (pass)")
    parser.add_argument(
        "--store",
        nargs="?",
        const="duckdb",
        choices=("duckdb", "parquet", "hourly", "compressed"),
        help="store the day's GPU and MIG instance samples: in a DuckDB file (the default), in Parquet files "
        "written by the threads that make them, summed to the mart grain in memory, nothing per sample, or "
        "compressed per --bucket-s in memory (pass)",
    )
    parser.add_argument(
        "--stored",
        choices=("setup", "duckdb", "parquet"),
        default="duckdb",
        help="downstream: write the two tables once (setup), or meter with them as DuckDB tables or Parquet views",
    )
    parser.add_argument(
        "--bucket-s",
        type=int,
        help="pass --store compressed, downstream: a row per device, time bucket of this many seconds and what "
        "the later models read as a key (downstream's setup compresses the plain setup's files)",
    )
    args = parser.parse_args(argv)
    if args.what == "sort":
        result = sort_files(args.work, args.day)
    elif args.what == "inputs":
        result = compute_inputs(args.work, args.day)
    elif args.what == "downstream":
        result = downstream(args.work, args.day, args.stored, bucket_s=args.bucket_s)
    elif args.what == "check":
        result = check(args.work, args.day)
    elif args.what == "rest":
        result = rest(args.work, args.day)
    elif args.what == "cuts":
        result = cuts(args.work, args.day)
    elif args.what == "pass":
        result = run_pass(args.work, args.day, args.threads, args.store, args.bucket_s or 3600)
    else:
        result = window_keys(args.work, args.day)
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
