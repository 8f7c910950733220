"""The models' declarations (sql/project.yml, sql/<layer>/schema.yml, sql/assertions/): every model declared
and every declaration a model, the columns each outputs, the layers' materialization, the assertions that
stop a day, and a malformed declaration as one clear error."""

from __future__ import annotations

import ast
import fnmatch
import inspect
import re
import shutil
import tomllib
from collections.abc import Callable
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
import yaml

from gpumeter.config import Config
from gpumeter.ingest.schema import RAW_TABLES
from gpumeter.models import sample_pass
from gpumeter.models.partition import meter_partition_day
from gpumeter.models.project import (
    LAYERS,
    MACROS,
    SQL_DIR,
    AccountingError,
    Assertion,
    Column,
    Model,
    ProjectError,
    load_models,
)
from gpumeter.models.python_models import PYTHON_MODEL_FUNCTIONS, SAMPLE_PASS_MODELS
from gpumeter.models.runner import _load_raw, _set_variables, check_assertions, check_columns, meter_day
from gpumeter.pipelines.assets import MODEL_SPECS
from gpumeter.storage.paths import INTERMEDIATE, MARTS, RAW, STAGING
from gpumeter.storage.warehouse import Warehouse
from tests.builders import FactoryBuilder
from tests.test_rules import A100, H100, P1, P2, factory, make_config

DAY = date(2026, 11, 1)
SQL = Path(str(SQL_DIR))
REPO = Path(__file__).resolve().parents[1]


def by_name() -> dict[str, Model]:
    return {m.name: m for m in load_models()}


def schema_entries(layer: str) -> list[dict[str, Any]]:
    """A layer's schema.yml as written (read here, not through the loader)."""
    return yaml.safe_load((SQL / layer / "schema.yml").read_text(encoding="utf-8"))["models"]


# --- every model declared, every declaration a model ------------------------------------------------------


@pytest.mark.parametrize("layer", LAYERS)
def test_every_model_file_has_a_schema_entry_and_every_entry_a_model(layer: str) -> None:
    files = {p.stem for p in (SQL / layer).glob("*.sql")}
    entries = schema_entries(layer)
    sql_entries = {e["name"] for e in entries if e.get("language", "sql") == "sql"}
    python_entries = {e["name"] for e in entries if e.get("language") == "python"}
    assert files == sql_entries
    assert not python_entries & files
    assert {m.name for m in load_models() if m.layer == layer} == files | python_entries


def test_the_python_models_are_declared_with_their_language_and_their_functions() -> None:
    python = {m.name for m in load_models() if m.sql is None}
    # The sample pass writes its models' tables; the first of them runs it.
    assert list(SAMPLE_PASS_MODELS)[:2] == ["int_gpu_samples", "int_mig_instance_samples"]
    expected = {"int_device_classes", "int_holder_tenants", *SAMPLE_PASS_MODELS}
    assert python == expected == set(PYTHON_MODEL_FUNCTIONS)


def test_a_python_models_declared_inputs_are_the_tables_its_function_reads() -> None:
    """depends_on stands in for the SQL a Python model has not: it must name what the function queries."""
    models = by_name()
    for name, function in PYTHON_MODEL_FUNCTIONS.items():
        if function.__qualname__.startswith("_written_by_the_pass"):
            assert models[name].deps == ("int_gpu_samples",), name  # the model that runs the pass
            continue
        # The sample pass's first table runs the pass: what it reads is what the pass's module queries.
        source = inspect.getsource(sample_pass if name == "int_gpu_samples" else function)
        tree = ast.parse(source)
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        queried = {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        }
        read = {m for m in [*models, *RAW_TABLES] if any(re.search(rf"\b{m}\b", text) for text in queried)}
        assert set(models[name].deps) == read, name


def test_every_model_says_what_one_row_is_and_describes_every_column() -> None:
    for layer in LAYERS:
        for entry in schema_entries(layer):
            assert entry["description"].startswith("One row per "), entry["name"]
            assert "grain" in entry, entry["name"]
            assert all(c["description"].strip() for c in entry["columns"]), entry["name"]


def test_no_sql_header_declares_a_materialization_any_more() -> None:
    for path in SQL.rglob("*.sql"):
        assert "materialized:" not in path.read_text(encoding="utf-8"), path


def test_the_wheel_carries_every_file_of_the_project() -> None:
    """pyproject's package data for gpumeter.models matches every file under sql/ (so an installed package
    finds its schema files and assertions too)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    globs = pyproject["tool"]["setuptools"]["package-data"]["gpumeter.models"]
    for path in SQL.rglob("*"):
        if path.is_file():
            relative = path.relative_to(SQL.parent).as_posix()
            assert any(
                fnmatch.fnmatchcase(relative, g) and g.count("/") == relative.count("/") for g in globs
            ), relative


# --- materialization: per layer in project.yml, overridden in schema.yml ------------------------------------


def test_each_layer_materializes_its_models_as_project_yml_says_and_an_entry_overrides_it() -> None:
    project = yaml.safe_load((SQL / "project.yml").read_text(encoding="utf-8"))["models"]
    assert {layer: project[layer]["materialized"] for layer in LAYERS} == dict.fromkeys(LAYERS, "table")
    models = by_name()
    for layer in LAYERS:
        for entry in schema_entries(layer):
            expected = entry.get("materialized", project[layer]["materialized"])
            assert models[entry["name"]].materialized == expected, entry["name"]
    assert sorted(m.name for m in models.values() if m.ephemeral) == [
        "int_keyed_device_samples",
        "stg_dcgm_judged",
    ]


def test_an_ephemeral_model_is_not_an_asset_and_every_other_model_is() -> None:
    assets = {spec.key.path[-1] for spec in MODEL_SPECS}
    assert assets == {m.name for m in load_models() if not m.ephemeral}


def test_the_assets_describe_their_columns_as_their_schema_files_do() -> None:
    models = by_name()
    for spec in MODEL_SPECS:
        model = models[spec.key.path[-1]]
        assert spec.description == model.description
        columns = spec.metadata["dagster/column_schema"].columns
        assert [(c.name, c.type, c.description) for c in columns] == [
            (c.name, c.data_type, c.description) for c in model.columns
        ]


# --- the columns each model outputs ---------------------------------------------------------------------------


def varied_day() -> FactoryBuilder:
    """One small day touching most models: whole GPUs, a MIG GPU, a shared device, a DRA claim, labels,
    phases, node states, Kueue and OpenCost series."""
    f = factory().gpu("n1", "GPU-1", H100).gpu("n1", "GPU-2", H100, index="1").gpu("n2", "GPU-M", A100)
    f.gpu("n2", "GPU-3", A100, index="1")
    for i in range(4):
        f.sample("GPU-1", i, util=50, pod=P1, energy=1000.0 * i, fb=100)
        f.sample("GPU-2", i, util=20 + i, pod=P1, vgpu="0")
        f.sample("GPU-2", i, util=20, pod=P2, vgpu="1")
        f.sample("GPU-M", i, gpu_i_id="1", profile="3g.40gb", gr=0.5, pod=P2)
        f.sample("GPU-M", i, gpu_i_id="2", profile="3g.40gb", gr=0.1)
        f.sample("GPU-M", i, energy=500.0 * i)
        f.sample("GPU-3", i, util=70)
        f.node_state("n1", i, gpus=2, allocatable_cpu=64, requested_cpu=8)
        f.node_state("n2", i, gpus=2, cordoned=i == 3)
        f.pod_phase("ns-a", "w1", i, "Running")
        f.kueue_cluster_queue("cq-a", i, nominal_quota=4, usage=2, borrowing_limit=2)
        f._kube_row(i, "node_gpu_hourly_cost", 3.6, {"node": "n1"})
    f.pod_labels("ns-a", "p1", {"team": "a"})
    f.slice_device("n2", "gpu-1", uuid="GPU-3")
    f.claim("ns-a", "c1", pool="n2", device="gpu-1", reserved_pod="w1")
    f.dcgm_row(f.ts(0), "DCGM_FI_DEV_GPU_UTIL", -5.0, hostname="n1", uuid="GPU-1", model_name=H100)
    return f


@pytest.fixture(scope="module")
def metered() -> dict[str, pa.Table]:
    tenants = [
        {"name": "team-a", "namespaces": ["ns-a"], "kueue_cluster_queues": ["cq-a"]},
        {"name": "team-b", "namespaces": ["ns-b"]},
    ]
    config = make_config(tenants=tenants)
    return meter_day(varied_day().build(), config, "c1", DAY)


@pytest.mark.parametrize("layer", ["marts", "intermediate", "staging"])
def test_each_model_outputs_exactly_the_columns_it_declares(layer: str, metered: dict[str, pa.Table]) -> None:
    for model in load_models():
        if model.layer != layer or model.ephemeral:
            continue
        table = metered[model.name]
        assert table.column_names == [c.name for c in model.columns], model.name


def test_an_ephemeral_model_outputs_exactly_the_columns_it_declares(metered: dict[str, pa.Table]) -> None:
    """A view's inputs are the raw tables or the metered day's models: each view is made over them here, as
    the run makes it, and described."""
    con = duckdb.connect()
    try:
        _load_raw(con, varied_day().build())
        _set_variables(con, make_config(), "c1", DAY)
        con.execute(MACROS.read_text(encoding="utf-8"))
        ephemeral = [model for model in load_models() if model.ephemeral]
        for model in ephemeral:
            for dep in model.deps:
                if dep in metered:
                    con.register(dep, metered[dep])
        for model in ephemeral:
            assert model.sql is not None
            con.execute(f"create temp view {model.name} as {model.sql}")
            described = [(r[0], r[1]) for r in con.execute(f"describe {model.name}").fetchall()]
            assert described == [(c.name, c.data_type) for c in model.columns], model.name
    finally:
        con.close()


def test_the_varied_day_reaches_the_models_it_is_meant_to(metered: dict[str, pa.Table]) -> None:
    """The column checks above are checks of something: these models have rows."""
    for name in (
        "mart_device_seconds",
        "mart_mig_slice_usage",
        "mart_queue_quota_usage",
        "int_dra_device_map",
        "int_vgpu_copy_conflicts",
        "int_node_gpu_price_spans",
        "int_node_unschedulable_spans",
        "int_dcgm_quarantine",
        "int_tenant_tariff_lines",
        "int_pool_idle",
    ):
        assert metered[name].num_rows > 0, name


def test_a_selected_model_is_run_with_what_it_reads_and_nothing_else(metered: dict[str, pa.Table]) -> None:
    """meter_day(select=...), as dbt's `--select +model`: the model and its inputs run, nothing downstream of
    them, and the model's rows are those of the full run."""
    ran: list[str] = []
    config = make_config(
        tenants=[{"name": "team-a", "namespaces": ["ns-a"], "kueue_cluster_queues": ["cq-a"]}]
    )
    got = meter_day(
        varied_day().build(),
        config,
        "c1",
        DAY,
        select=("int_node_unschedulable_spans",),
        on_model=lambda model: ran.append(model.name),
    )
    assert list(got) == ["int_node_unschedulable_spans"]
    by = [("node", "ascending"), ("from_ms", "ascending")]
    assert (
        got["int_node_unschedulable_spans"]
        .sort_by(by)
        .equals(metered["int_node_unschedulable_spans"].sort_by(by))
    )
    assert "stg_kube_node_states" in ran  # what it reads
    assert not any(name.startswith(("mart_", "stg_dcgm")) for name in ran), (
        ran
    )  # neither readers nor strangers


def test_a_model_can_be_given_other_sql_for_one_run() -> None:
    """meter_day(models=...): the project's models with one model's SQL replaced (bench/ gives a model's rows
    from files another engine wrote); the replacement's rows are the model's."""
    models = [
        replace(m, sql=f"select * from ({m.sql}) where false")
        if m.name == "int_node_unschedulable_spans"
        else m
        for m in load_models()
    ]
    got = meter_day(varied_day().build(), make_config(), "c1", DAY, select=("int_node_unschedulable_spans",))
    assert got["int_node_unschedulable_spans"].num_rows > 0
    emptied = meter_day(
        varied_day().build(),
        make_config(),
        "c1",
        DAY,
        select=("int_node_unschedulable_spans",),
        models=models,
    )
    assert emptied["int_node_unschedulable_spans"].num_rows == 0
    assert emptied["int_node_unschedulable_spans"].schema == got["int_node_unschedulable_spans"].schema


def test_selecting_a_model_that_does_not_exist_names_it() -> None:
    with pytest.raises(ProjectError, match="no model named int_gpu_sample:"):
        meter_day(varied_day().build(), make_config(), "c1", DAY, select=("int_gpu_sample",))


def test_the_declared_grain_identifies_each_row(metered: dict[str, pa.Table]) -> None:
    for model in load_models():
        if model.ephemeral or not model.grain:
            continue
        keys = list(zip(*(metered[model.name].column(c).to_pylist() for c in model.grain), strict=True))
        assert len(keys) == len(set(keys)), model.name


def test_a_model_whose_output_differs_from_its_declaration_is_an_error_naming_both() -> None:
    model = Model(
        "mart_example",
        "marts",
        (),
        "select 1",
        columns=(
            Column("a", "INTEGER", "A."),
            Column("b", "DOUBLE", "B."),
            Column("gone", "VARCHAR", "Gone."),
        ),
    )
    con = duckdb.connect()
    try:
        con.execute("create table mart_example as select 1 as a, 2 as b, 'x' as extra")
        with pytest.raises(ProjectError) as info:
            check_columns(con, model)
    finally:
        con.close()
    message = str(info.value)
    assert "sql/marts/mart_example.sql" in message and "sql/marts/schema.yml" in message
    assert (
        "extra (VARCHAR)" in message
        and "not output: gone" in message
        and "b as INTEGER, declared DOUBLE" in message
    )


# --- assertions ----------------------------------------------------------------------------------------------


def assertion_session(tables: dict[str, str]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    _set_variables(con, make_config(), "c1", DAY)  # Δ = 60 s
    con.execute(MACROS.read_text(encoding="utf-8"))
    for name, select in tables.items():
        con.execute(f"create table {name} as {select}")
    return con


def run_assertions(model: str, tables: dict[str, str]) -> None:
    con = assertion_session(tables)
    try:
        check_assertions(con, by_name()[model])
    finally:
        con.close()


def holders(*rows: tuple[str, int, int, int, int]) -> dict[str, str]:
    """int_keyed_device_holders rows from (device_id, ts_ms, holder_count, share_numerator, share_denominator),
    each device keyed by an integer that stg_dcgm_devices names."""
    keys = {d: k for k, d in enumerate(sorted({row[0] for row in rows}), start=1)}
    values = ", ".join(f"({keys[d]}, {t}, {c}, {n}, {q}::hugeint)" for d, t, c, n, q in rows)
    names = ", ".join(f"({k}, '{d}')" for d, k in keys.items())
    return {
        "int_keyed_device_holders": f"select * from (values {values}) "
        "as t(device_key, ts_ms, holder_count, share_numerator, share_denominator)",
        "stg_dcgm_devices": f"select * from (values {names}) as t(device_key, device_id)",
    }


def test_holders_sharing_a_device_whole_pass() -> None:
    t = 1_793_491_200_000  # 2026-11-01T00:00:00Z
    # 1/2 + 1/2; 1/3 + 1/3 + 1/3; 250000/1000000 + 750000/1000000; one holder of 1/1.
    run_assertions(
        "int_keyed_device_holders",
        holders(
            ("GPU-1", t, 2, 1, 2),
            ("GPU-1", t, 2, 1, 2),
            ("GPU-2", t, 3, 1, 3),
            ("GPU-2", t, 3, 1, 3),
            ("GPU-2", t, 3, 1, 3),
            ("GPU-3", t, 2, 250_000, 1_000_000),
            ("GPU-3", t, 2, 750_000, 1_000_000),
            ("GPU-4", t, 1, 1, 1),
        ),
    )


@pytest.mark.parametrize(
    ("rows", "held"),
    [
        # 1/2 + 2/3 = 7/6 of the device (in sixths)
        ([("GPU-1", 1, 2, 1, 2), ("GPU-1", 1, 2, 2, 3)], "7/6"),
        # 600000/1000000 + 500000/1000000
        ([("GPU-1", 1, 2, 600_000, 1_000_000), ("GPU-1", 1, 2, 500_000, 1_000_000)], "1100000/1000000"),
        # one holder of 3/2
        ([("GPU-1", 1, 1, 3, 2)], "3/2"),
    ],
)
def test_holders_holding_more_than_the_device_stop_the_day(rows: list[tuple[Any, ...]], held: str) -> None:
    t = 1_793_491_260_000  # 2026-11-01T00:01:00Z
    stamped = [(d, t, c, n, q) for d, _, c, n, q in rows]
    with pytest.raises(AccountingError) as info:
        run_assertions("int_keyed_device_holders", holders(*stamped))
    message = str(info.value)
    assert f"the holders of device GPU-1 at 2026-11-01T00:01:00Z hold {held} of it" in message
    assert "R6" not in message


def capacity_tables(categories: list[tuple[str, str]]) -> dict[str, str]:
    """n1 observed at 3 samples (180 GPU-seconds at Δ = 60 s), n2 at 1, each node keyed by an integer that
    stg_dcgm_nodes names; categories as given."""
    samples = "select * from (values (1, 1), (1, 2), (1, 3), (2, 1)) as t(node_key, ts_ms)"
    values = ", ".join(f"('{node}', {seconds}::decimal(38, 12))" for node, seconds in categories)
    return {
        "int_gpu_samples": samples,
        "stg_dcgm_nodes": "select * from (values (1, 'n1'), (2, 'n2')) as t(node_key, node)",
        "mart_stranded_capacity": f"select * from (values {values}) as t(node, gpu_seconds)",
    }


def test_categories_that_sum_to_each_nodes_observed_capacity_pass() -> None:
    run_assertions(
        "mart_stranded_capacity",
        capacity_tables([("n1", "100.5"), ("n1", "79.5"), ("n2", "60")]),
    )


def test_categories_that_lose_capacity_stop_the_day_naming_the_node() -> None:
    with pytest.raises(AccountingError) as info:
        run_assertions("mart_stranded_capacity", capacity_tables([("n1", "120"), ("n2", "60")]))
    message = str(info.value)
    assert "node 'n1' sum to 120.000000000000 GPU-seconds" in message
    assert "observed for 180.000000000000" in message


def cost_tables(lines: list[tuple[int, str]], pool: list[tuple[int, str]]) -> dict[str, str]:
    def table(rows: list[tuple[int, str]], units: str, amount: str) -> str:
        values = ", ".join(f"('c1', '2026-11-01'::date, {u}::hugeint, {a}::decimal(38, 12))" for u, a in rows)
        return f"select * from (values {values}) as t(cluster, day, {units}, {amount})"

    return {
        "mart_tenant_daily_cost": table(lines, "amount_units", "amount"),
        "mart_pool_daily_cost": table(pool, "pool_units", "pool_cost"),
    }


def test_lines_that_sum_to_the_pool_cost_pass() -> None:
    run_assertions(
        "mart_tenant_daily_cost",
        cost_tables([(7, "0.000000000007"), (3, "0.000000000003")], [(10, "0.000000000010")]),
    )


@pytest.mark.parametrize(
    "lines",
    [
        [(7, "0.000000000007"), (2, "0.000000000003")],  # a unit of money charged nowhere
        [(7, "0.000000000007"), (3, "0.000000000004")],  # the decimals over the pool cost's
    ],
)
def test_lines_that_do_not_sum_to_the_pool_cost_stop_the_day(lines: list[tuple[int, str]]) -> None:
    with pytest.raises(AccountingError) as info:
        run_assertions("mart_tenant_daily_cost", cost_tables(lines, [(10, "0.000000000010")]))
    message = str(info.value)
    assert "the cost lines of cluster c1 on 2026-11-01" in message
    assert "but the pool cost is 0.000000000010 (10 units)" in message


def test_an_assertion_returning_no_message_is_an_error_naming_it() -> None:
    con = duckdb.connect()
    try:
        model = by_name()["stg_dcgm_series"]
        broken = Assertion("assert_silent", "select 1 as x", ())
        with pytest.raises(ProjectError, match=r"sql/assertions/assert_silent.sql.*no `message` column"):
            check_assertions(con, Model(model.name, model.layer, model.deps, model.sql, assertions=(broken,)))
    finally:
        con.close()


def store_raw(warehouse: Warehouse, f: FactoryBuilder) -> None:
    for name, table in f.build().tables().items():
        warehouse.write_day(RAW, name, f.cluster, f.day, table)


def opencost_config(tmp_path: Path) -> Config:
    return make_config(
        rate_card={"price_source": "opencost", "models": []},
        warehouse={"path": str(tmp_path / "warehouse"), "persist_models": "all"},
    )


def test_a_failing_assertion_stops_the_run_right_after_its_model_with_its_message_and_writes_nothing(
    tmp_path: Path,
) -> None:
    """R8 under price_source: opencost: no node_gpu_hourly_cost sample for n7, so int_gpu_samples has no price
    and its assertion stops the day: no model after it runs, no zone gets a file."""
    config = opencost_config(tmp_path)
    warehouse = Warehouse.of(config.warehouse)
    f = factory().gpu("n7", "GPU-1", H100)
    f.samples("GPU-1", range(2), util=50, pod=P1)
    store_raw(warehouse, f)
    done: list[str] = []
    with pytest.raises(AccountingError) as info:
        meter_partition_day(config, warehouse, DAY, on_model=lambda m: done.append(m.name))
    assert str(info.value) == (
        "GPU model 'NVIDIA H100 80GB HBM3' on node 'n7' has no price at 2026-11-01T00:00:00Z: OpenCost's "
        "node_gpu_hourly_cost has no sample for the node within kube_lookback_seconds (price_source: opencost); "
        "check that OpenCost is scraped, or price the model under rate_card.models with price_source: rate_card"
    )
    assert "int_gpu_samples" not in done  # it was built, but did not pass
    assert not any(name in done for name in ("int_device_samples", "mart_pool_daily_cost"))
    for zone in (STAGING, INTERMEDIATE, MARTS):
        assert not list((warehouse.root / zone).rglob("*.parquet")), zone


def test_the_same_day_priced_is_metered_and_written(tmp_path: Path) -> None:
    """The control of the test above: with n7's price sampled, the same setup writes every zone."""
    config = opencost_config(tmp_path)
    warehouse = Warehouse.of(config.warehouse)
    f = factory().gpu("n7", "GPU-1", H100)
    f.samples("GPU-1", range(2), util=50, pod=P1)
    f._kube_row(0, "node_gpu_hourly_cost", 3.6, {"node": "n7"})
    store_raw(warehouse, f)
    meter_partition_day(config, warehouse, DAY)
    for zone in (STAGING, INTERMEDIATE, MARTS):
        assert list((warehouse.root / zone).rglob("*.parquet")), zone


# --- malformed declarations: one clear error naming the file and the model -----------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of sql/ to break."""
    copy = tmp_path / "sql"
    shutil.copytree(SQL, copy)
    return copy


def edit(path: Path, change: Callable[[str], str]) -> None:
    text = path.read_text(encoding="utf-8")
    changed = change(text)
    assert changed != text
    path.write_text(changed, encoding="utf-8")


def load_error(project: Path) -> str:
    with pytest.raises(ProjectError) as info:
        load_models(project)
    return str(info.value)


def test_a_copy_of_the_project_loads_as_the_package_does(project: Path) -> None:
    assert [m.name for m in load_models(project)] == [m.name for m in load_models()]


def test_a_misspelt_key_is_one_error_naming_the_file_the_model_and_the_column(project: Path) -> None:
    edit(
        project / "marts" / "schema.yml",
        lambda t: t.replace(
            "{name: pool_units, data_type: HUGEINT, description:",
            "{name: pool_units, data_type: HUGEINT, descripton:",
        ),
    )
    message = load_error(project)
    assert message.startswith("sql/marts/schema.yml: model mart_pool_daily_cost, column pool_units: ")
    assert "descripton" in message and "description" in message


def test_a_grain_column_that_is_not_declared_is_an_error(project: Path) -> None:
    edit(
        project / "intermediate" / "schema.yml",
        lambda t: t.replace("grain: [gpu_model]", "grain: [gpu_modle]"),
    )
    message = load_error(project)
    assert message.startswith("sql/intermediate/schema.yml: model int_pool_idle: ")
    assert "gpu_modle" in message


def test_yaml_that_does_not_parse_is_an_error_naming_the_file(project: Path) -> None:
    edit(project / "staging" / "schema.yml", lambda t: t.replace("grain: [series_key]", "grain: [series_key"))
    assert load_error(project).startswith("sql/staging/schema.yml is not valid YAML")


def test_a_model_file_without_a_schema_entry_is_an_error(project: Path) -> None:
    (project / "marts" / "mart_extra.sql").write_text("select 1 as x\n", encoding="utf-8")
    message = load_error(project)
    assert message.startswith(
        "sql/marts/mart_extra.sql: model mart_extra has no entry in sql/marts/schema.yml"
    )


def test_a_schema_entry_without_a_model_file_is_an_error(project: Path) -> None:
    (project / "intermediate" / "int_pool_idle.sql").unlink()
    message = load_error(project)
    assert message == (
        "sql/intermediate/schema.yml: model int_pool_idle is declared, but there is no "
        "sql/intermediate/int_pool_idle.sql"
    )


def test_an_assertion_without_its_file_is_an_error(project: Path) -> None:
    (project / "assertions" / "assert_cost_is_conserved.sql").unlink()
    message = load_error(project)
    assert message == (
        "sql/marts/schema.yml: model mart_tenant_daily_cost: assertion assert_cost_is_conserved has no file "
        "sql/assertions/assert_cost_is_conserved.sql"
    )


def test_an_assertion_file_no_model_runs_is_an_error(project: Path) -> None:
    (project / "assertions" / "assert_nothing.sql").write_text(
        "select 'x' as message where false\n", encoding="utf-8"
    )
    assert load_error(project).startswith(
        "sql/assertions/assert_nothing.sql: assertion assert_nothing is run by no model"
    )


def test_a_layer_without_its_materialization_is_an_error(project: Path) -> None:
    edit(project / "project.yml", lambda t: t.replace("  marts:\n    materialized: table\n", ""))
    message = load_error(project)
    assert message.startswith("sql/project.yml: ") and "marts" in message


def test_a_python_model_must_say_what_it_reads(project: Path) -> None:
    edit(
        project / "intermediate" / "schema.yml",
        lambda t: t.replace("    depends_on: [stg_dcgm_series]\n", ""),
    )
    message = load_error(project)
    assert message.startswith("sql/intermediate/schema.yml: model int_device_classes: ")
    assert "depends_on" in message
