"""The runner: one (cluster, day) of raw samples in, every model of sql/ out, in one DuckDB session.

Pure: `meter_day(raw, config, cluster, day)` takes tables and config and returns tables; storage is the
caller's business (gpumeter.models.partition and the warehouse).
"""

from __future__ import annotations

import re
import shutil
import tempfile
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import date
from pathlib import Path

import duckdb
import pyarrow as pa

from gpumeter.config import Config
from gpumeter.ingest.contract import RawDay, RawFiles, day_bounds_ms, lookback_ms
from gpumeter.ingest.kube_spans import create_spans
from gpumeter.ingest.schema import DCGM_SERIES_LABELS, OPTIONAL_RAW_COLUMNS, RAW_KUBE_SPANS_SCHEMA, RAW_TABLES
from gpumeter.models.money import MONEY_UNITS_BASE, WEIGHT_SCALE, price_units
from gpumeter.models.project import (
    LAYERS,
    MACROS,
    SESSION_FOLDER,
    AccountingError,
    Model,
    ProjectError,
    load_models,
    reads,
)
from gpumeter.models.python_models import PYTHON_MODEL_FUNCTIONS
from gpumeter.storage.objectstore import duckdb_paths, sql_path_list
from gpumeter.storage.spill import spill_error


def _set_variables(
    con: duckdb.DuckDBPyConnection, config: Config, cluster: str, day: date, through_ms: int | None = None
) -> None:
    start_ms, end_ms = day_bounds_ms(day)
    # A day metered before its end (provisional) ends at `through` for everything "in the day" means.
    end_ms = end_ms if through_ms is None else through_ms
    energy_price = config.rate_card.energy_price_on(day)  # R8, R10: in effect on the metered day
    variables: Mapping[str, object] = {
        "cluster": cluster,
        "day": day.isoformat(),
        "day_start_ms": start_ms,
        "day_end_ms": end_ms,
        "window_start_ms": start_ms - lookback_ms(config, cluster),
        "lookback_ms": config.kube_lookback_seconds * 1000,
        "scrape_s": float(config.scrape_interval_of(cluster)),
        "idle_threshold": config.idle_threshold,
        "idle_policy": config.idle_policy,
        "tariff": config.tariff,
        "energy_price_per_kwh": energy_price,
        "energy_price_units": price_units(energy_price) or 0,
        "scrape_ms": config.scrape_interval_of(cluster) * 1000,
        "weight_scale": WEIGHT_SCALE,
        "money_units_base": str(MONEY_UNITS_BASE),  # beyond BIGINT: cast to HUGEINT in SQL
        # hybrid's reserved fraction in millionths (config allows 6 decimals), exact.
        "reserved_millionths": {"reserved": 1_000_000, "used": 0}.get(
            config.tariff, round((config.hybrid.reserved_fraction if config.hybrid else 1) * 1_000_000)
        ),
        # Kueue ClusterQueue -> tenant (Tenant.kueue_cluster_queues), as two parallel lists for
        # mart_queue_quota_usage.
        "kueue_queues": [q for t in config.tenants for q in t.kueue_cluster_queues],
        "kueue_queue_tenants": [t.name for t in config.tenants for _ in t.kueue_cluster_queues],
        "share": config.share,
        "min_free_cpu_cores": config.stranded.min_free_cpu_cores,
        "min_free_memory_bytes": config.stranded.min_free_memory_gib * 1024**3,
    }
    for name, value in variables.items():
        con.execute(f"set variable {name} = ?", [value])


def meter_day(
    raw: RawDay | RawFiles,
    config: Config,
    cluster: str,
    day: date,
    on_model: Callable[[Model], None] | None = None,
    keep_layers: Collection[str] = LAYERS,
    temp_directory: Path | None = None,
    through_ms: int | None = None,
    select: Collection[str] = (),
    models: Sequence[Model] | None = None,
) -> dict[str, pa.Table]:
    """Run every model for one cluster and day. Returns {model name: table} for the models of
    `keep_layers` (or, with `select`, for those models only, and only they and what they read are run, as
    dbt's `--select +model`); the others are computed inside DuckDB and never copied out (a fleet's are too large
    to copy). With `temp_directory`, the models are tables of a DuckDB database file there (removed by
    the caller with the directory), else of an in-memory one; DuckDB spills there past
    `warehouse.memory_limit`. The session's folder (the variable SESSION_FOLDER: `session/` there, else a
    system temp folder) holds the files a Python model's tables are read from, and is removed with the
    session. With `through_ms` the day ends there (a provisional day metered up to its last full hour,
    gpumeter.models.provisional). `models` replaces the project's models (load_models()), e.g. with the
    per-sample reference SQL the sample pass is held equal to (tests/sample_pass_reference.py).

    Each model must output the columns its schema.yml declares (ProjectError), and the assertions it declares
    run right after it: the first row one returns stops the day with its message (AccountingError)."""
    models = _needed(load_models() if models is None else models, keep_layers, select)
    last_use = _last_use(models)
    views = {m.name for m in models if m.ephemeral}
    if temp_directory is not None:
        temp_directory.mkdir(parents=True, exist_ok=True)
        # A database file, not temp tables: its tables are compressed and the buffer manager can evict them,
        # while in-memory temp tables fill memory_limit and push the running query's state out to disk.
        database = temp_directory / "models.duckdb"
        for stale in (database, database.with_name(database.name + ".wal")):
            stale.unlink(missing_ok=True)  # a killed run's models are not this run's
        con = duckdb.connect(str(database))
        folder = temp_directory / "session"
        shutil.rmtree(folder, ignore_errors=True)  # a killed run's files
        folder.mkdir()
    else:
        con = duckdb.connect()
        folder = Path(tempfile.mkdtemp(prefix="gpumeter-session-"))
    try:
        con.execute("set threads to 2")
        # The sort-merge ASOF join is right at every size; a nested loop is chosen on estimates that can be wrong.
        con.execute("set asof_loop_join_threshold = 0")
        con.execute("set memory_limit = ?", [config.warehouse.memory_limit])
        if temp_directory is not None:
            con.execute("set temp_directory = ?", [str(temp_directory)])
        _load_raw(con, raw)
        _set_variables(con, config, cluster, day, through_ms)
        con.execute(f"set variable {SESSION_FOLDER} = ?", [str(folder)])
        con.execute(MACROS.read_text(encoding="utf-8"))
        results: dict[str, pa.Table] = {}
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            for model in models:
                _identifier(model.name)  # interpolated into SQL below: only a plain name may get there
                if model.sql is None:
                    if model.name not in PYTHON_MODEL_FUNCTIONS:
                        raise ProjectError(
                            f"{model.schema_path}: model {model.name} is declared in Python, but "
                            "gpumeter.models.python_models has no function for it"
                        )
                    table = PYTHON_MODEL_FUNCTIONS[model.name](con, config)
                    if isinstance(table, str):  # a table or view the function built in the session itself
                        kind = _kind_of(con, _identifier(table))
                        con.execute(f"alter {kind} {table} rename to {model.name}")
                        if kind == "view":
                            views.add(model.name)
                    else:
                        con.register(f"{model.name}__arrow", table)
                        con.execute(f"create table {model.name} as select * from {model.name}__arrow")
                        con.unregister(f"{model.name}__arrow")
                else:
                    kind = "temp view" if model.ephemeral else "table"
                    try:
                        con.execute(f"create {kind} {model.name} as {model.sql}")
                    except duckdb.Error as exc:
                        raise AccountingError(f"model {model.layer}/{model.name}.sql failed: {exc}") from exc
                check_columns(con, model)
                check_assertions(con, model)
                # Marts are read by people and diffed by finance: a stable row order makes a re-run's
                # files identical to the byte (R15). Larger intermediate tables keep the engine's order.
                order = " order by all" if model.layer == "marts" else ""
                kept = model.name in select if select else model.layer in keep_layers
                if kept and not model.ephemeral:
                    results[model.name] = con.sql(f"select * from {model.name}{order}").to_arrow_table()
                # A model nothing later reads is dropped: memory goes to the queries still to run.
                for done in last_use.get(model.name, ()):
                    con.execute(f"drop {'view' if done in views else 'table'} if exists {done}")
                if on_model:
                    on_model(model)
        return results
    except (duckdb.Error, AccountingError, OSError) as exc:
        # A disk that fills while DuckDB spills is the warehouse's problem, not the model's.
        full = spill_error(exc.__cause__ if isinstance(exc, AccountingError) else exc, temp_directory)
        if full is None:
            raise
        raise full from None
    finally:
        con.close()
        shutil.rmtree(folder, ignore_errors=True)


def _kind_of(con: duckdb.DuckDBPyConnection, name: str) -> str:
    """'view' or 'table': how the session holds `name`, temporary or not (for a drop or a rename of it)."""
    ((views,),) = con.execute("select count(*) from duckdb_views() where view_name = ?", [name]).fetchall()
    return "view" if views else "table"


def _needed(
    models: Sequence[Model], keep_layers: Collection[str], select: Collection[str] = ()
) -> list[Model]:
    """The models the run must build, in order: those it keeps (`select`, else the models of `keep_layers`)
    and everything they and their assertions read. A model nothing kept reads (a per-sample table with names,
    for audits) is skipped when its layer is not kept."""
    by_name = {m.name: m for m in models}
    unknown = sorted(set(select) - set(by_name))
    if unknown:
        raise ProjectError(
            f"no model named {', '.join(unknown)}: the models are the .sql files under gpumeter/models/sql and the "
            "Python models their schema.yml files declare"
        )
    pending = list(select) or [m.name for m in models if m.layer in keep_layers and not m.ephemeral]
    needed: set[str] = set()
    while pending:
        name = pending.pop()
        if name in needed or name not in by_name:
            continue
        needed.add(name)
        pending.extend(reads(by_name[name], models))
    return [m for m in models if m.name in needed]


def _last_use(models: Sequence[Model]) -> dict[str, list[str]]:
    """{model: the models whose last reader it is}: after it (and its assertions) ran, they can be dropped. A
    view (an ephemeral model) reads its own dependencies whenever it is read, so they live as long as its
    readers."""
    last: dict[str, str] = {}
    for model in models:
        for dep in reads(model, models):
            if dep not in RAW_TABLES:
                last[dep] = model.name
    by_reader: dict[str, list[str]] = {}
    for dep, reader in last.items():
        by_reader.setdefault(reader, []).append(dep)
    return by_reader


def _load_raw(con: duckdb.DuckDBPyConnection, raw: RawDay | RawFiles) -> None:
    """Raw tables under their model names: Arrow tables are copied in, stored files are read in place. The
    kube table is read as spans (gpumeter.ingest.kube_spans), however it came."""
    if isinstance(raw, RawDay):
        for name, table in raw.tables().items():
            table = _conform(table, name)
            rows = "*"
            if name == DCGM and table.column(SERIES_KEY).null_count:
                rows = f"* replace ({_SERIES_KEY_OF_LABELS} as {SERIES_KEY})"
            con.register(f"{name}__arrow", table)
            con.execute(f"create temp table {_loaded(name)} as select {rows} from {name}__arrow")
            con.unregister(f"{name}__arrow")
        _kube_spans(con, [])
        return
    span_files = _span_files(con, duckdb_paths(con, raw.files.get(KUBE, ())))
    for name, schema in RAW_TABLES.items():
        paths = [p for p in duckdb_paths(con, raw.files.get(name, ())) if p not in span_files]
        if not paths:
            con.register(f"{name}__arrow", schema.empty_table())
            con.execute(f"create temp table {_loaded(name)} as select * from {name}__arrow")
            con.unregister(f"{name}__arrow")
            continue
        files = sql_path_list(paths)
        stored = {
            row[0]
            for row in con.execute(
                f"select name from parquet_schema([{files}])"  # noqa: S608 - quoted paths, no user SQL
            ).fetchall()
        }
        optional = OPTIONAL_RAW_COLUMNS.get(name, frozenset())
        read = {
            column: f'"{column}"'
            if column in stored or column not in optional
            else f'null::{_SQL_TYPES.get(schema.field(column).type, "varchar")} as "{column}"'
            for column in schema.names
        }
        if name == DCGM and not _stores_series_keys(con, files, len(paths)):
            read[SERIES_KEY] = f"{_SERIES_KEY_OF_LABELS} as {SERIES_KEY}"
        columns = ", ".join(read.values())
        try:
            con.execute(
                f"create temp view {_loaded(name)} as select {columns} from read_parquet([{files}], "
                "hive_partitioning = false, union_by_name = true)"
            )
            con.execute(f"select * from {_loaded(name)} limit 0")
        except duckdb.Error as exc:
            raise AccountingError(
                f"raw files of {name} ({paths[0]}{' and others' if len(paths) > 1 else ''}) do not match the "
                f"raw-samples schema: {exc}; re-pull the day"
            ) from exc
    _kube_spans(con, span_files)


# The SQL type of a raw column a stored file may lack, read as a null of its own type.
_SQL_TYPES = {pa.bool_(): "boolean", pa.int32(): "integer", pa.int64(): "bigint", pa.uint64(): "ubigint"}

KUBE = "raw_kube_samples"
_KUBE_ROWS = "raw_kube_rows"
DCGM = "raw_dcgm_samples"
SERIES_KEY = "series_key"
# A day whose rows do not all carry a stored key is keyed here, every row by one function of its labels: a
# 64-bit hash, so that the day's largest group-by hashes one integer instead of nine strings.
_SERIES_KEY_OF_LABELS = "hash(" + ", ".join(DCGM_SERIES_LABELS) + ")"


def _stores_series_keys(con: duckdb.DuckDBPyConnection, files: str, file_count: int) -> bool:
    """Whether every one of the DCGM files stores a series key in every row (their footers say so). Keys are
    taken as stored only then: one series is never keyed by two functions in one day."""
    found = con.execute(
        "select count(distinct file_name), coalesce(bool_and(stats_null_count = 0), false) "  # noqa: S608
        f"from parquet_metadata([{files}]) where path_in_schema = '{SERIES_KEY}'"
    ).fetchone()
    return found is not None and found[0] == file_count and bool(found[1])


def _loaded(name: str) -> str:
    """The session name a raw table's rows are loaded under: the kube rows become spans (_kube_spans)."""
    return _KUBE_ROWS if name == KUBE else name


def _span_files(con: duckdb.DuckDBPyConnection, paths: Sequence[str]) -> list[str]:
    """The stored kube files in span form (the pull's); the others hold rows (days stored before spans)."""
    if not paths:
        return []
    files = sql_path_list(paths)
    found = con.execute(
        f"select distinct file_name from parquet_schema([{files}]) where name = 'last_ms'"  # noqa: S608 - quoted
    ).fetchall()
    spans = {row[0] for row in found}
    return [p for p in paths if p in spans]


def _kube_spans(con: duckdb.DuckDBPyConnection, span_files: Sequence[str]) -> None:
    """`raw_kube_samples` as spans: the stored ones, and those of the kube rows (an Arrow day, a day stored as
    rows) made here, exactly as the pull makes them."""
    create_spans(con, _KUBE_ROWS, "raw_kube_made_spans")
    con.execute(f"drop {_kind_of(con, _KUBE_ROWS)} {_KUBE_ROWS}")
    stored = "raw_kube_made_spans"
    if span_files:
        files = sql_path_list(span_files)
        columns = ", ".join(f'"{c}"' for c in RAW_KUBE_SPANS_SCHEMA.names)
        stored = (
            f"(select * from raw_kube_made_spans union all select {columns} from read_parquet([{files}], "
            "hive_partitioning = false, union_by_name = true))"
        )
    try:
        con.execute(f"create temp table {KUBE} as select * from {stored}")  # noqa: S608 - quoted paths
    except duckdb.Error as exc:
        raise AccountingError(
            f"raw files of {KUBE} ({span_files[0]}) do not match the raw-samples schema: {exc}; re-pull the day"
        ) from exc
    con.execute("drop table raw_kube_made_spans")


_IDENTIFIER = re.compile(r"[a-z][a-z0-9_]*")


def check_columns(con: duckdb.DuckDBPyConnection, model: Model) -> None:
    """The model outputs the columns its schema.yml declares, in that order and of those types, as a dbt
    model contract: a column added to the SQL and not to the declaration is an error, not a silent change."""
    output = [(row[0], row[1]) for row in con.execute(f"describe {_identifier(model.name)}").fetchall()]
    declared = [(c.name, c.data_type) for c in model.columns]
    if output == declared:
        return
    output_types, declared_types = dict(output), dict(declared)
    problems = []
    if extra := [f"{n} ({t})" for n, t in output if n not in declared_types]:
        problems.append(f"outputs column(s) it does not declare: {', '.join(extra)}")
    if missing := [n for n, _ in declared if n not in output_types]:
        problems.append(f"declares column(s) it does not output: {', '.join(missing)}")
    for name, data_type in output:
        if name in declared_types and declared_types[name] != data_type:
            problems.append(f"outputs {name} as {data_type}, declared {declared_types[name]}")
    if not problems:
        problems.append(f"outputs its columns in the order {', '.join(n for n, _ in output)}")
    raise ProjectError(
        f"{model.path}: model {model.name} " + "; ".join(problems) + f": make {model.schema_path} declare "
        "the columns as the model outputs them"
    )


def check_assertions(con: duckdb.DuckDBPyConnection, model: Model) -> None:
    """Run the assertions the model declares: the first row an assertion returns stops the day with its
    `message` (rows in the assertion's own order)."""
    for assertion in model.assertions:
        try:
            cursor = con.execute(assertion.sql)
            columns = [d[0] for d in cursor.description or ()]
            offending = cursor.fetchone()
        except duckdb.Error as exc:
            raise AccountingError(
                f"assertion {assertion.path} (of model {model.name}) failed: {exc}"
            ) from exc
        if "message" not in columns:
            raise ProjectError(f"{assertion.path}: assertion {assertion.name} returns no `message` column")
        if offending is not None:
            raise AccountingError(str(offending[columns.index("message")]))


def _identifier(name: str) -> str:
    """A model or table name as an SQL identifier: lowercase letters, digits and `_` (a file named
    `x; drop ….sql` under sql/ is refused, not run)."""
    if not _IDENTIFIER.fullmatch(name):
        raise AccountingError(
            f"model name {name!r} is not a plain identifier ([a-z][a-z0-9_]*); rename its file under sql/"
        )
    return name


def _conform(table: pa.Table, raw_table: str) -> pa.Table:
    """Select and cast the raw table's columns (an optional one it lacks is null); a missing column or an
    uncastable one is an error naming it."""
    schema = RAW_TABLES[raw_table]
    for name in OPTIONAL_RAW_COLUMNS.get(raw_table, frozenset()) - set(table.column_names):
        table = table.append_column(name, pa.nulls(table.num_rows, schema.field(name).type))
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        raise AccountingError(f"raw table lacks column(s) {', '.join(missing)} of the raw-samples schema")
    try:
        return table.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise AccountingError(f"raw table columns do not cast to the raw-samples schema: {exc}") from None
