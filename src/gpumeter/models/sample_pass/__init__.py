"""The sample pass: the day's DCGM rows, already judged (stg_dcgm_judged), read in one streamed query and set
apart by range of GPUs (_spill_ranges), then turned a range at a time (samples_of_range) into the GPU samples
(int_gpu_samples) and MIG instance samples (int_mig_instance_samples), with the few things the other models
read from each series' samples (int_dcgm_quarantine, int_vgpu_copy_conflicts, int_keyed_device_holders). The
rules are those docs/rules.md states and tests/reference_sql/ holds as SQL: each step names the rule it applies.

This module is the pass in the session: what it reads, how the day's rows are set apart and read back, and the
steps of a range in turn. The steps, one function per rule, are in its modules by what they compute:
series_samples (R1: one sample per series and time), gpu_samples (R4 observed samples, R3 MIG mode, R10 energy
steps, R8 prices, R5/R6 holders, R1 repeated scrapes and gaps), instance_samples (R3 MIG instances and layouts,
R5/R6 shared holders, R1/R6 vgpu copies); inputs holds what a range is metered with, runs the array operations
the steps share, tables what the pass writes.

Why a pass and not SQL: the SQL grouped the day's rows three times by hash (series and time, GPU and time,
instance and time), each a state per sample for tens of millions of samples. The raw zone stores each part in
GPU order (gpumeter.ingest.row_order), so here each grouping is a run of neighbours. The order is checked,
never assumed: a range of rows not in order is sorted first, which costs time, not correctness."""

from __future__ import annotations

import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from gpumeter.models.project import SESSION_FOLDER, AccountingError
from gpumeter.models.sample_pass.gpu_samples import (
    GpuFindings,
    device_prices,
    energy_steps,
    gpu_readings,
    gpu_sample_columns,
    mig_mode,
    observed_samples,
    repeated_scrapes,
    sample_gaps,
    sample_links,
    unschedulable_samples,
    uuids_on_several_nodes,
)
from gpumeter.models.sample_pass.inputs import (
    READ_METRICS,
    Classes,
    Day,
    Inputs,
    NodeSpans,
    Rows,
    Series,
)
from gpumeter.models.sample_pass.instance_samples import (
    classed_instances,
    instance_holders,
    instance_readings,
    instance_sample_columns,
    layout_column,
    mig_layouts,
    shared_sample_holders,
    vgpu_copy_conflicts,
    whole_gpu_holders,
)
from gpumeter.models.sample_pass.series_samples import copied_samples, rows_order, series_samples
from gpumeter.models.sample_pass.tables import (
    COPIED_SAMPLES,
    GPU_SAMPLE_SCHEMA,
    GPU_SAMPLES,
    MIG_INSTANCE_SAMPLE_SCHEMA,
    MIG_INSTANCE_SAMPLES,
    SAMPLE_GAPS,
    SHARED_SAMPLE_HOLDERS,
    SIDE_SCHEMAS,
    UUIDS_ON_SEVERAL_NODES,
    VGPU_COPY_CONFLICTS,
    Columns,
    Files,
    Table,
)

__all__ = [
    "CHANGED_VALUES_SEEN",
    "COPIED_SAMPLES",
    "DROPPED_ROWS_SEEN",
    "GPU_SAMPLES",
    "MIG_INSTANCE_SAMPLES",
    "SAMPLE_GAPS",
    "SHARED_SAMPLE_HOLDERS",
    "UUIDS_ON_SEVERAL_NODES",
    "VGPU_COPY_CONFLICTS",
    "rows_order",
    "run",
    "samples_of_range",
]

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
# Session variables the pass sets for int_dcgm_quarantine, which reads them by these names: whether the day has
# a judged row that is dropped, and one whose value the judgement ignored or clamped. DuckDB folds a variable
# into the query as it plans it, so a branch of the quarantine that can hold no row is not planned at all: an
# empty table joined to the day's rows would still have them scanned.
DROPPED_ROWS_SEEN = "sample_pass__dropped_rows_seen"
CHANGED_VALUES_SEEN = "sample_pass__changed_values_seen"


def _day(con: duckdb.DuckDBPyConnection) -> Day:
    """The session's variables the pass reads (gpumeter.models.runner sets them)."""
    (row,) = con.sql(
        "select getvariable('window_start_ms'), getvariable('day_start_ms'), getvariable('day_end_ms'), "
        "getvariable('scrape_s')"
    ).fetchall()
    return Day(int(row[0]), int(row[1]), int(row[2]), float(row[3]))


def _series(con: duckdb.DuckDBPyConnection) -> Series:
    """The day's series (stg_dcgm_series) in the order the raw zone stores their rows: by GPU, then key."""
    return Series.of(
        con.sql(
            "select series_key, gpu_key, device_key, coalesce(node_key, -1) as node_key, "
            "coalesce(model_key, -1) as model_key, coalesce(profile_key, -1) as profile_key, "
            "coalesce(holder_key, -1) as holder_key, gpu_i_id is not null as instance, pod is not null as has_pod, "
            "holder_unverified, gpu_shows_instances, vgpu_copy, uuid "
            "from stg_dcgm_series order by gpu_key, series_key"
        ).to_arrow_table()
    )


def _inputs(con: duckdb.DuckDBPyConnection, series: Series) -> Inputs:
    """What each range is metered with: the day, its series, the device classes (int_keyed_device_classes),
    the nodes' OpenCost GPU prices (R8) and unschedulable spans (R11)."""
    day = _day(con)
    classes = Classes.of(
        con.sql(
            "select model_key, profile_key, weight, gpu_price_units, gpu_price_per_hour, device_price_units "
            "from int_keyed_device_classes"
        ).fetchall()
    )
    prices = NodeSpans.of(
        con.sql(
            "select k.node_key, p.from_ms, p.until_ms, p.gpu_price_per_hour as value "
            "from int_node_gpu_price_spans as p join stg_dcgm_nodes as k on k.node = p.node"
        ).to_arrow_table()
    )
    unschedulable = NodeSpans.of(
        con.sql(
            "select k.node_key, u.from_ms, u.until_ms, 0.0 as value "
            "from int_node_unschedulable_spans as u join stg_dcgm_nodes as k on k.node = u.node"
        ).to_arrow_table()
    )
    return Inputs(day, series, classes, prices, unschedulable)


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
    series = _series(con)
    files = {
        GPU_SAMPLES: Files(Path(folder) / GPU_SAMPLES, GPU_SAMPLE_SCHEMA),
        MIG_INSTANCE_SAMPLES: Files(Path(folder) / MIG_INSTANCE_SAMPLES, MIG_INSTANCE_SAMPLE_SCHEMA),
    }
    tables = {name: Table(con, name, schema) for name, schema in SIDE_SCHEMAS.items()}
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
    series: Series,
    raw_rows: int,
    folder: Path,
    files: dict[str, Files],
    tables: dict[str, Table],
) -> int:
    """The day's judged DCGM rows, set apart by range of GPUs (in UUID order), a range at a time through the
    pass (`raw_rows`: the day's raw rows, which size the ranges); how many of them had their value ignored or
    clamped."""
    gpus = len(series.uuid)
    inputs = _inputs(con, series)
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
                rows, changed_here = _read_spilled(path, inputs.day)
                found = samples_of_range(rows, inputs)
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


def _spill_ranges(con: duckdb.DuckDBPyConnection, series: Series, per_range: int, folder: Path) -> list[Path]:
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


def _read_spilled(path: Path, day: Day) -> tuple[Rows, int]:
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
    return Rows(place, ts, metric, np.abs(value) if changed else value), changed


def samples_of_range(rows: Rows, inputs: Inputs) -> dict[str, Columns]:
    """The pass's rows of one range of GPUs, by the table they go to: the rules' steps in turn."""
    out: dict[str, Columns] = {}
    if rows.ts.size == 0:
        return out
    day, series = inputs.day, inputs.series
    gpu = series.gpu[rows.place]
    order = rows_order(gpu, rows.ts, rows.place, rows.metric)
    if order is not None:
        rows = Rows(rows.place[order], rows.ts[order], rows.metric[order], rows.value[order])
        gpu = gpu[order]
    samples = series_samples(rows, gpu, series, day)
    del rows, gpu
    _put(out, COPIED_SAMPLES, copied_samples(samples, series))

    # int_gpu_samples: each GPU's readings at a time, its observed samples, and what the rules find of them.
    readings = gpu_readings(samples, series)
    _put(out, UUIDS_ON_SEVERAL_NODES, uuids_on_several_nodes(samples, readings))
    gpus = observed_samples(readings, series)
    in_day = day.holds(gpus.ts)
    _put(out, SAMPLE_GAPS, sample_gaps(gpus, in_day))
    prices = device_prices(gpus, inputs.classes, inputs.prices)
    found = GpuFindings(
        is_mig=mig_mode(gpus, day),
        energy=energy_steps(gpus),
        prices=prices,
        unschedulable=unschedulable_samples(gpus, inputs.unschedulable),
        repeats_scrape=repeated_scrapes(gpus, day),
    )
    at = np.flatnonzero(in_day & prices.classed)  # the samples stored: of the day, of a model with a class
    out[GPU_SAMPLES] = gpu_sample_columns(gpus, at, found, series)
    links = sample_links(samples, readings, gpus, at)
    holders = [whole_gpu_holders(samples, series, gpus, links.gpu_sample, at, found.is_mig)]

    # int_mig_instance_samples: the instances at the stored MIG samples, and each MIG sample's layout.
    mig_sample = np.zeros(gpus.gpu.size, dtype=bool)
    mig_sample[at] = found.is_mig[at]
    instances = instance_readings(samples, series, links.gpu_sample, mig_sample)
    layouts = None
    if instances is not None:
        kept = classed_instances(instances, samples, inputs.classes)
        layouts = mig_layouts(kept)
        out[MIG_INSTANCE_SAMPLES] = instance_sample_columns(instances, kept, layouts, gpus, found)
        holders.append(instance_holders(instances, kept, samples))
    out[GPU_SAMPLES]["mig_layout_key"] = layout_column(layouts, at, gpus.gpu.size)
    _put(out, SHARED_SAMPLE_HOLDERS, shared_sample_holders(holders))
    _put(out, VGPU_COPY_CONFLICTS, vgpu_copy_conflicts(samples, series, links.reading))
    return out


def _put(out: dict[str, Columns], name: str, columns: Columns | None) -> None:
    """A table's rows of the range, where it has any."""
    if columns is not None:
        out[name] = columns
