"""What the sample pass writes: the tables' names and schemas, and how a range's rows reach them (the samples as
Parquet files of the session's folder, the small tables as tables of the session)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpumeter.storage.objectstore import sql_path_list

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
# The samples' columns of a few values per GPU, stored as dictionaries (Files).
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

# A table's columns as a range computes them.
Columns = dict[str, np.ndarray | pa.Array]


def nullable(values: np.ndarray, valid: np.ndarray, kind: pa.DataType) -> pa.Array:
    """The values as an Arrow array, null where not valid."""
    if valid.all():  # no null: no mask to build
        return pa.array(values, type=kind)
    return pa.array(values, type=kind, mask=~valid)


class Table:
    """Appends each range's rows to a table of the session (created with its schema before the first range),
    one insert at a time: the workers use the session only once the day's rows are set apart."""

    def __init__(self, con: duckdb.DuckDBPyConnection, name: str, schema: pa.Schema) -> None:
        self.con, self.name, self.schema = con, name, schema
        con.execute(f"drop table if exists {name}")
        con.register("sample_pass__empty", schema.empty_table())
        con.execute(f"create table {name} as select * from sample_pass__empty")
        con.unregister("sample_pass__empty")

    def append(self, columns: Columns) -> None:
        table = pa.table(columns, schema=self.schema)
        if table.num_rows:
            self.con.register("sample_pass__rows", table)
            self.con.execute(f"insert into {self.name} select * from sample_pass__rows")
            self.con.unregister("sample_pass__rows")


class Files:
    """A table of tens of millions of rows as Parquet files in the session's folder, one per range, which the
    session reads through a view. Why not a table: storing the rows in DuckDB (compressed into its file) cost
    more than the rest of the pass's work on them, and the models read each column once or twice."""

    def __init__(self, folder: Path, schema: pa.Schema) -> None:
        self.folder, self.schema = folder, schema
        folder.mkdir(parents=True)  # the session's folder is new: nothing of an earlier run is in it

    def write(self, at: int, columns: Columns) -> None:
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
