"""kube-state-metrics, OpenCost and Kueue samples stored as value spans (R1a).

A kube series (metric, labels, target) repeats one value scrape after scrape: a pod's phase, a node's
capacity, a label set that changes a few times a day. The pull stores a day's kube samples as spans instead of
rows: one row per run of a target's consecutive scrapes that show a series with one value (and as many copies
of it), from its first sample (`ts_ms`) to its last (`last_ms`), plus one row per scrape of each target
(`metric` null, `target` the scrape target): the scrape times that R1a's staleness reads. Nothing the
accounting reads is lost: the series' samples are the span's value at every scrape of its target from
`ts_ms` to `last_ms`, `copies` times each (decode_spans). Rows without a metric or a time are no sample of any
series; their scrape times are kept.

The target of a sample is its `target`, or where the source does not name it the exporter its metric comes
from (its name up to the first `_`), as staging reads it (macro scrape_target).

A day whose kube samples are handed over as series (the Prometheus pull) has its spans made part by part
from them (gpumeter.ingest.kube_series); a day handed over as rows has them made by DuckDB (create_spans).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpumeter.ingest.kube_series import SPAN_ORDER, KubeSeries, SpanBuilder
from gpumeter.ingest.schema import RAW_KUBE_SCHEMA, RAW_KUBE_SPANS_SCHEMA, RAW_TABLES
from gpumeter.storage.files import parquet_write_options
from gpumeter.storage.objectstore import sql_path_list

# The raw tables as the pull stores them: the kube samples as spans.
STORED_RAW_TABLES = {**RAW_TABLES, "raw_kube_samples": RAW_KUBE_SPANS_SCHEMA}

# The bitmap of a (series, value)'s scrapes has a bit per scrape of the day: up to this many scrapes of one
# target (one every ~4 s over a day and its lookback) it is built; beyond, every series takes the exact path.
_BITMAP_SCRAPES = 25_000


def _scrapes_statement(rows: str, into: str) -> str:
    """Every scrape of every target (cluster, scrape target, time), numbered in time order per target."""
    return f"""create or replace temp table {into}__scrapes as
        select
            cluster,
            scrape_target,
            ts_ms,
            row_number() over (partition by cluster, scrape_target order by ts_ms)::integer as scrape_no
        from (
            select distinct r.cluster, {_TARGET} as scrape_target, r.ts_ms
            from {rows} as r
            where r.ts_ms is not null
        )"""


_TARGET = "coalesce(r.target, split_part(r.metric, '_', 1))"


def _span_statements(rows: str, into: str, scrape_count: int) -> list[str]:
    """The SQL that makes the temp table `into` (RAW_KUBE_SPANS_SCHEMA) from the kube rows of the relation
    `rows` (RAW_KUBE_SCHEMA) and their scrapes (_scrapes_statement), in order. `scrape_count`: the most
    scrapes of one target."""
    target = _TARGET
    same_scrape = (
        f"s.cluster is not distinct from r.cluster and s.scrape_target is not distinct from {target} "
        "and s.ts_ms = r.ts_ms"
    )
    # A (series, value) whose rows are one per scrape, at consecutive scrapes of its target, is one span: the
    # count of its rows, of their distinct scrapes (a bitmap) and the scrape numbers of its first and last row
    # say so. The others (a value that comes back, copies) take the exact path: a span per run of equal copies.
    bitmap = f"bit_count(bitstring_agg(s.scrape_no, 1, {scrape_count}))"
    distinct = bitmap if scrape_count <= _BITMAP_SCRAPES else "null::bigint"
    key = "cluster, metric, labels, target, value"
    return [
        f"""create or replace temp table {into}__groups as
        select
            r.cluster, r.metric, r.labels, r.target, r.value,
            min(r.ts_ms) as ts_ms,
            max(r.ts_ms) as last_ms,
            min(s.scrape_no) as first_no,
            max(s.scrape_no) as last_no,
            count(*) as rows,
            {distinct} as scrapes
        from {rows} as r
        join {into}__scrapes as s on {same_scrape}
        where r.metric is not null
        group by r.cluster, r.metric, r.labels, r.target, r.value""",
        f"""create or replace temp table {into} as
        with runs as (
            select {key}, ts_ms, last_ms, 1 as copies
            from {into}__groups
            where rows = scrapes and rows = last_no - first_no + 1
        ),
        uneven as (
            select {key} from {into}__groups where not coalesce(rows = scrapes and rows = last_no - first_no + 1, false)
        ),
        samples as (
            select r.cluster, r.metric, r.labels, r.target, r.value, r.ts_ms, count(*) as copies,
                   any_value(s.scrape_no) as scrape_no
            from {rows} as r
            join {into}__scrapes as s on {same_scrape}
            semi join uneven as u
                on u.cluster is not distinct from r.cluster
                and u.metric = r.metric
                and u.labels is not distinct from r.labels
                and u.target is not distinct from r.target
                and u.value is not distinct from r.value
            where r.metric in (select distinct metric from uneven)
            group by r.cluster, r.metric, r.labels, r.target, r.value, r.ts_ms
        ),
        uneven_runs as (
            -- Consecutive scrapes of one value and as many copies: their scrape numbers less their rank.
            select {key}, min(ts_ms) as ts_ms, max(ts_ms) as last_ms, copies
            from (
                select
                    *,
                    scrape_no - row_number() over (partition by {key}, copies order by ts_ms) as run
                from samples
            )
            group by {key}, copies, run
        )
        select cluster, ts_ms, last_ms, metric, value, labels, target, copies::integer as copies
        from (select * from runs union all select * from uneven_runs)
        union all
        select cluster, ts_ms, ts_ms as last_ms, null, null, null, scrape_target, null
        from {into}__scrapes""",
        f"drop table {into}__groups",
        f"drop table {into}__scrapes",
    ]


def create_spans(con: duckdb.DuckDBPyConnection, rows: str, into: str) -> None:
    """Make the temp table `into` of spans (RAW_KUBE_SPANS_SCHEMA) from the kube rows of the relation `rows`."""
    con.execute(_scrapes_statement(rows, into))
    ((scrapes,),) = con.execute(f"select coalesce(max(scrape_no), 1) from {into}__scrapes").fetchall()
    for statement in _span_statements(rows, into, int(scrapes)):
        con.execute(statement)


class KubeSpanStaging:
    """A staged raw day (gpumeter.storage.day_parts.DayInParts, its kube table in RAW_KUBE_SPANS_SCHEMA) whose kube
    rows are kept aside, part by part, and stored as spans at commit: a span runs over many parts (an hour of
    Prometheus answers, a row group of a Parquet source). `rows` counts the kube samples handed over."""

    KUBE = "raw_kube_samples"

    def __init__(self, staged, scratch: Path, memory_limit: str) -> None:  # noqa: ANN001 - a DayInParts
        self.staged = staged
        self.scratch = scratch
        self.memory_limit = memory_limit
        self._writer: pq.ParquetWriter | None = None
        self._builder: SpanBuilder | None = None
        self._samples = 0

    @property
    def rows(self) -> dict[str, int]:
        return {**self.staged.rows, self.KUBE: self._samples}

    def write(self, table: str, rows: pa.Table) -> None:
        if table != self.KUBE:
            self.staged.write(table, rows)
            return
        if self._builder is not None:
            raise ValueError("kube samples handed over both as series and as rows")
        if self._writer is None:
            self.scratch.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.scratch / "kube-rows.parquet", RAW_KUBE_SCHEMA)
        self._writer.write_table(rows.select(RAW_KUBE_SCHEMA.names).cast(RAW_KUBE_SCHEMA))
        self._samples += rows.num_rows

    def write_series(self, part: KubeSeries) -> None:
        """A part of the day's kube samples as series (KubeSeries: parts in time order): made into runs now,
        joined into the day's spans at commit. A day is handed over as rows or as series, not both."""
        if self._writer is not None:
            raise ValueError("kube samples handed over both as rows and as series")
        if self._builder is None:
            self._builder = SpanBuilder()
        before = self._builder.samples
        self._builder.add(part)
        self._samples += self._builder.samples - before

    def commit(self) -> dict[str, int]:
        """Store the spans with the other tables; rows per table (samples for the kube table)."""
        if self._builder is not None:
            self.staged.write(self.KUBE, self._builder.table())
            self._builder = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self.staged.write(self.KUBE, self.spans_of([self.scratch / "kube-rows.parquet"]))
        counts = self.staged.commit()
        shutil.rmtree(self.scratch, ignore_errors=True)
        return {**counts, self.KUBE: self._samples}

    def discard(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self.staged.discard()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def spans_of(self, paths: list[Path]) -> pa.Table:
        """The spans of the kube rows in the Parquet files `paths`, in time order."""
        con = duckdb.connect()
        try:
            con.execute("set threads to 2")
            con.execute("set memory_limit = ?", [self.memory_limit])
            con.execute("set temp_directory = ?", [str(self.scratch / "duckdb")])
            con.execute("set preserve_insertion_order = false")
            files = sql_path_list(paths)
            stored = {r[0] for r in con.execute(f"select name from parquet_schema([{files}])").fetchall()}
            # Files written before the target column read it as null (schema.OPTIONAL_RAW_COLUMNS).
            columns = ", ".join(c if c in stored else f"null::varchar as {c}" for c in RAW_KUBE_SCHEMA.names)
            con.execute(
                f"create temp view kube_rows as select {columns} from read_parquet([{files}], union_by_name = true)"
            )
            create_spans(con, "kube_rows", "kube_spans")
            # Spans in time order: a reader that bounds its window skips most row groups. The order is total,
            # so that a re-pull stores the same bytes (R15).
            return con.sql(f"select * from kube_spans order by {', '.join(SPAN_ORDER)}").to_arrow_table()
        finally:
            con.close()


def convert_files(rows: list[Path], into: Path, memory_limit: str, scratch: Path) -> tuple[int, int]:
    """Store the kube rows of the Parquet files `rows` as one file of spans at `into` (a day written as rows,
    by the simulator or before spans); (samples, spans)."""
    staging = KubeSpanStaging(None, scratch, memory_limit)
    try:
        con = duckdb.connect()
        try:
            files = sql_path_list(rows)
            ((samples,),) = con.execute(f"select count(*) from read_parquet([{files}])").fetchall()
        finally:
            con.close()
        spans = staging.spans_of(rows)
        into.parent.mkdir(parents=True, exist_ok=True)
        temp = into.with_name(into.name + ".tmp")
        pq.write_table(
            spans.cast(RAW_KUBE_SPANS_SCHEMA), temp, **parquet_write_options(RAW_KUBE_SPANS_SCHEMA)
        )
        temp.replace(into)
        return int(samples), spans.num_rows
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def span_samples(paths: list[Path]) -> int:
    """How many kube samples (rows) the span files `paths` stand for."""
    if not paths:
        return 0
    con = duckdb.connect()
    try:
        files = sql_path_list(paths)
        con.execute(f"create temp view spans as select * from read_parquet([{files}])")
        ((count,),) = con.execute(
            """with scrapes as (
                select cluster, target, ts_ms, row_number() over (partition by cluster, target order by ts_ms) as n
                from spans where metric is null
            )
            select coalesce(sum(s.copies * (b.n - a.n + 1)), 0)
            from spans as s
            join scrapes as a on a.cluster is not distinct from s.cluster
                and a.target is not distinct from coalesce(s.target, split_part(s.metric, '_', 1))
                and a.ts_ms = s.ts_ms
            join scrapes as b on b.cluster is not distinct from s.cluster
                and b.target is not distinct from coalesce(s.target, split_part(s.metric, '_', 1))
                and b.ts_ms = s.last_ms
            where s.metric is not null"""
        ).fetchall()
        return int(count)
    finally:
        con.close()


def is_spans(schema: pa.Schema) -> bool:
    """A stored kube table in span form (it has `last_ms`), not in rows."""
    return "last_ms" in schema.names


def decode_spans(
    spans: pa.Table, start_ms: int | None = None, end_ms: int | None = None
) -> Iterator[pa.Table]:
    """The kube rows (RAW_KUBE_SCHEMA) a span table stands for, with start_ms <= ts_ms < end_ms when bounded,
    a batch of spans at a time: every span's value at each scrape of its target from ts_ms to last_ms, `copies`
    times."""
    spans = spans.cast(RAW_KUBE_SPANS_SCHEMA)
    markers = pc.is_null(spans.column("metric"))
    scrapes = spans.filter(markers)
    series = spans.filter(pc.invert(markers))
    grid: dict[tuple[str | None, str | None], np.ndarray] = {}
    for (cluster, target), group in _groups(scrapes, ("cluster", "target")):
        times = np.unique(group.column("ts_ms").to_numpy(zero_copy_only=False))
        grid[(cluster, target)] = times
    step = 4096
    for offset in range(0, series.num_rows, step):
        batch = series.slice(offset, step)
        clusters = batch.column("cluster").to_pylist()
        targets = batch.column("target").to_pylist()
        metrics = batch.column("metric").to_pylist()
        first = batch.column("ts_ms").to_numpy(zero_copy_only=False)
        last = batch.column("last_ms").to_numpy(zero_copy_only=False)
        copies = batch.column("copies").to_numpy(zero_copy_only=False)
        index: list[np.ndarray] = []
        times: list[np.ndarray] = []
        for i in range(batch.num_rows):
            scrape_target = targets[i] if targets[i] is not None else metrics[i].split("_", 1)[0]
            at = grid.get((clusters[i], scrape_target), np.empty(0, dtype=np.int64))
            shown = at[np.searchsorted(at, first[i], "left") : np.searchsorted(at, last[i], "right")]
            if start_ms is not None:
                shown = shown[shown >= start_ms]
            if end_ms is not None:
                shown = shown[shown < end_ms]
            shown = np.repeat(shown, int(copies[i]))
            index.append(np.full(len(shown), i, dtype=np.int64))
            times.append(shown)
        if not index:
            continue
        take = np.concatenate(index)
        if not len(take):
            continue
        rows = batch.take(pa.array(take)).select(["cluster", "metric", "value", "labels", "target"])
        rows = rows.append_column("ts_ms", pa.array(np.concatenate(times), pa.int64()))
        yield rows.select(RAW_KUBE_SCHEMA.names).cast(RAW_KUBE_SCHEMA)


def _groups(table: pa.Table, keys: tuple[str, ...]) -> Iterator[tuple[tuple, pa.Table]]:
    if not table.num_rows:
        return
    found = table.group_by(list(keys)).aggregate([])
    for row in found.to_pylist():
        mask = None
        for key in keys:
            column = table.column(key)
            test = pc.is_null(column) if row[key] is None else pc.equal(column, row[key])
            mask = test if mask is None else pc.and_(mask, test)
        yield tuple(row[k] for k in keys), table.filter(pc.fill_null(mask, False))
