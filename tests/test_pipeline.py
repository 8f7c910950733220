"""The Dagster pipeline end to end on the simulated factory: real materializations, real Parquet files."""

import hashlib
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from dagster import AssetKey, DagsterInstance, build_schedule_context

import gpumeter_sim as simulator
from gpumeter.billing.periods import invoice_lines_path
from gpumeter.cli.demo import write_demo_config
from gpumeter.config import load_config
from gpumeter.pipelines.definitions import INVOICE_MONTH_JOB, METER_DAY_JOB, build_definitions
from gpumeter.pipelines.launch import QUIET, RunFailed, invoice_month, meter_days
from gpumeter.pipelines.partitions import cluster_day_key
from gpumeter.storage.paths import MARTS
from gpumeter.storage.warehouse import Warehouse
from tests.builders import edit_config

pytestmark = pytest.mark.slow

DAYS = [date(2026, 11, 1), date(2026, 11, 2)]


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    spec = simulator.FactorySpec(**{**simulator.demo_spec().__dict__, "days": len(DAYS)})
    simulator.write_parquet(spec, out / "source")
    write_demo_config(out)
    return out


@pytest.fixture(scope="module")
def metered(demo_dir: Path) -> Path:
    config_path = demo_dir / "config.yaml"
    outcomes = meter_days(str(config_path), DAYS)
    # One run per (cluster, day) partition; the demo config has one cluster.
    assert [(o.partition, o.cluster, o.day) for o in outcomes] == [(f"demo|{d}", "demo", d) for d in DAYS]
    invoice_month(str(config_path), "2026-11")
    return config_path


def _digest(paths: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(paths)}


def _mart_files(config_path: Path) -> list[Path]:
    root = Warehouse.at(load_config(config_path).warehouse.path).root
    return sorted((root / MARTS).glob("**/data.parquet"))


def test_job_materializes_every_model_and_passes_checks(demo_dir: Path) -> None:
    config_path = demo_dir / "config.yaml"
    defs = build_definitions(config_path)
    job = defs.resolve_job_def(METER_DAY_JOB)
    with DagsterInstance.ephemeral() as instance:
        result = job.execute_in_process(
            partition_key=cluster_day_key("demo", DAYS[0]), instance=instance, run_config=QUIET
        )
        assert result.success
        keys = {e.asset_key for e in result.get_asset_materialization_events()}
        for name in (
            "raw_dcgm_samples",
            "stg_dcgm_series",
            "int_gpu_samples",
            "int_device_holders",
            "mart_device_seconds",
            "mart_tenant_daily_cost",
            "mart_stranded_capacity",
            "mart_mig_slice_usage",
        ):
            assert AssetKey(name) in keys
        checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
        assert checks["conservation_r13"].passed  # R13, blocking
        assert checks["no_overbooked_device"].passed
        # The demo factory has an unmapped namespace: a warning, not a failure of the run.
        assert not checks["unmapped_namespaces"].passed
        assert checks["unmapped_namespaces"].severity.value == "WARN"


def test_lineage_runs_raw_to_staging_to_marts(demo_dir: Path) -> None:
    graph = build_definitions(demo_dir / "config.yaml").resolve_asset_graph()
    parents = graph.get(AssetKey("mart_device_seconds")).parent_keys
    assert AssetKey("int_keyed_device_holders") in parents
    assert AssetKey("int_holder_tenants") in parents
    assert AssetKey("raw_dcgm_samples") in graph.get(AssetKey("stg_dcgm_series")).parent_keys
    # A Python model stands on what it declares it reads: the sample pass on the raw rows, judged.
    assert AssetKey("raw_dcgm_samples") in graph.get(AssetKey("int_gpu_samples")).parent_keys
    # An ephemeral model (a view inside the run) is no asset: its readers stand on what it reads.
    assert "stg_dcgm_judged" not in {key.path[-1] for key in graph.get_all_asset_keys()}
    assert AssetKey("raw_dcgm_samples") in graph.get(AssetKey("int_dcgm_quarantine")).parent_keys
    assert AssetKey("mart_tenant_daily_cost") in graph.get(AssetKey("invoice_lines")).parent_keys


def test_a_month_depends_on_every_cluster_day_of_the_month(demo_dir: Path) -> None:
    """R2: the month is the sum of its days, of every cluster: invoice_lines' partition maps to each
    (cluster, day) partition of the month (and of no other month)."""
    graph = build_definitions(demo_dir / "config.yaml").resolve_asset_graph()
    mart = graph.get(AssetKey("mart_tenant_daily_cost"))
    invoice = graph.get(AssetKey("invoice_lines"))
    mapping = graph.get_partition_mapping(invoice.key, mart.key)
    with DagsterInstance.ephemeral() as instance:
        upstream = mapping.get_upstream_mapped_partitions_result_for_partitions(
            invoice.partitions_def.empty_subset().with_partition_keys(["2026-11-01"]),
            invoice.partitions_def,
            mart.partitions_def,
            dynamic_partitions_store=instance,
        )
    keys = sorted(upstream.partitions_subset.get_partition_keys())
    assert keys == [f"demo|2026-11-{d:02d}" for d in range(1, 31)]


def test_month_invoice_reconciles_with_pool_cost_r13(metered: Path) -> None:
    config = load_config(metered)
    warehouse = Warehouse.at(config.warehouse.path)
    lines = pq.read_table(invoice_lines_path(warehouse, "2026-11"))
    pool = warehouse.read_days(MARTS, "pool_daily_cost", DAYS)
    pool_cost = sum((Decimal(v) for v in pool.column("pool_cost").to_pylist()), Decimal(0))
    unrounded = sum((Decimal(v) for v in lines.column("amount_unrounded").to_pylist()), Decimal(0))
    rounded = sum((Decimal(v) for v in lines.column("amount").to_pylist()), Decimal(0))
    assert pool_cost > 0
    assert unrounded == pool_cost
    assert abs(rounded - pool_cost) <= Decimal("0.005") * lines.num_rows
    tenants = set(lines.column("tenant").to_pylist())
    assert {"ml-training", "serving", "evaluation", "research", "__unallocated__", "__idle__"} <= tenants
    csvs = sorted((warehouse.root / "exports" / "2026-11").glob("*.csv"))
    assert [p.name for p in csvs][0] == "invoice_lines_2026-11_all.csv"


def test_rerun_of_a_day_replaces_it_identically_r15(metered: Path) -> None:
    before = _digest(_mart_files(metered))
    meter_days(str(metered), [DAYS[0]])
    assert _digest(_mart_files(metered)) == before


def test_days_in_any_order_give_the_same_month_r15(demo_dir: Path, metered: Path, tmp_path: Path) -> None:
    other = tmp_path / "reversed"
    other.mkdir()
    (other / "source").symlink_to(demo_dir / "source")
    config_path = write_demo_config(other)
    meter_days(str(config_path), list(reversed(DAYS)))
    invoice_month(str(config_path), "2026-11")
    ours = pq.read_table(invoice_lines_path(Warehouse.at(load_config(metered).warehouse.path), "2026-11"))
    theirs = pq.read_table(
        invoice_lines_path(Warehouse.at(load_config(config_path).warehouse.path), "2026-11")
    )
    assert ours.equals(theirs)


def test_failed_run_leaves_stored_results_untouched(metered: Path, tmp_path: Path) -> None:
    """A GPU model with no price stops the run with one message; yesterday's files are unchanged."""
    before = _digest(_mart_files(metered))

    def unprice_h200(doc: dict) -> None:
        (h200,) = [m for m in doc["rate_card"]["models"] if m["model"] == "H200-141GB"]
        h200.update(aliases=[], price_per_gpu_hour=None)

    broken = edit_config(metered, unprice_h200, to=tmp_path / "no-price.yaml")
    with pytest.raises(RunFailed, match=r"NVIDIA H200.*no price"):
        meter_days(str(broken), [DAYS[0]])
    assert _digest(_mart_files(metered)) == before


def test_malformed_claims_file_stops_with_its_name(demo_dir: Path, metered: Path, tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for child in (demo_dir / "source").iterdir():
        if child.name != "k8s":
            (source / child.name).symlink_to(child)
    claims = source / "k8s" / "cluster=demo" / "day=2026-11-01" / "resourceclaims.json"
    claims.parent.mkdir(parents=True)
    claims.write_text('{"apiVersion": "v1", "kind": "List", "items": [ {"metadata": ')
    config_path = edit_config(
        metered,
        lambda doc: doc["clusters"][0]["source"].update(path=str(source)),
        to=tmp_path / "config.yaml",
    )
    before = _digest(_mart_files(metered))
    with pytest.raises(RunFailed, match="resourceclaims.json"):
        meter_days(str(config_path), [DAYS[0]])
    assert _digest(_mart_files(metered)) == before


def test_schedules_take_the_previous_complete_day_and_month(demo_dir: Path) -> None:
    defs = build_definitions(demo_dir / "config.yaml")
    daily = defs.resolve_schedule_def("meter_previous_day")
    with build_schedule_context(scheduled_execution_time=datetime(2026, 11, 3, 1, 15, tzinfo=UTC)) as ctx:
        requests = daily(ctx)
    # One run per cluster of the config (the demo has one), keyed by cluster and day.
    assert [(r.partition_key, r.run_key) for r in requests] == [("demo|2026-11-02", "meter-demo-2026-11-02")]
    monthly = defs.resolve_schedule_def("invoice_previous_month")
    with build_schedule_context(scheduled_execution_time=datetime(2026, 12, 1, 3, 0, tzinfo=UTC)) as ctx:
        request = monthly(ctx)
    assert request.partition_key == "2026-11-01"
    assert defs.resolve_job_def(INVOICE_MONTH_JOB).partitions_def is not None


def test_code_location_loads_as_dagster_dev_loads_it(tmp_path: Path) -> None:
    """`dagster dev -m gpumeter.pipelines.definitions` loads the same module; validate it the same way."""
    import os
    import subprocess
    import sys

    dagster = Path(sys.executable).parent / "dagster"
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    run = subprocess.run(
        [str(dagster), "definitions", "validate", "-m", "gpumeter.pipelines.definitions"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Validation successful" in run.stderr + run.stdout
