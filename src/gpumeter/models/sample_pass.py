"""The sample pass: the day's DCGM rows, already judged (stg_dcgm_judged), read in one streamed query and set
apart by range of GPUs (_spill_ranges), then turned a range at a time into the GPU samples (int_gpu_samples)
and MIG instance samples (int_mig_instance_samples), with the few things the other models read from each
series' samples (int_dcgm_quarantine, int_vgpu_copy_conflicts, int_keyed_device_holders). The rules are those
docs/rules.md states and tests/reference_sql/ holds as SQL: each step below names the rule it applies.

Why a pass and not SQL: the SQL grouped the day's rows three times by hash (series and time, GPU and time,
instance and time), each a state per sample for tens of millions of samples. The raw zone stores each part in
GPU order (gpumeter.ingest.row_order), so here each grouping is a run of neighbours. The order is checked,
never assumed: a range of rows not in order is sorted first, which costs time, not correctness."""

from __future__ import annotations

import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from gpumeter.ingest.row_order import combined_key, lexicographic_order
from gpumeter.ingest.schema import (
    DCGM_ENERGY,
    DCGM_FB_USED,
    DCGM_GPU_UTIL,
    DCGM_GR_ENGINE_ACTIVE,
    DCGM_XID,
)
from gpumeter.models.project import SESSION_FOLDER, AccountingError
from gpumeter.storage.objectstore import sql_path_list

# The metrics a sample reads, in name order (the raw zone's order of rows within a series' sample).
READ_METRICS = tuple(sorted((DCGM_GR_ENGINE_ACTIVE, DCGM_GPU_UTIL, DCGM_FB_USED, DCGM_ENERGY, DCGM_XID)))
GR, UTIL, FB, ENERGY, XID = (
    READ_METRICS.index(m) for m in (DCGM_GR_ENGINE_ACTIVE, DCGM_GPU_UTIL, DCGM_FB_USED, DCGM_ENERGY, DCGM_XID)
)
# R4 (our reading): a row of one of these makes its series observed at its time, whatever its value.
# By metric code (its place in READ_METRICS), looked up per row: cheaper than testing each row against a list.
OBSERVES = np.isin(
    np.arange(len(READ_METRICS)),
    [READ_METRICS.index(m) for m in (DCGM_GR_ENGINE_ACTIVE, DCGM_GPU_UTIL, DCGM_FB_USED, DCGM_ENERGY)],
)
# The rows of a range of GPUs read at once: the pass's memory is a few hundred bytes per row of each range in
# work, WORKERS of them at a time.
ROWS_PER_RANGE = 4_000_000
WORKERS = 2
# How many rows of the day's one streamed read (_spill_ranges) are set apart by range at a time.
SPILL_BATCH_ROWS = 1 << 20
# A row's time is spilled as milliseconds since the window's start (a day and its lookback: well within 32 bits),
# a fifth fewer bytes to compress, write and read back than epoch milliseconds.
SPILL_SCHEMA = pa.schema(
    [("place", pa.int32()), ("ts_offset", pa.int32()), ("metric", pa.uint8()), ("value", pa.float64())]
)
# The samples' columns of a few values per GPU, stored as dictionaries (_Files).
DICTIONARY_COLUMNS = frozenset(
    {
        "gpu_key",
        "device_key",
        "node_key",
        "model_key",
        "profile_key",
        "holder_key",
        "weight",
        "mig_layout_key",
    }
    | {"gpu_price_per_hour", "gpu_price_units", "price_units"}
)
NONE = -1  # a null key
LEAST_NONE = np.iinfo(np.int32).max  # a null skipped by a min

# The side tables the pass writes, read by the models it feeds (their one list).
GPU_SAMPLES = "sample_pass__gpu_samples"
MIG_INSTANCE_SAMPLES = "sample_pass__mig_instance_samples"
COPIED_SAMPLES = "sample_pass__copied_samples"
UUIDS_ON_SEVERAL_NODES = "sample_pass__uuids_on_several_nodes"
SHARED_SAMPLE_HOLDERS = "sample_pass__shared_sample_holders"
VGPU_COPY_CONFLICTS = "sample_pass__vgpu_copy_conflicts"
SAMPLE_GAPS = "sample_pass__sample_gaps"
# Gaps between a GPU's samples counted in whole seconds up to this; a longer one (an outage) counts here.
LONGEST_GAP_S = 3600
# Session variables the pass sets for int_dcgm_quarantine, which reads them by these names: whether the day has
# a judged row that is dropped, and one whose value the judgement ignored or clamped. DuckDB folds a variable
# into the query as it plans it, so a branch of the quarantine that can hold no row is not planned at all: an
# empty table joined to the day's rows would still have them scanned.
DROPPED_ROWS_SEEN = "sample_pass__dropped_rows_seen"
CHANGED_VALUES_SEEN = "sample_pass__changed_values_seen"

GPU_SAMPLE_SCHEMA = pa.schema(
    [
        ("gpu_key", pa.int32()),
        ("ts_ms", pa.int64()),
        ("node_key", pa.int32()),
        ("model_key", pa.int32()),
        ("is_mig", pa.bool_()),
        ("unhealthy", pa.bool_()),
        ("gpu_price_per_hour", pa.float64()),
        ("gpu_price_units", pa.int64()),
        ("gpu_fb_used_mib", pa.float64()),
        ("energy_joules", pa.float64()),
        ("energy_mj", pa.int64()),
        ("device_key", pa.int32()),
        ("weight", pa.float64()),
        ("price_units", pa.int64()),
        ("busy", pa.float64()),
        ("fb_used_mib", pa.float64()),
        ("unschedulable", pa.bool_()),
        ("labelled", pa.bool_()),
        ("holder_key", pa.int32()),
        ("repeats_scrape", pa.bool_()),
        ("holder_unverified", pa.bool_()),
        ("mig_layout_key", pa.uint64()),
    ]
)
MIG_INSTANCE_SAMPLE_SCHEMA = pa.schema(
    [
        ("device_key", pa.int32()),
        ("ts_ms", pa.int64()),
        ("gpu_key", pa.int32()),
        ("node_key", pa.int32()),
        ("model_key", pa.int32()),
        ("profile_key", pa.int32()),
        ("weight", pa.float64()),
        ("price_units", pa.int64()),
        ("busy", pa.float64()),
        ("fb_used_mib", pa.float64()),
        ("unhealthy", pa.bool_()),
        ("energy_joules", pa.float64()),
        ("energy_mj", pa.int64()),
        ("unschedulable", pa.bool_()),
        ("labelled", pa.bool_()),
        ("holder_key", pa.int32()),
        ("mig_layout_key", pa.uint64()),
    ]
)
SIDE_SCHEMAS = {
    COPIED_SAMPLES: pa.schema([("series_key", pa.uint64()), ("ts_ms", pa.int64())]),
    UUIDS_ON_SEVERAL_NODES: pa.schema(
        [("gpu_key", pa.int32()), ("ts_ms", pa.int64()), ("billed_node_key", pa.int32())]
    ),
    SHARED_SAMPLE_HOLDERS: pa.schema(
        [("ts_ms", pa.int64()), ("device_key", pa.int32()), ("holder_key", pa.int32())]
    ),
    VGPU_COPY_CONFLICTS: pa.schema(
        [("device_key", pa.int32()), ("ts_ms", pa.int64()), ("node_key", pa.int32())]
    ),
    SAMPLE_GAPS: pa.schema([("node_key", pa.int32()), ("gap_s", pa.int32()), ("gaps", pa.int64())]),
}


@dataclass(frozen=True)
class _Day:
    """The session's variables the pass reads (gpumeter.models.runner sets them)."""

    window_start_ms: int
    day_start_ms: int
    day_end_ms: int
    scrape_s: float

    @classmethod
    def of(cls, con: duckdb.DuckDBPyConnection) -> _Day:
        (row,) = con.sql(
            "select getvariable('window_start_ms'), getvariable('day_start_ms'), getvariable('day_end_ms'), "
            "getvariable('scrape_s')"
        ).fetchall()
        return cls(int(row[0]), int(row[1]), int(row[2]), float(row[3]))


@dataclass(frozen=True)
class _Series:
    """The day's series (stg_dcgm_series) in the order the raw zone stores their rows: by GPU (its UUID), then
    series key. Each array is indexed by a series' place in that order."""

    key: np.ndarray  # uint64
    gpu: np.ndarray
    device: np.ndarray
    node: np.ndarray  # NONE: no node label
    model: np.ndarray
    profile: np.ndarray
    holder: np.ndarray
    instance: np.ndarray  # bool: a MIG instance's series
    has_pod: np.ndarray
    holder_unverified: np.ndarray  # bool: pod labels that could not be told from the scrape target's (R5)
    any_unverified: bool
    vgpu_copy: np.ndarray
    uuid: list[str]  # by GPU key - 1
    whole_device: np.ndarray  # by GPU key: the GPU's device as a whole GPU (NONE: no GPU-level series)
    shows_instances: np.ndarray  # by GPU key: whether the GPU ever shows a MIG instance

    @classmethod
    def of(cls, con: duckdb.DuckDBPyConnection) -> _Series:
        table = con.sql(
            "select series_key, gpu_key, device_key, coalesce(node_key, -1) as node_key, "
            "coalesce(model_key, -1) as model_key, coalesce(profile_key, -1) as profile_key, "
            "coalesce(holder_key, -1) as holder_key, gpu_i_id is not null as instance, pod is not null as has_pod, "
            "holder_unverified, gpu_shows_instances, vgpu_copy, uuid "
            "from stg_dcgm_series order by gpu_key, series_key"
        ).to_arrow_table()
        columns = {name: table[name].to_numpy() for name in table.column_names if name != "uuid"}
        gpu = columns["gpu_key"].astype(np.int32)
        gpus = int(gpu.max()) if gpu.size else 0
        uuid = [""] * gpus
        whole_device = np.full(gpus + 1, NONE, np.int32)
        instance = columns["instance"].astype(bool)
        device = columns["device_key"].astype(np.int32)
        whole_device[gpu[~instance]] = device[~instance]
        shows_instances = np.zeros(gpus + 1, dtype=bool)
        shows_instances[gpu] = columns["gpu_shows_instances"].astype(bool)
        for g, name in zip(gpu.tolist(), table["uuid"].to_pylist(), strict=True):
            uuid[g - 1] = name
        return cls(
            key=columns["series_key"].astype(np.uint64),
            gpu=gpu,
            device=device,
            node=columns["node_key"].astype(np.int32),
            model=columns["model_key"].astype(np.int32),
            profile=columns["profile_key"].astype(np.int32),
            holder=columns["holder_key"].astype(np.int32),
            instance=instance,
            has_pod=columns["has_pod"].astype(bool),
            holder_unverified=columns["holder_unverified"].astype(bool),
            any_unverified=bool(columns["holder_unverified"].any()),
            vgpu_copy=columns["vgpu_copy"].astype(bool),
            uuid=uuid,
            whole_device=whole_device,
            shows_instances=shows_instances,
        )


@dataclass(frozen=True)
class _Classes:
    """The device classes by their keys (int_keyed_device_classes): the whole GPU's by model, an instance's by
    model and profile."""

    whole: dict[int, tuple[float, int | None, float | None, int | None]]  # model -> weight, units, price, own
    # An instance's class by [model key, profile key] (keys are ranks from 1: row and column 0 hold no class):
    # its weight and own price units, nan where there is no class or no own price. Looked up for every
    # instance sample of a range at once.
    instance_weight: np.ndarray
    instance_own_units: np.ndarray

    @classmethod
    def of(cls, con: duckdb.DuckDBPyConnection) -> _Classes:
        whole: dict[int, tuple[float, int | None, float | None, int | None]] = {}
        instance: dict[tuple[int, int], tuple[float, int | None]] = {}
        for model, profile, weight, gpu_units, gpu_price, device_units in con.sql(
            "select model_key, profile_key, weight, gpu_price_units, gpu_price_per_hour, device_price_units "
            "from int_keyed_device_classes"
        ).fetchall():
            if profile is None:
                whole[model] = (weight, gpu_units, gpu_price, device_units)
            elif model is not None:
                instance[(model, profile)] = (weight, device_units)
        shape = (max((m for m, _ in instance), default=0) + 1, max((p for _, p in instance), default=0) + 1)
        instance_weight, instance_own_units = np.full(shape, np.nan), np.full(shape, np.nan)
        for (model, profile), (weight, own_units) in instance.items():
            instance_weight[model, profile] = weight
            instance_own_units[model, profile] = np.nan if own_units is None else own_units
        return cls(whole, instance_weight, instance_own_units)

    def instance_class(self, model: np.ndarray, profile: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The weight and own price units of each (model key, profile key) instance (nan: no class, no own
        price); NONE or a key no class has finds no class."""
        rows, columns = self.instance_weight.shape
        at_model, at_profile = model.astype(np.int64), profile.astype(np.int64)
        inside = (at_model > 0) & (at_model < rows) & (at_profile > 0) & (at_profile < columns)
        at_model, at_profile = np.where(inside, at_model, 0), np.where(inside, at_profile, 0)
        return self.instance_weight[at_model, at_profile], self.instance_own_units[at_model, at_profile]


@dataclass(frozen=True)
class _NodeSpans:
    """Spans per node key, disjoint per node, found by one search over (node, start)."""

    key: np.ndarray
    node: np.ndarray
    until: np.ndarray
    value: np.ndarray

    SHIFT = np.int64(1) << np.int64(42)  # epoch ms stay below 2^42 until the year 2109

    @classmethod
    def of(cls, con: duckdb.DuckDBPyConnection, sql: str) -> _NodeSpans:
        table = con.sql(sql).to_arrow_table()
        node = table["node_key"].to_numpy().astype(np.int64)
        start = table["from_ms"].to_numpy().astype(np.int64)
        key = node * cls.SHIFT + start
        order = np.argsort(key, kind="stable")
        value = table["value"].to_numpy(zero_copy_only=False).astype(np.float64)
        return cls(
            key[order], node[order], table["until_ms"].to_numpy().astype(np.int64)[order], value[order]
        )

    def at(self, node: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each (node key, time): whether a span of the node holds it, and that span's value (nan: none)."""
        if self.key.size == 0:
            return np.zeros(ts.size, dtype=bool), np.full(ts.size, np.nan)
        at = np.searchsorted(self.key, node.astype(np.int64) * self.SHIFT + ts, side="right") - 1
        found = at >= 0
        at = np.maximum(at, 0)
        held = found & (node >= 0) & (self.node[at] == node) & (ts < self.until[at])
        return held, np.where(held, self.value[at], np.nan)


def sql_round(values: np.ndarray) -> np.ndarray:
    """DuckDB's round() of a double to an integer: half away from zero (NumPy's np.round halves to even)."""
    whole = np.trunc(values)
    return whole + np.where(np.abs(values - whole) >= 0.5, np.sign(values), 0.0)


def _busy(gr_engine_active: np.ndarray, gpu_util_pct: np.ndarray) -> np.ndarray:
    """R10: GR_ENGINE_ACTIVE where present, else GPU_UTIL / 100, clamped to [0, 1]; neither: 0 (SQL's greatest
    and least skip a null)."""
    busy = np.where(np.isnan(gr_engine_active), gpu_util_pct / 100.0, gr_engine_active)
    return np.clip(np.nan_to_num(busy, nan=0.0), 0.0, 1.0)


def _starts(*keys: np.ndarray) -> np.ndarray:
    """Where a run of rows equal in every key starts (the rows sorted by them)."""
    if keys[0].size == 0:
        return np.zeros(0, np.int64)
    new = np.zeros(keys[0].size, dtype=bool)
    new[0] = True
    for key in keys:
        new[1:] |= key[1:] != key[:-1]
    return np.flatnonzero(new)


def _mixed(*keys: np.ndarray) -> np.ndarray:
    """One 64-bit hash per row of non-negative integer keys (the keys folded in turn, then splitmix64's
    finalizer), so that an xor of hashes keys a set of rows in any order."""
    mixed = np.zeros(keys[0].size, np.uint64)
    for key in keys:
        mixed = mixed * np.uint64(0x9E3779B97F4A7C15) + key.astype(np.uint64)
    mixed ^= mixed >> np.uint64(30)
    mixed *= np.uint64(0xBF58476D1CE4E5B9)
    mixed ^= mixed >> np.uint64(27)
    mixed *= np.uint64(0x94D049BB133111EB)
    mixed ^= mixed >> np.uint64(31)
    return mixed


def _least(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """min per run, a null (NONE) skipped: NONE where every value is null."""
    least = np.minimum.reduceat(np.where(values == NONE, LEAST_NONE, values), starts)
    return np.where(least == LEAST_NONE, NONE, least).astype(np.int32)


def _most(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """max per run; NONE (-1) is below every key, so it is skipped unless every value is null."""
    return np.maximum.reduceat(values, starts).astype(np.int32)


def _previous_valid(valid: np.ndarray, group_start: np.ndarray) -> np.ndarray:
    """For each row, the index of the last valid row before it in its group (-1: none)."""
    at = np.maximum.accumulate(np.where(valid, np.arange(valid.size), -1))
    before = np.r_[-1, at[:-1]]
    return np.where(before >= group_start, before, -1)


class _Table:
    """Appends each range's rows to a table of the session (created with its schema before the first range),
    one insert at a time: the workers use the session only once the day's rows are set apart."""

    def __init__(self, con: duckdb.DuckDBPyConnection, name: str, schema: pa.Schema) -> None:
        self.con, self.name, self.schema = con, name, schema
        con.execute(f"drop table if exists {name}")
        con.register("sample_pass__empty", schema.empty_table())
        con.execute(f"create table {name} as select * from sample_pass__empty")
        con.unregister("sample_pass__empty")

    def append(self, columns: dict[str, np.ndarray | pa.Array]) -> None:
        table = pa.table(columns, schema=self.schema)
        if table.num_rows:
            self.con.register("sample_pass__rows", table)
            self.con.execute(f"insert into {self.name} select * from sample_pass__rows")
            self.con.unregister("sample_pass__rows")


class _Files:
    """A table of tens of millions of rows as Parquet files in the session's folder, one per range, which the
    session reads through a view. Why not a table: storing the rows in DuckDB (compressed into its file) cost
    more than the rest of the pass's work on them, and the models read each column once or twice."""

    def __init__(self, folder: Path, schema: pa.Schema) -> None:
        self.folder, self.schema = folder, schema
        folder.mkdir(parents=True)  # the session's folder is new: nothing of an earlier run is in it

    def write(self, at: int, columns: dict[str, np.ndarray | pa.Array]) -> None:
        pq.write_table(
            pa.table(columns, schema=self.schema),
            self.folder / f"range-{at:06d}.parquet",
            # Not compressed: read back by several models, and decoded faster than compressed files are. The
            # keys, prices and weights, a few values per GPU, as dictionaries and the times as deltas: under
            # half the bytes to write and read, and no slower.
            compression="none",
            use_dictionary=[name for name in self.schema.names if name in DICTIONARY_COLUMNS],
            column_encoding={"ts_ms": "DELTA_BINARY_PACKED"},
        )

    def view(self, con: duckdb.DuckDBPyConnection, name: str) -> None:
        """The view `name` of every range's rows, in range order (an empty file where no range had any)."""
        paths = sorted(self.folder.glob("range-*.parquet"))
        if not paths:
            paths = [self.folder / "empty.parquet"]
            pq.write_table(self.schema.empty_table(), paths[0])
        con.execute(f"drop view if exists {name}")
        con.execute(f"create view {name} as select * from read_parquet([{sql_path_list(paths)}])")


def _nullable(values: np.ndarray, valid: np.ndarray, kind: pa.DataType) -> pa.Array:
    if valid.all():  # no null: no mask to build
        return pa.array(values, type=kind)
    return pa.array(values, type=kind, mask=~valid)


def run(con: duckdb.DuckDBPyConnection) -> None:
    """Write the pass's tables into the session: GPU_SAMPLES and MIG_INSTANCE_SAMPLES as views of Parquet files
    in the session's folder, SIDE_SCHEMAS' tables as tables; and set DROPPED_ROWS_SEEN and CHANGED_VALUES_SEEN,
    which tell int_dcgm_quarantine where to look."""
    ((folder,),) = con.sql(f"select getvariable('{SESSION_FOLDER}')").fetchall()
    if folder is None:
        raise AccountingError(
            "the sample pass runs in a metering session (gpumeter.models.runner.meter_day), which gives it a "
            "folder for its files"
        )
    series = _Series.of(con)
    files = {
        GPU_SAMPLES: _Files(Path(folder) / GPU_SAMPLES, GPU_SAMPLE_SCHEMA),
        MIG_INSTANCE_SAMPLES: _Files(Path(folder) / MIG_INSTANCE_SAMPLES, MIG_INSTANCE_SAMPLE_SCHEMA),
    }
    tables = {name: _Table(con, name, schema) for name, schema in SIDE_SCHEMAS.items()}
    # Every raw row is dropped or counted under its series: the files' row count (from their footers) against
    # the series' sum, where a scan of the rows for one dropped would read the labels of every one.
    ((raw_rows, series_rows),) = con.sql(
        "select (select count(*) from raw_dcgm_samples), (select coalesce(sum(raw_rows), 0) from stg_dcgm_series)"
    ).fetchall()
    changed = _read_ranges(con, series, raw_rows, Path(folder), files, tables) if series.uuid else 0
    # A node's GPUs may lie in two ranges: one row per node and gap.
    con.execute(
        f"create or replace table {SAMPLE_GAPS} as "
        f"select node_key, gap_s, sum(gaps)::bigint as gaps from {SAMPLE_GAPS} group by all"
    )
    for name, written in files.items():
        written.view(con, name)
    con.execute(f"set variable {DROPPED_ROWS_SEEN} = ?", [raw_rows > series_rows])
    con.execute(f"set variable {CHANGED_VALUES_SEEN} = ?", [changed > 0])


def _read_ranges(
    con: duckdb.DuckDBPyConnection,
    series: _Series,
    raw_rows: int,
    folder: Path,
    files: dict[str, _Files],
    tables: dict[str, _Table],
) -> int:
    """The day's judged DCGM rows, set apart by range of GPUs (in UUID order), a range at a time through the
    pass (`raw_rows`: the day's raw rows, which size the ranges); how many of them had their value ignored or
    clamped."""
    gpus = len(series.uuid)
    day = _Day.of(con)
    classes = _Classes.of(con)
    prices = _NodeSpans.of(
        con,
        "select k.node_key, p.from_ms, p.until_ms, p.gpu_price_per_hour as value "
        "from int_node_gpu_price_spans as p join stg_dcgm_nodes as k on k.node = p.node",
    )
    unschedulable = _NodeSpans.of(
        con,
        "select k.node_key, u.from_ms, u.until_ms, 0.0 as value "
        "from int_node_unschedulable_spans as u join stg_dcgm_nodes as k on k.node = u.node",
    )
    per_range = max(1, int(gpus * ROWS_PER_RANGE / max(1, raw_rows)))
    with tempfile.TemporaryDirectory(prefix="spill-", dir=folder) as spill:
        ranges = iter(enumerate(_spill_ranges(con, series, per_range, Path(spill))))
        # One range taken at a time; one insert at a time into the small tables.
        taking, storing = threading.Lock(), threading.Lock()
        changed = [0]

        def work() -> None:
            """Take the next range of GPUs until none is left: read its rows back, compute its rows (NumPy lets
            go of the interpreter, so two workers use two cores) and write them: the sample rows to files of
            the range's own, the small tables' rows under their lock."""
            while True:
                with taking:
                    at, path = next(ranges, (-1, None))
                if path is None:
                    return
                rows, changed_here = _read_spilled(path, day)
                found = _one_range(rows, series, classes, prices, unschedulable, day)
                del rows
                for name, written in files.items():
                    if name in found:
                        written.write(at, found[name])
                with storing:
                    changed[0] += changed_here
                    for name, table in tables.items():
                        if name in found:
                            table.append(found[name])

        with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="sample-pass") as pool:
            for done in [pool.submit(work) for _ in range(WORKERS)]:
                done.result()  # a worker's error is the run's
    return changed[0]


def _spill_ranges(
    con: duckdb.DuckDBPyConnection, series: _Series, per_range: int, folder: Path
) -> list[Path]:
    """The day's judged rows read in one streamed query and set apart by range of GPUs, each range into a file
    of its own (Arrow IPC, LZ4: written and read back once; compressed, the files cost less to write than their
    plain bytes cost the page cache, and take a quarter of the temp disk).

    Why not a query per range: a range's rows lie in pages of every stored part, and each part's page is read
    and decompressed whole for the few rows of the range in it, so per range the rows cost several times what
    one scan of the day costs them. The query itself names each row's series place and range (a join with the
    series, which costs the scan little), so that Python only cuts the batches."""
    count = (len(series.uuid) + per_range - 1) // per_range
    con.register(
        "sample_pass__places",
        pa.table(
            {
                "series_key": series.key,
                "place": np.arange(series.key.size, dtype=np.int32),
                "range_at": ((series.gpu - 1) // per_range).astype(np.int32),
            }
        ),
    )
    # A metric's code is its place in READ_METRICS, found by one list search per row (cheaper than a CASE).
    metric_code = "(list_position([" + ", ".join(f"'{m}'" for m in READ_METRICS) + "], j.metric) - 1)"
    # The value a row is taken at, negated where the judgement clamped it (a value taken is never negative,
    # and one ignored is null): the rows whose value was changed are counted for int_dcgm_quarantine at no
    # cost to the scan, where a column of its own would cost one per row.
    query = (
        f"select p.place, (j.ts_ms - getvariable('window_start_ms'))::integer as ts_offset, "
        f"{metric_code}::utinyint as metric, "
        "case when j.value > j.clean_value then -j.clean_value else j.clean_value end as clean_value, "
        "p.range_at from stg_dcgm_judged as j left join sample_pass__places as p using (series_key) "
        "where not j.dropped and j.value_read"
    )
    options = pa.ipc.IpcWriteOptions(compression="lz4")
    writers: dict[int, pa.ipc.RecordBatchFileWriter] = {}

    def set_apart(batch: pa.RecordBatch) -> None:
        if batch["place"].null_count:
            raise AccountingError(
                "a judged DCGM row's series key names no series of the day (stg_dcgm_series)"
            )
        where = batch["range_at"].to_numpy()
        columns = tuple(
            batch[name].to_numpy(zero_copy_only=False)  # a null value: nan
            for name in ("place", "ts_offset", "metric", "clean_value")
        )
        # A stored part is in GPU order, so a batch is a few runs in range order: each piece of one range is a
        # slice. A batch cut into many more pieces than there are ranges (a raw zone in time order) is sorted.
        cuts = np.flatnonzero(where[1:] != where[:-1]) + 1
        if cuts.size < 4 * count:
            firsts = np.r_[0, cuts]
            pieces = zip(
                where[firsts].tolist(), firsts.tolist(), np.r_[cuts, where.size].tolist(), strict=True
            )
        else:
            order = np.argsort(where, kind="stable")
            columns = tuple(column[order] for column in columns)
            sizes = np.bincount(where, minlength=count)
            ends = np.cumsum(sizes)
            pieces = ((at, int(ends[at] - sizes[at]), int(ends[at])) for at in np.flatnonzero(sizes).tolist())
        for at, first, end in pieces:
            if at not in writers:
                writers[at] = pa.ipc.new_file(folder / f"range-{at:06d}.arrow", SPILL_SCHEMA, options=options)
            writers[at].write_batch(
                pa.record_batch([column[first:end] for column in columns], schema=SPILL_SCHEMA)
            )

    try:
        # One batch set apart while the session reads the next.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sample-pass-spill") as helper:
            pending = None
            for batch in con.sql(query).to_arrow_reader(SPILL_BATCH_ROWS):
                if pending is not None:
                    pending.result()
                pending = helper.submit(set_apart, batch) if batch.num_rows else None
            if pending is not None:
                pending.result()
    finally:
        for writer in writers.values():
            writer.close()
        con.unregister("sample_pass__places")
    return [folder / f"range-{at:06d}.arrow" for at in sorted(writers)]


@dataclass(frozen=True)
class _Rows:
    """A range's judged rows: each row's series place, time, metric (its place in READ_METRICS) and value."""

    place: np.ndarray
    ts: np.ndarray
    metric: np.ndarray
    value: np.ndarray


def _read_spilled(path: Path, day: _Day) -> tuple[_Rows, int]:
    """A range's rows, read back from its spill file (which is then removed), and how many of them had their
    value ignored (nan) or clamped (spilled negated: taken at its magnitude)."""
    with pa.OSFile(str(path)) as source:
        table = pa.ipc.open_file(source).read_all()
    path.unlink()
    place, ts_offset, metric, value = (
        np.concatenate([chunk.to_numpy() for chunk in table[name].chunks]) for name in SPILL_SCHEMA.names
    )
    ts = ts_offset.astype(np.int64) + day.window_start_ms
    changed = int(np.count_nonzero(~(value >= 0)))
    return _Rows(place, ts, metric, np.abs(value) if changed else value), changed


def _order(gpu: np.ndarray, ts: np.ndarray, place: np.ndarray, metric: np.ndarray) -> np.ndarray | None:
    """The order that puts a range's rows in the raw zone's order (GPU, time, series, metric), or None where
    each GPU's rows already lie together in that order, whatever the order of the GPUs: the pass reads each
    GPU's rows as a run of neighbours, never two GPUs in turn. A range set apart from several stored parts
    (each in GPU order, a node group's GPUs in one) is such runs, so it is checked, not sorted."""
    boundary = gpu[1:] != gpu[:-1]
    starts = np.flatnonzero(boundary) + 1
    if np.unique(gpu[np.r_[0, starts]]).size == starts.size + 1:  # no GPU in two runs
        # In order inside each run: (time, series, metric) never goes down but where a run starts.
        within = combined_key([ts - ts.min(), place - place.min(), metric.astype(np.int64)])
        if within is not None and np.all(boundary | (within[1:] >= within[:-1])):
            return None
    return lexicographic_order([gpu - gpu.min(), ts - ts.min(), place - place.min(), metric.astype(np.int64)])


def _gaps_by_node(node: np.ndarray, gap_ms: np.ndarray) -> dict[str, np.ndarray | pa.Array]:
    """How many gaps of each length (whole seconds, at most LONGEST_GAP_S) lie between consecutive samples of a
    GPU, per node (R1: the interval dcgm-exporter is scraped at, which Δ must be)."""
    if not node.size:
        return {}
    seconds = np.minimum((gap_ms + 500) // 1000, LONGEST_GAP_S)
    least = int(node.min())
    counts = np.bincount((node.astype(np.int64) - least) * (LONGEST_GAP_S + 1) + seconds)
    found = np.flatnonzero(counts)
    nodes = (found // (LONGEST_GAP_S + 1) + least).astype(np.int32)
    return {
        "node_key": _nullable(nodes, nodes != NONE, pa.int32()),
        "gap_s": (found % (LONGEST_GAP_S + 1)).astype(np.int32),
        "gaps": counts[found],
    }


def _one_range(
    rows: _Rows,
    series: _Series,
    classes: _Classes,
    prices: _NodeSpans,
    unschedulable: _NodeSpans,
    day: _Day,
) -> dict[str, dict[str, np.ndarray | pa.Array]]:
    """The pass's rows of one range of GPUs, by the table they go to."""
    out: dict[str, dict[str, np.ndarray | pa.Array]] = {}
    if rows.ts.size == 0:
        return out
    place, ts, metric, value = rows.place, rows.ts, rows.metric, rows.value
    gpu = series.gpu[place]
    order = _order(gpu, ts, place, metric)
    if order is not None:
        place, ts, metric, value, gpu = place[order], ts[order], metric[order], value[order], gpu[order]

    # The pivot (tests/reference_sql/stg_dcgm_samples.sql): one sample per series and time, its metrics'
    # values (a metric read twice: the largest, R1), whether the series is observed then (R4) and whether a
    # metric was read more than once.
    seg_start = _starts(place, ts)
    samples = seg_start.size
    seg = np.repeat(np.arange(samples), np.diff(np.r_[seg_start, ts.size]))
    cell = seg * len(READ_METRICS) + metric
    pivot = np.full(samples * len(READ_METRICS), np.nan)
    last = np.r_[cell[1:] != cell[:-1], True]  # copies of one reading are neighbours: each cell set once
    if last.all():  # no reading copied (nearly every range)
        pivot[cell] = value
        has_copies = np.zeros(samples, dtype=bool)
    else:
        pivot[cell[last]] = value[last]
        np.fmax.at(pivot, cell[~last], value[~last])
        read_values = np.bincount(seg[~np.isnan(value)], minlength=samples)
        has_copies = read_values > (~np.isnan(pivot)).reshape(samples, len(READ_METRICS)).sum(axis=1)
    pivot = pivot.reshape(samples, len(READ_METRICS))
    observed = np.logical_or.reduceat(OBSERVES[metric], seg_start)
    s_place, s_ts = place[seg_start], ts[seg_start]
    del seg, cell, place, metric, value
    gr, util, fb, energy, xid = (pivot[:, c] for c in (GR, UTIL, FB, ENERGY, XID))
    s_gpu = gpu[seg_start]
    s_instance = series.instance[s_place]
    s_in_day = (s_ts >= day.day_start_ms) & (s_ts < day.day_end_ms)
    if has_copies.any():
        out[COPIED_SAMPLES] = {"series_key": series.key[s_place[has_copies]], "ts_ms": s_ts[has_copies]}

    # int_gpu_samples' readings: the series samples of one GPU and time, together (R4: the node, model and
    # holders are those of the series observed; an XID on any series tells the GPU's health).
    g_start = _starts(s_gpu, s_ts)
    s_node = series.node[s_place]
    g_node = _least(np.where(observed, s_node, NONE), g_start)
    # For one UUID on two nodes (below): a missing node label counts as one node, the least.
    s_node_or_least = np.maximum(s_node, 0)
    g_node_last = np.maximum.reduceat(np.where(observed, s_node_or_least, NONE), g_start)
    g_model = _least(np.where(observed, series.model[s_place], NONE), g_start)
    s_holder = np.where(observed, series.holder[s_place], NONE)
    g_first_holder, g_last_holder = _least(s_holder, g_start), _most(s_holder, g_start)
    flags = (
        (np.nan_to_num(xid) != 0).astype(np.uint8)
        | ((observed & s_instance).astype(np.uint8) << 1)
        | ((observed & ~s_instance & (~np.isnan(util) | series.has_pod[s_place])).astype(np.uint8) << 2)
        | (observed.astype(np.uint8) << 3)
    )
    if series.any_unverified:
        flags |= (observed & series.holder_unverified[s_place]).astype(np.uint8) << 4
    g_flags = np.bitwise_or.reduceat(flags, g_start)
    # R10: energy is a GPU-level counter. dcgm-exporter's default (flex) device mode watches a MIG GPU only
    # through its instances, each repeating the GPU's reading: taken where the GPU's own series has none.
    g_energy = np.fmax.reduceat(np.where(s_instance, np.nan, energy), g_start)
    if np.isnan(g_energy).any():
        g_energy = np.where(
            np.isnan(g_energy), np.fmax.reduceat(np.where(s_instance, energy, np.nan), g_start), g_energy
        )
    g_fb = np.fmax.reduceat(np.where(s_instance, np.nan, fb), g_start)
    g_gr = np.fmax.reduceat(gr, g_start)
    g_util = np.fmax.reduceat(util, g_start)
    g_gpu, g_ts = s_gpu[g_start], s_ts[g_start]

    # One UUID reported by two nodes at one sample (R4): billed at the first node by name; the other's rows
    # are set aside (int_dcgm_quarantine).
    g_node_least = np.minimum.reduceat(np.where(observed, s_node_or_least, LEAST_NONE), g_start)
    several = (g_flags & 8 != 0) & (g_node_least != g_node_last)
    if several.any():
        out[UUIDS_ON_SEVERAL_NODES] = {
            "gpu_key": g_gpu[several],
            "ts_ms": g_ts[several],
            "billed_node_key": g_node[several],
        }

    # Each GPU's observed samples over time (the lookback too): energy steps, the previous sample, the mode.
    kept = np.flatnonzero(g_flags & 8)
    g_gpu, g_ts, g_flags, g_energy, g_fb, g_gr, g_util = (
        a[kept] for a in (g_gpu, g_ts, g_flags, g_energy, g_fb, g_gr, g_util)
    )
    g_node, g_model, g_first_holder, g_last_holder = (
        a[kept] for a in (g_node, g_model, g_first_holder, g_last_holder)
    )
    n = g_gpu.size
    new_gpu = np.r_[True, g_gpu[1:] != g_gpu[:-1]] if n else np.zeros(0, dtype=bool)
    gpu_start = np.maximum.accumulate(np.where(new_gpu, np.arange(n), 0)) if n else np.zeros(0, np.int64)
    has_prev = ~new_gpu
    prev_ts = np.r_[0, g_ts[:-1]] if n else g_ts
    # R10: energy since the GPU's previous reading; a counter that went down was reset and its new value is
    # what accrued since; no reading, or none before it: 0.
    prev_energy_at = _previous_valid(~np.isnan(g_energy), gpu_start)
    prev_energy = np.where(prev_energy_at >= 0, g_energy[np.maximum(prev_energy_at, 0)], np.nan)
    step = g_energy - prev_energy
    energy_step = np.where(np.isnan(step), 0.0, np.where(step >= 0, step, g_energy))
    # R3: MIG where a series of the GPU carries an instance, whole where its GPU-level series show what only a
    # whole GPU shows; else the mode last shown in the run of samples no more than two scrapes apart (a run
    # starts whole). Only a GPU that ever shows an instance can be MIG.
    run_start = new_gpu | (g_ts - prev_ts > 2 * day.scrape_s * 1000)
    run_begin = np.maximum.accumulate(np.where(run_start, np.arange(n), 0)) if n else gpu_start
    shows = np.where(g_flags & 2 != 0, 1, np.where(g_flags & 4 != 0, 0, -1))
    decided = np.maximum.accumulate(np.where(shows >= 0, np.arange(n), -1)) if n else gpu_start
    shows_instances_ever = series.shows_instances[g_gpu]
    is_mig = shows_instances_ever & (decided >= run_begin) & (shows[np.maximum(decided, 0)] == 1)
    repeats = has_prev & (g_ts - prev_ts <= day.scrape_s * 500)
    in_day = (g_ts >= day.day_start_ms) & (g_ts < day.day_end_ms)
    gapped = has_prev & in_day
    if gapped.any():
        out[SAMPLE_GAPS] = _gaps_by_node(g_node[gapped], g_ts[gapped] - prev_ts[gapped])

    # R8: the rate card's price of the model's whole-GPU class, else the node's OpenCost price then; R11:
    # whether the node is unschedulable then. A sample of a model with no class is not one of the day's.
    model_keys = np.unique(g_model)
    classed = np.zeros(n, dtype=bool)
    weight = np.full(n, np.nan)
    class_units = np.full(n, np.nan)
    class_price = np.full(n, np.nan)
    own_units = np.full(n, np.nan)
    for model in model_keys.tolist():
        found = classes.whole.get(model)
        if found is None:
            continue
        here = g_model == model
        classed |= here
        weight[here] = found[0]
        class_units[here] = np.nan if found[1] is None else found[1]
        class_price[here] = np.nan if found[2] is None else found[2]
        own_units[here] = np.nan if found[3] is None else found[3]
    _, span_price = prices.at(g_node, g_ts)
    gpu_price = np.where(np.isnan(class_price), span_price, class_price)
    gpu_units = np.where(np.isnan(class_units), sql_round(span_price * 100000000), class_units)
    price_units = np.where(np.isnan(own_units), gpu_units, own_units)
    held_unschedulable, _ = unschedulable.at(g_node, g_ts)
    stored = in_day & classed
    holder = np.where(g_first_holder == g_last_holder, g_first_holder, NONE)
    busy = _busy(g_gr, g_util)
    energy_mj = sql_round(energy_step)
    at = np.flatnonzero(stored)
    device = series.whole_device[g_gpu[at]]
    out[GPU_SAMPLES] = {
        "gpu_key": g_gpu[at],
        "ts_ms": g_ts[at],
        "node_key": _nullable(g_node[at], g_node[at] != NONE, pa.int32()),
        "model_key": g_model[at],
        "is_mig": is_mig[at],
        "unhealthy": g_flags[at] & 1 != 0,
        "gpu_price_per_hour": _nullable(gpu_price[at], ~np.isnan(gpu_price[at]), pa.float64()),
        "gpu_price_units": _nullable(
            np.nan_to_num(gpu_units[at]).astype(np.int64), ~np.isnan(gpu_units[at]), pa.int64()
        ),
        "gpu_fb_used_mib": _nullable(g_fb[at], shows_instances_ever[at] & ~np.isnan(g_fb[at]), pa.float64()),
        "energy_joules": energy_step[at] / 1000.0,
        "energy_mj": energy_mj[at].astype(np.int64),
        "device_key": _nullable(device, device != NONE, pa.int32()),
        "weight": weight[at],
        "price_units": _nullable(
            np.nan_to_num(price_units[at]).astype(np.int64), ~np.isnan(price_units[at]), pa.int64()
        ),
        "busy": busy[at],
        "fb_used_mib": _nullable(g_fb[at], ~np.isnan(g_fb[at]), pa.float64()),
        "unschedulable": held_unschedulable[at],
        "labelled": g_first_holder[at] != NONE,
        "holder_key": _nullable(holder[at], holder[at] != NONE, pa.int32()),
        "repeats_scrape": repeats[at],
        "holder_unverified": g_flags[at] & 16 != 0,
    }

    # The GPU sample each series sample belongs to (NONE: not a stored sample of the day).
    s_reading = np.repeat(np.arange(g_start.size), np.diff(np.r_[g_start, s_ts.size]))
    stored_at = np.full(g_start.size, NONE, np.int64)
    stored_at[kept[at]] = at
    s_gpu_sample = stored_at[s_reading]

    # R5, R6: the pods the series of a whole GPU's sample name, where they name more than one.
    shared = np.zeros(n, dtype=bool)
    shared[at] = ~is_mig[at] & (g_first_holder[at] != NONE) & (g_first_holder[at] != g_last_holder[at])
    rows = np.flatnonzero(observed & (s_holder != NONE) & (s_gpu_sample != NONE))
    rows = rows[shared[s_gpu_sample[rows]]]
    holder_pairs = [(s_ts[rows], series.device[s_place[rows]], s_holder[rows])]

    # int_mig_instance_samples (R1, R3): the series samples of one instance at a stored MIG sample of its GPU
    # (vgpu copies of it collapse: the largest value, R6).
    mig_sample = np.zeros(n, dtype=bool)
    mig_sample[at] = is_mig[at]
    rows = np.flatnonzero(s_in_day & observed & s_instance & (s_gpu_sample != NONE))
    rows = rows[mig_sample[s_gpu_sample[rows]]]
    i_device = series.device[s_place[rows]]
    device_keys = int(series.device.max()) + 1  # a (GPU sample, device) pair as one integer key
    layout_of_sample, has_layout = np.zeros(n, np.uint64), np.zeros(n, dtype=bool)
    i_key = s_gpu_sample[rows] * device_keys + i_device
    if rows.size and np.any(i_key[1:] < i_key[:-1]):
        order = np.argsort(i_key, kind="stable")
        rows, i_key, i_device = rows[order], i_key[order], i_device[order]
    if rows.size:
        i_start = _starts(i_key)
        i_rows = rows[i_start]
        i_model = _least(series.model[s_place[rows]], i_start)
        i_profile = _least(series.profile[s_place[rows]], i_start)
        i_gr, i_util, i_fb = (np.fmax.reduceat(column[rows], i_start) for column in (gr, util, fb))
        i_series_holder = series.holder[s_place[rows]]
        i_first, i_last = _least(i_series_holder, i_start), _most(i_series_holder, i_start)
        i_weight, i_own = classes.instance_class(i_model, i_profile)
        classed_instance = ~np.isnan(i_weight)
        g = s_gpu_sample[i_rows]
        keep = np.flatnonzero(classed_instance)
        g, w = g[keep], i_weight[keep]
        i_units = np.where(np.isnan(i_own[keep]), gpu_units[g], i_own[keep])
        i_busy = _busy(i_gr[keep], i_util[keep])
        g_fb_mig = np.where(shows_instances_ever[g], g_fb[g], np.nan)
        i_fb_used = np.where(np.isnan(i_fb[keep]), g_fb_mig * w, i_fb[keep])
        i_holder = np.where(i_first[keep] == i_last[keep], i_first[keep], NONE)
        # R3: a MIG sample's layout, keyed by its instances (device, profile and model: a layout is one set of
        # classes), in any order. The same key is the same instances, so the marts sum a layout's samples
        # by its key and weigh it once (int_mig_layout_instances), never joining instances to their samples.
        kept_device = i_device[i_start][keep]
        at_sample = _starts(g)
        layouts = (
            np.bitwise_xor.reduceat(_mixed(kept_device, i_profile[keep], i_model[keep]), at_sample)
            if g.size
            else np.zeros(0, np.uint64)
        )
        layout_of_sample[g[at_sample]] = layouts
        has_layout[g[at_sample]] = True
        out[MIG_INSTANCE_SAMPLES] = {
            "device_key": kept_device,
            "ts_ms": s_ts[i_rows][keep],
            "gpu_key": g_gpu[g],
            "node_key": _nullable(g_node[g], g_node[g] != NONE, pa.int32()),
            "model_key": i_model[keep],
            "profile_key": i_profile[keep],
            "weight": w,
            "price_units": _nullable(np.nan_to_num(i_units).astype(np.int64), ~np.isnan(i_units), pa.int64()),
            "busy": i_busy,
            "fb_used_mib": _nullable(i_fb_used, ~np.isnan(i_fb_used), pa.float64()),
            "unhealthy": g_flags[g] & 1 != 0,
            "energy_joules": energy_step[g] / 1000.0 * w,
            "energy_mj": energy_mj[g].astype(np.int64),
            "unschedulable": held_unschedulable[g],
            "labelled": i_first[keep] != NONE,
            "holder_key": _nullable(i_holder, i_holder != NONE, pa.int32()),
            "mig_layout_key": np.repeat(layouts, np.diff(np.r_[at_sample, g.size])),
        }
        # R5, R6: the pods the series of an instance's sample name, where they name more than one.
        shared_instance = np.zeros(i_start.size, dtype=bool)
        shared_instance[keep] = (i_first[keep] != NONE) & (i_first[keep] != i_last[keep])
        of_row = np.repeat(np.arange(i_start.size), np.diff(np.r_[i_start, rows.size]))
        named = shared_instance[of_row] & (i_series_holder != NONE)
        holder_pairs.append((s_ts[rows[named]], i_device[named], i_series_holder[named]))
    ts_pairs, device_pairs, holder_of_pairs = (
        np.concatenate(parts) for parts in zip(*holder_pairs, strict=True)
    )
    if ts_pairs.size:
        unique = pl.DataFrame(
            {"ts_ms": ts_pairs, "device_key": device_pairs, "holder_key": holder_of_pairs}
        ).unique()
        out[SHARED_SAMPLE_HOLDERS] = {name: unique[name].to_numpy() for name in unique.columns}

    out[GPU_SAMPLES]["mig_layout_key"] = _nullable(layout_of_sample[at], has_layout[at], pa.uint64())

    # R1, R6: a device sample of the day whose vgpu copies disagree (reported, never resolved silently).
    rows = np.flatnonzero(s_in_day & series.vgpu_copy[s_place])
    if rows.size:
        d_device = series.device[s_place[rows]]
        d_key = s_reading[rows] * device_keys + d_device
        if np.any(d_key[1:] < d_key[:-1]):
            order = np.argsort(d_key, kind="stable")
            rows, d_key, d_device = rows[order], d_key[order], d_device[order]
        d_start = _starts(d_key)
        disagree = np.zeros(d_start.size, dtype=bool)
        for column in (gr, util):
            low, high = np.fmin.reduceat(column[rows], d_start), np.fmax.reduceat(column[rows], d_start)
            disagree |= low < high
        d_node = _least(series.node[s_place[rows]], d_start)
        out[VGPU_COPY_CONFLICTS] = {
            "device_key": d_device[d_start][disagree],
            "ts_ms": s_ts[rows][d_start][disagree],
            "node_key": _nullable(d_node[disagree], d_node[disagree] != NONE, pa.int32()),
        }
    return out
