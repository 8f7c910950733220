"""The accounting runner: one (cluster, day) of raw samples in, every model of sql/ out.

SQL models live in sql/<layer>/<model>.sql (staging -> intermediate -> marts, one model per file).
A model's dependencies are the other models (and raw tables) its text names, so the order is derived,
never listed by hand. A model whose header has `-- materialized: ephemeral` (as in dbt) is a view its
readers query, never a stored table nor an asset. Two intermediate models are Python, because their job is
to stop the run with one clear message (a device with no price, an unparseable MIG profile) or to apply
config rules (R7): `int_device_classes` and `int_holder_tenants`.

Pure: `meter_day(raw, config, cluster, day)` takes tables and config and returns tables; storage is the
caller's business (pipelines/ and the warehouse).
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from functools import cache
from graphlib import TopologicalSorter
from pathlib import Path

import duckdb
import pyarrow as pa

from metering.catalog import CatalogError, resolve_device_class
from metering.config import Config
from metering.schema import OPTIONAL_RAW_COLUMNS, RAW_TABLES
from metering.tenancy import resolve_tenant
from metering.warehouse import duckdb_paths

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"
LAYERS = ("staging", "intermediate", "marts")
MACROS = SQL_DIR / "macros.sql"  # expressions the models share, created before they run


class AccountingError(RuntimeError):
    """The day cannot be metered; the message names the cause and what to do."""


@dataclass(frozen=True)
class Model:
    name: str
    layer: str
    deps: tuple[str, ...]
    sql: str | None = None  # None for a Python model
    description: str = ""
    # "ephemeral" (a `-- materialized: ephemeral` line, as in dbt): a view its readers query, never a table,
    # never stored and not an asset of its own; its readers stand on its dependencies.
    materialized: str = "table"

    @property
    def ephemeral(self) -> bool:
        return self.materialized == "ephemeral"

    @property
    def table(self) -> str:
        """Name of the stored table: marts drop their prefix (mart_device_seconds -> device_seconds)."""
        return self.name.removeprefix("mart_") if self.layer == "marts" else self.name


@dataclass
class RawDay:
    """Raw samples for one cluster: the day itself plus, for counters, the lookback before it."""

    dcgm: pa.Table
    kube: pa.Table
    dra_allocations: pa.Table = field(default_factory=lambda: RAW_TABLES["raw_dra_allocations"].empty_table())
    dra_devices: pa.Table = field(default_factory=lambda: RAW_TABLES["raw_dra_devices"].empty_table())

    def tables(self) -> dict[str, pa.Table]:
        return {
            "raw_dcgm_samples": self.dcgm,
            "raw_kube_samples": self.kube,
            "raw_dra_allocations": self.dra_allocations,
            "raw_dra_devices": self.dra_devices,
        }


@dataclass(frozen=True)
class RawFiles:
    """Raw samples of one cluster as stored Parquet files (the day with its lookback), by raw table name.
    DuckDB scans them where they lie, local or on an object store (UPath): a 10,000-GPU day never has to
    fit in Python memory (bench/)."""

    files: Mapping[str, Sequence[Path]]


_MATERIALIZED = re.compile(r"^--\s*materialized:\s*(table|ephemeral)\s*$")


def _header(sql: str) -> tuple[str, str]:
    """(description, materialization) from a model's leading comment lines."""
    lines, materialized = [], "table"
    for line in sql.splitlines():
        if not line.startswith("--"):
            break
        if found := _MATERIALIZED.match(line):
            materialized = found.group(1)
        else:
            lines.append(line.removeprefix("--").strip())
    return " ".join(lines), materialized


PYTHON_MODELS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "int_device_classes": (
        "intermediate",
        ("stg_dcgm_series",),
        "Weight (R3) and price (R8) of every (modelName, MIG profile) seen in the day.",
    ),
    "int_holder_tenants": (
        "intermediate",
        ("int_device_holders", "int_pod_label_periods"),
        "The tenant of every holder (R7) for each period of its pod labels (R1a: a pod relabelled at noon is "
        "the new tenant's from noon): pod label rules, then vCluster, then namespace.",
    ),
}


@cache
def load_models(sql_dir: Path = SQL_DIR) -> tuple[Model, ...]:
    """Every model in dependency order."""
    texts: dict[str, tuple[str, str]] = {}
    for layer in LAYERS:
        for path in sorted((sql_dir / layer).glob("*.sql")):
            texts[path.stem] = (layer, path.read_text(encoding="utf-8"))
    names = set(texts) | set(PYTHON_MODELS) | set(RAW_TABLES)
    models: dict[str, Model] = {}
    for name, (layer, sql) in texts.items():
        code = "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
        referenced = set(re.findall(r"\b([a-z][a-z0-9_]*)\b", code)) & names
        models[name] = Model(name, layer, tuple(sorted(referenced - {name})), sql, *_header(sql))
    for name, (layer, deps, description) in PYTHON_MODELS.items():
        models[name] = Model(name, layer, deps, None, description)
    graph = {name: [d for d in model.deps if d in models] for name, model in models.items()}
    order = list(TopologicalSorter(graph).static_order())
    return tuple(models[name] for name in order)


def lineage_deps(model: Model) -> tuple[str, ...]:
    """What a model stands on as assets: its dependencies, an ephemeral one replaced by its own."""
    models = {m.name: m for m in load_models()}
    deps: set[str] = set()
    pending = list(model.deps)
    while pending:
        dep = pending.pop()
        if dep in models and models[dep].ephemeral:
            pending.extend(models[dep].deps)
        else:
            deps.add(dep)
    return tuple(sorted(deps))


# --- exact money -----------------------------------------------------------------------------
# R12: no per-sample term may be truncated. Money is counted in integer units of 1/U of the currency, with
# U = MONEY_UNITS_BASE × the day's least common multiple of its share denominators (int_money_scale), so that
# every term is an integer: Δ in ms × 1,000 × price in 1e-8 × weight in 56ths × share. MONEY_UNITS_BASE:
# 3,600,000 ms an hour × 1,000 (energy counters are in mJ) × 10^8 (prices are read to 8 decimals) × 56 (a
# weight is k/7 or k/8 of a GPU).
PRICE_SCALE = 10**8
WEIGHT_SCALE = 56
MONEY_UNITS_BASE = 3_600_000 * 1_000 * PRICE_SCALE * WEIGHT_SCALE


def price_units(price: float | None) -> int | None:
    """A configured price in 1e-8 of the currency: the decimal the user wrote (a float's shortest text)."""
    if price is None:
        return None
    return int((Decimal(repr(float(price))) * PRICE_SCALE).to_integral_value(ROUND_HALF_EVEN))


def weight_units(weight: float) -> int:
    """A weight (R3: 1, k/7 or k/8 of a GPU) in 56ths, exactly."""
    exact = Fraction(weight).limit_denominator(WEIGHT_SCALE)
    if WEIGHT_SCALE % exact.denominator:
        raise AccountingError(f"weight {weight} is not a whole number of 7ths or 8ths of a GPU")
    return exact.numerator * (WEIGHT_SCALE // exact.denominator)


# --- Python models ---------------------------------------------------------------------------


def _device_classes(con: duckdb.DuckDBPyConnection, config: Config) -> pa.Table:
    seen = con.sql(
        "select model_name, mig_profile, min(node) as node from stg_dcgm_series "
        "where seen_in_day group by all order by all"
    ).fetchall()
    pairs = {(model, profile): node for model, profile, node in seen}
    # Every GPU model needs its whole-GPU class too: pool cost is priced per GPU (R9).
    for model, _profile, node in seen:
        pairs.setdefault((model, None), node)
    rows: dict[str, list[object]] = {
        k: []
        for k in (
            "model_name",
            "mig_profile",
            "gpu_model",
            "compute_slices",
            "weight",
            "gpu_price_per_hour",
            "device_price_per_hour",
            "weight_units",
            "gpu_price_units",
            "device_price_units",
        )
    }
    for (model, profile), node in sorted(pairs.items(), key=lambda kv: (kv[0][0] or "", kv[0][1] or "")):
        if model is None:
            raise AccountingError(
                f"DCGM series on node {node!r} carry no modelName label; cannot price them (R8)"
            )
        try:
            cls = resolve_device_class(config, model, profile, node)
        except CatalogError as exc:
            raise AccountingError(str(exc)) from None
        rows["model_name"].append(model)
        rows["mig_profile"].append(profile)
        rows["gpu_model"].append(cls.gpu_model)
        rows["compute_slices"].append(cls.compute_slices if profile else 7)
        rows["weight"].append(cls.weight)
        rows["gpu_price_per_hour"].append(cls.gpu_price_per_hour)
        rows["device_price_per_hour"].append(cls.device_price_per_hour)
        rows["weight_units"].append(weight_units(cls.weight))
        rows["gpu_price_units"].append(price_units(cls.gpu_price_per_hour))
        # Only a MIG profile's own price stands as the device's price; else it is weight × the GPU's.
        rows["device_price_units"].append(price_units(cls.price_override))
    schema = pa.schema(
        [
            ("model_name", pa.string()),
            ("mig_profile", pa.string()),
            ("gpu_model", pa.string()),
            ("compute_slices", pa.int32()),
            ("weight", pa.float64()),
            ("gpu_price_per_hour", pa.float64()),
            ("device_price_per_hour", pa.float64()),
            ("weight_units", pa.int64()),
            ("gpu_price_units", pa.int64()),
            ("device_price_units", pa.int64()),
        ]
    )
    return pa.table(rows, schema=schema)


def _holder_tenants(con: duckdb.DuckDBPyConnection, config: Config) -> pa.Table:
    """One row per holder and period of its labels (null bounds: open-ended); a pod with no label series has
    one row for all time."""
    holders = con.sql(
        "select h.namespace, h.pod, l.labels_json, l.from_ms, l.until_ms "
        "from (select distinct namespace, pod from int_device_holders) as h "
        "left join int_pod_label_periods as l on l.namespace = h.namespace and l.pod = h.pod order by all"
    ).fetchall()
    rows: dict[str, list[object]] = {
        "namespace": [],
        "pod": [],
        "from_ms": [],
        "until_ms": [],
        "tenant": [],
        "cost_center": [],
        "tenant_rule": [],
    }
    for namespace, pod, labels_json, from_ms, until_ms in holders:
        labels = {k: str(v) for k, v in json.loads(labels_json).items()} if labels_json else {}
        match = resolve_tenant(config, namespace, labels)
        for column, value in zip(
            rows,
            (namespace, pod, from_ms, until_ms, match.tenant, match.cost_center, match.rule),
            strict=True,
        ):
            rows[column].append(value)
    schema = pa.schema(
        [
            ("namespace", pa.string()),
            ("pod", pa.string()),
            ("from_ms", pa.int64()),
            ("until_ms", pa.int64()),
            ("tenant", pa.string()),
            ("cost_center", pa.string()),
            ("tenant_rule", pa.string()),
        ]
    )
    return pa.table(rows, schema=schema)


PYTHON_MODEL_FUNCTIONS: dict[str, Callable[[duckdb.DuckDBPyConnection, Config], pa.Table]] = {
    "int_device_classes": _device_classes,
    "int_holder_tenants": _holder_tenants,
}


# --- the run ---------------------------------------------------------------------------------


def day_bounds_ms(day: date) -> tuple[int, int]:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return int(start.timestamp() * 1000), int((start + timedelta(days=1)).timestamp() * 1000)


def _set_variables(con: duckdb.DuckDBPyConnection, config: Config, cluster: str, day: date) -> None:
    start_ms, end_ms = day_bounds_ms(day)
    variables: Mapping[str, object] = {
        "cluster": cluster,
        "day": day.isoformat(),
        "day_start_ms": start_ms,
        "day_end_ms": end_ms,
        "window_start_ms": start_ms - lookback_ms(config),
        "lookback_ms": config.kube_lookback_seconds * 1000,
        "scrape_s": float(config.scrape_interval_seconds),
        "idle_threshold": config.idle_threshold,
        "idle_policy": config.idle_policy,
        "tariff": config.tariff,
        "energy_price_per_kwh": config.rate_card.energy_price_per_kwh,
        "energy_price_units": price_units(config.rate_card.energy_price_per_kwh) or 0,
        "scrape_ms": config.scrape_interval_seconds * 1000,
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


def lookback_ms(config: Config) -> int:
    """How far before the day the raw inputs must reach: the last counter and pod/node state samples."""
    return max(config.kube_lookback_seconds, 2 * config.scrape_interval_seconds) * 1000


def meter_day(
    raw: RawDay | RawFiles,
    config: Config,
    cluster: str,
    day: date,
    on_model: Callable[[Model], None] | None = None,
    keep_layers: Collection[str] = LAYERS,
    temp_directory: Path | None = None,
    profile_dir: Path | None = None,
) -> dict[str, pa.Table]:
    """Run every model for one cluster and day. Returns {model name: table} for the models of
    `keep_layers`; the others are computed inside DuckDB and never copied out (they can be 100 M rows
    at fleet scale). With `temp_directory`, the models are tables of a DuckDB database file there (removed by
    the caller with the directory), else of an in-memory one; DuckDB spills there past
    `warehouse.memory_limit`. With `profile_dir`, each SQL model's DuckDB query profile (EXPLAIN ANALYZE, as
    JSON) is written there as <model>.json (bench/)."""
    if temp_directory is not None:
        temp_directory.mkdir(parents=True, exist_ok=True)
        # A database file, not temp tables: its tables are compressed and the buffer manager can evict them,
        # while in-memory temp tables fill memory_limit and push the running query's state out to disk
        # (1,000 GPUs: 1.8 GB spilled by int_device_samples alone, bench/README.md).
        database = temp_directory / "models.duckdb"
        for stale in (database, database.with_name(database.name + ".wal")):
            stale.unlink(missing_ok=True)  # a killed run's models are not this run's
        con = duckdb.connect(str(database))
    else:
        con = duckdb.connect()
    models = load_models()
    last_use = _last_use(models)
    views = {m.name for m in models if m.ephemeral}
    try:
        con.execute("set threads to 2")
        # DuckDB plans an ASOF join as a nested loop when it *estimates* the left side under this many rows;
        # the estimate after a join chain can be 6 where the truth is millions (KAI members x pod phases:
        # 72 % of a 256-GPU day, bench/README.md). The sort-merge ASOF join is right at every size.
        con.execute("set asof_loop_join_threshold = 0")
        con.execute("set memory_limit = ?", [config.warehouse.memory_limit])
        if temp_directory is not None:
            con.execute("set temp_directory = ?", [str(temp_directory)])
        _load_raw(con, raw)
        _set_variables(con, config, cluster, day)
        con.execute(MACROS.read_text(encoding="utf-8"))
        if profile_dir is not None:
            profile_dir.mkdir(parents=True, exist_ok=True)
            con.execute("set enable_profiling = 'json'")
        results: dict[str, pa.Table] = {}
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            for model in models:
                _identifier(model.name)  # interpolated into SQL below: only a plain name may get there
                if model.sql is None:
                    table = PYTHON_MODEL_FUNCTIONS[model.name](con, config)
                    con.register(f"{model.name}__arrow", table)
                    con.execute(f"create table {model.name} as select * from {model.name}__arrow")
                    con.unregister(f"{model.name}__arrow")
                else:
                    if profile_dir is not None:
                        con.execute("set profiling_output = ?", [str(profile_dir / f"{model.name}.json")])
                    kind = "temp view" if model.ephemeral else "table"
                    try:
                        con.execute(f"create {kind} {model.name} as {model.sql}")
                    except duckdb.Error as exc:
                        raise AccountingError(f"model {model.layer}/{model.name}.sql failed: {exc}") from exc
                # Marts are read by people and diffed by finance: a stable row order makes a re-run's
                # files identical to the byte (R15). Larger intermediate tables keep the engine's order.
                order = " order by all" if model.layer == "marts" else ""
                if model.name == "int_gpu_samples":
                    _require_prices(con)
                if model.name == "stg_dcgm_series":
                    _require_distinct_series(con)
                if model.layer in keep_layers and not model.ephemeral:
                    results[model.name] = con.sql(f"select * from {model.name}{order}").to_arrow_table()
                # A model nothing later reads is dropped: memory goes to the queries still to run.
                for done in last_use.get(model.name, ()):
                    con.execute(f"drop {'view' if done in views else 'table'} if exists {done}")
                if on_model:
                    on_model(model)
        return results
    finally:
        con.close()


def _last_use(models: Sequence[Model]) -> dict[str, list[str]]:
    """{model: the models whose last reader it is}: after it runs, they can be dropped. A view (an ephemeral
    model) reads its own dependencies whenever it is read, so they live as long as its readers."""
    by_name = {m.name: m for m in models}

    def reads(model: Model) -> set[str]:
        found: set[str] = set()
        pending = list(model.deps)
        while pending:
            dep = pending.pop()
            if dep in found:
                continue
            found.add(dep)
            if dep in by_name and by_name[dep].ephemeral:
                pending.extend(by_name[dep].deps)
        return found

    last: dict[str, str] = {}
    for model in models:
        for dep in reads(model):
            if dep not in RAW_TABLES:
                last[dep] = model.name
    by_reader: dict[str, list[str]] = {}
    for dep, reader in last.items():
        by_reader.setdefault(reader, []).append(dep)
    return by_reader


def _load_raw(con: duckdb.DuckDBPyConnection, raw: RawDay | RawFiles) -> None:
    """Raw tables under their model names: Arrow tables are copied in, stored files are read in place."""
    if isinstance(raw, RawDay):
        for name, table in raw.tables().items():
            con.register(f"{name}__arrow", _conform(table, name))
            con.execute(f"create temp table {name} as select * from {name}__arrow")
            con.unregister(f"{name}__arrow")
        return
    for name, schema in RAW_TABLES.items():
        paths = duckdb_paths(con, raw.files.get(name, ()))
        if not paths:
            con.register(f"{name}__arrow", schema.empty_table())
            con.execute(f"create temp table {name} as select * from {name}__arrow")
            con.unregister(f"{name}__arrow")
            continue
        files = ", ".join("'" + p.replace("'", "''") + "'" for p in paths)  # a view takes no parameters
        stored = {
            row[0]
            for row in con.execute(
                f"select name from parquet_schema([{files}])"  # noqa: S608 - quoted paths, no user SQL
            ).fetchall()
        }
        optional = OPTIONAL_RAW_COLUMNS.get(name, frozenset())
        columns = ", ".join(
            f'"{column}"' if column in stored or column not in optional else f'null::varchar as "{column}"'
            for column in schema.names
        )
        try:
            con.execute(
                f"create temp view {name} as select {columns} from read_parquet([{files}], "
                "hive_partitioning = false, union_by_name = true)"
            )
            con.execute(f"select * from {name} limit 0")
        except duckdb.Error as exc:
            raise AccountingError(
                f"raw files of {name} ({paths[0]}{' and others' if len(paths) > 1 else ''}) do not match the "
                f"raw-samples schema: {exc}; re-pull the day"
            ) from exc


def _require_prices(con: duckdb.DuckDBPyConnection) -> None:
    """R8: a GPU whose price cannot be resolved stops the run, naming model and node; never a silent zero."""
    missing = con.execute(
        "select model_name, node, min(ts_ms) from int_gpu_samples where gpu_price_per_hour is null "
        "group by all order by all limit 1"
    ).fetchone()
    if missing:
        model, node, ts_ms = missing
        when = datetime.fromtimestamp(ts_ms / 1000, UTC).isoformat().replace("+00:00", "Z")
        raise AccountingError(
            f"GPU model {model!r} on node {node!r} has no price at {when}: OpenCost's node_gpu_hourly_cost has no "
            "sample for the node within kube_lookback_seconds (price_source: opencost); check that OpenCost is "
            "scraped, or price the model under rate_card.models with price_source: rate_card"
        )


_IDENTIFIER = re.compile(r"[a-z][a-z0-9_]*")


def _require_distinct_series(con: duckdb.DuckDBPyConnection) -> None:
    """Series are keyed by a 64-bit hash of their labels (stg_dcgm_judged): two label sets with one key would
    merge two series' samples (R1), so the day stops instead. Never seen: under 10^-9 for the ~90 k series
    of a 10,000-GPU day."""
    clash = con.sql(
        "select series_key from stg_dcgm_series group by all having count(*) > 1 limit 1"
    ).fetchall()
    if clash:
        raise AccountingError(
            f"two DCGM series share the key {clash[0][0]} (a hash collision of their labels): the day cannot be "
            "metered exactly; report it with the day's raw files"
        )


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
