"""Today so far: the hourly provisional run (gpumeter.models.provisional, gpumeter.pipelines.today), how the
nightly run replaces it, and that provisional figures never reach an invoice or a closed period.

The factory day (Δ = 60 s, H100 at 3.60 a GPU-hour, so a sample is 0.06): node n1 has two H100s, scraped every
minute of the day. GPU-1 is held by p1 (ns-a, team-a) all day. GPU-2 is held by p2 (ns-b, team-b) from 10:00
to 18:00 and nobody's otherwise. Through 14:00 ([00:00, 14:00): sample indices 0..839):

    team-a  840 samples = 14 GPU-h = 50.40        whole day: 24 GPU-h = 86.40
    team-b  240 samples =  4 GPU-h = 14.40                    8 GPU-h = 28.80
    __idle__ 600 samples = 10 GPU-h = 36.00                   16 GPU-h = 57.60
    pool    28 GPU-h = 100.80                                 48 GPU-h = 172.80

Real parts: the Parquet source, the Dagster jobs in an instance (the schedule's tick and its run config), DuckDB,
the warehouse's files and its (cluster, day) lock. November 2026 has 30 days.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from datetime import UTC, date, datetime
from decimal import Decimal as D
from pathlib import Path
from typing import Any

import pytest
import yaml
from dagster import DagsterInstance, SkipReason, build_schedule_context

from gpumeter.billing.alerts import period_alerts
from gpumeter.billing.invoices import Period
from gpumeter.billing.periods import close_period, closed_lines_path, invoice_lines_path, read_manifest
from gpumeter.config import IDLE, load_config
from gpumeter.pipelines.definitions import build_definitions
from gpumeter.pipelines.launch import invoice_month, meter_days, meter_today
from gpumeter.pipelines.today import TODAY_JOB, TODAY_OP, TODAY_SCHEDULE
from gpumeter.storage import paths, provisional
from gpumeter.storage.files import read_parquet
from gpumeter.storage.warehouse import Warehouse
from gpumeter.views.cache import ReadCache
from gpumeter.views.charges import ProvisionalDay
from gpumeter.views.filters import Filters
from gpumeter.views.identity import Viewer
from gpumeter.views.scoped import Views
from tests.builders import FactoryBuilder

pytestmark = pytest.mark.slow

H100 = "NVIDIA H100 80GB HBM3"
NOV1, NOV2 = date(2026, 11, 1), date(2026, 11, 2)
NOV = Period(2026, 11)
THROUGH = datetime(2026, 11, 2, 14, tzinfo=UTC)
FINANCE = Viewer("finance", identity="test")


def factory(cluster: str, day: date) -> FactoryBuilder:
    f = FactoryBuilder(cluster, day, scrape_s=60)
    f.gpu("n1", "GPU-1", H100).gpu("n1", "GPU-2", H100, index="1")
    f.samples("GPU-1", range(0, 1440), util=50, pod=("ns-a", "p1", "main"))
    f.samples("GPU-2", range(0, 600), util=0)
    f.samples("GPU-2", range(600, 1080), util=80, pod=("ns-b", "p2", "main"))
    f.samples("GPU-2", range(1080, 1440), util=0)
    for k in range(0, 1440):  # no lookback rows: each day's files are its own (write_parquet_source)
        f.node_state("n1", k, gpus=2)
    return f


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Parquet source with c1's Nov 1 and Nov 2, and c2's Nov 2."""
    root = tmp_path_factory.mktemp("today-source") / "source"
    for cluster, day in (("c1", NOV1), ("c1", NOV2), ("c2", NOV2)):
        factory(cluster, day).write_parquet_source(root)
    return root


def write_config(folder: Path, source: Path, clusters: tuple[str, ...] = ("c1",), **extra: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "pool": "test-pool",
        "clusters": [{"name": c, "source": {"kind": "parquet", "path": str(source)}} for c in clusters],
        "scrape_interval_seconds": 60,
        "rate_card": {"models": [{"model": "H100-80GB", "aliases": [H100], "price_per_gpu_hour": 3.6}]},
        "tenants": [
            {"name": "team-a", "cost_center": "CC-A", "namespaces": ["ns-a"], "monthly_budget": 1000},
            {"name": "team-b", "cost_center": "CC-B", "namespaces": ["ns-b"], "monthly_budget": 1000},
        ],
        "warehouse": {"path": str(folder / "warehouse")},
        **extra,
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def warehouse_of(config_path: Path) -> Warehouse:
    return Warehouse.of(load_config(config_path).warehouse)


def amounts(rows: list[dict[str, Any]]) -> dict[str, D]:
    found: dict[str, D] = {}
    for r in rows:
        found[r["tenant"]] = found.get(r["tenant"], D(0)) + r["amount"]
    return found


def digests(root: Path, zone: str) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((root / zone).glob("**/data.parquet"))
    }


def provisional_files(warehouse: Warehouse) -> list[Path]:
    return sorted(paths.provisional_root(warehouse.root).glob("**/*.parquet"))


@pytest.fixture(scope="module")
def month(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """c1: Nov 1 metered by the nightly job, Nov 2 by the provisional job through 14:00."""
    config_path = write_config(tmp_path_factory.mktemp("today-month"), source)
    meter_days(str(config_path), [NOV1])
    [run] = meter_today(str(config_path), THROUGH)
    assert run["metered"], run
    return config_path


def copy_of(config_path: Path, to: Path) -> Path:
    """The warehouse of `config_path` copied under `to`, with its config (the same source)."""
    shutil.copytree(warehouse_of(config_path).root, to / "warehouse")
    return write_config(to, Path(yaml.safe_load(config_path.read_text())["clusters"][0]["source"]["path"]))


# --- the schedule and the run ------------------------------------------------------------------------------


def test_a_tick_at_14_10_asks_one_run_per_cluster_through_14_00_and_the_runs_meter_it(
    source: Path, tmp_path: Path
) -> None:
    config_path = write_config(tmp_path, source, clusters=("c1", "c2"))
    defs = build_definitions(config_path)
    schedule = defs.resolve_schedule_def(TODAY_SCHEDULE)
    assert schedule.cron_schedule == "10 * * * *" and schedule.execution_timezone == "UTC"
    job = defs.resolve_job_def(TODAY_JOB)
    with DagsterInstance.ephemeral() as instance:
        tick = datetime(2026, 11, 2, 14, 10, tzinfo=UTC)
        with build_schedule_context(instance=instance, scheduled_execution_time=tick) as ctx:
            requests = schedule(ctx)
        assert isinstance(requests, list)
        assert [r.run_key for r in requests] == [
            "today-c1-2026-11-02T14:00:00Z",
            "today-c2-2026-11-02T14:00:00Z",
        ]
        assert [r.run_config["ops"][TODAY_OP]["config"] for r in requests] == [
            {"cluster": "c1", "through": "2026-11-02T14:00:00Z"},
            {"cluster": "c2", "through": "2026-11-02T14:00:00Z"},
        ]
        # At 00:10 the day has no full hour: nothing to ask for.
        midnight = datetime(2026, 11, 3, 0, 10, tzinfo=UTC)
        with build_schedule_context(instance=instance, scheduled_execution_time=midnight) as ctx:
            assert isinstance(schedule(ctx), SkipReason)
        for request in requests:  # what the daemon launches for the tick
            result = job.execute_in_process(
                run_config=request.run_config, instance=instance, tags=request.tags
            )
            assert result.success and result.output_for_node(TODAY_OP)["metered"]
    warehouse = warehouse_of(config_path)
    for cluster in ("c1", "c2"):
        rows = provisional.zone(warehouse).read_days(paths.MARTS, paths.TENANT_DAILY_COST, [NOV2], cluster)
        assert rows is not None
        assert amounts(rows.to_pylist()) == {"team-a": D("50.4"), "team-b": D("14.4"), IDLE: D("36")}


def test_the_run_meters_midnight_to_14_00_into_the_provisional_zone_only(month: Path) -> None:
    warehouse = warehouse_of(month)
    zone = provisional.zone(warehouse)
    cost = zone.read_days(paths.MARTS, paths.TENANT_DAILY_COST, [NOV2])
    assert cost is not None
    rows = cost.to_pylist()
    assert {r["through"] for r in rows} == {THROUGH}
    assert amounts(rows) == {"team-a": D("50.4"), "team-b": D("14.4"), IDLE: D("36")}
    held = {r["tenant"]: r["gpu_seconds"] for r in rows if r["charge_type"] == "reserved"}
    assert held == {"team-a": D(14 * 3600), "team-b": D(4 * 3600)}  # device-hours 14 and 4
    devices = zone.read_days(paths.MARTS, "device_seconds", [NOV2])
    assert devices is not None
    assert sorted((r["pod"], r["device_seconds"]) for r in devices.to_pylist()) == [
        ("p1", D(14 * 3600)),
        ("p2", D(4 * 3600)),
    ]
    [pool] = zone.read_days(paths.MARTS, "pool_daily_cost", [NOV2]).to_pylist()  # type: ignore[union-attr]
    assert pool["pool_cost"] == D("100.8")
    [quality] = zone.read_days(paths.MARTS, "data_quality", [NOV2]).to_pylist()  # type: ignore[union-attr]
    assert quality["observed_gpu_seconds"] == quality["expected_gpu_seconds"] == 28 * 3600  # full coverage
    # Its raw pull stops at 14:00 and is the provisional zone's: the raw zone has Nov 1 only, the marts too.
    raw = zone.read_days(paths.RAW, "raw_dcgm_samples", [NOV2])
    assert raw is not None and max(raw.column("ts_ms").to_pylist()) < THROUGH.timestamp() * 1000
    assert warehouse.days(paths.RAW, "raw_dcgm_samples") == [("c1", NOV1)]
    assert warehouse.days(paths.MARTS, paths.TENANT_DAILY_COST) == [("c1", NOV1)]


def test_the_nightly_run_removes_them_and_its_marts_are_byte_identical(source: Path, tmp_path: Path) -> None:
    with_provisional = write_config(tmp_path / "with", source)
    without = write_config(tmp_path / "without", source)
    [run] = meter_today(str(with_provisional), THROUGH)
    assert run["metered"]
    assert provisional_files(warehouse_of(with_provisional))
    meter_days(str(with_provisional), [NOV2])
    meter_days(str(without), [NOV2])
    assert provisional_files(warehouse_of(with_provisional)) == []
    first, second = warehouse_of(with_provisional).root, warehouse_of(without).root
    assert digests(first, paths.MARTS) == digests(second, paths.MARTS) != {}
    assert digests(first, paths.RAW) == digests(second, paths.RAW)


def test_while_the_nightly_run_holds_the_lock_the_provisional_run_skips(month: Path, tmp_path: Path) -> None:
    config_path = copy_of(month, tmp_path)
    warehouse = warehouse_of(config_path)
    before = {p: p.read_bytes() for p in provisional_files(warehouse)}
    with warehouse.day_lock(NOV2, cluster="c1"):  # as the nightly run holds it
        started = time.monotonic()
        [run] = meter_today(str(config_path), datetime(2026, 11, 2, 15, tzinfo=UTC))
        waited = time.monotonic() - started
    assert not run["metered"]
    assert "another run is writing the day" in run["message"] and "nothing was written" in run["message"]
    assert waited < 60  # it did not wait for the lock (the default wait is hours)
    assert {p: p.read_bytes() for p in provisional_files(warehouse)} == before  # still through 14:00


def test_a_day_with_final_marts_is_never_overwritten(month: Path, tmp_path: Path) -> None:
    config_path = copy_of(month, tmp_path)
    warehouse = warehouse_of(config_path)
    finals = digests(warehouse.root, paths.MARTS)
    [run] = meter_today(str(config_path), datetime(2026, 11, 1, 14, tzinfo=UTC))  # Nov 1 is final
    assert not run["metered"] and "final figures" in run["message"]
    assert digests(warehouse.root, paths.MARTS) == finals
    assert provisional.zone(warehouse).days(paths.MARTS, paths.TENANT_DAILY_COST) == [("c1", NOV2)]


# --- never billed ------------------------------------------------------------------------------------------


def test_invoices_and_closed_periods_never_include_provisional_rows(month: Path, tmp_path: Path) -> None:
    config_path = copy_of(month, tmp_path)
    config, warehouse = load_config(config_path), warehouse_of(config_path)
    assert provisional.days(warehouse, paths.TENANT_DAILY_COST) == [("c1", NOV2)]  # present, and ignored
    invoice_month(str(config_path), "2026-11")
    manifest = close_period(config, warehouse, NOV, by="test", reason="month end")
    # The lines are Nov 1's: 86.40 + 28.80 to the tenants, 57.60 idle (Nov 2's 50.40 + 14.40 + 36 are not).
    for path in (invoice_lines_path(warehouse, "2026-11"), closed_lines_path(warehouse, "2026-11")):
        lines = read_parquet(path).to_pylist()
        assert amounts([{**r, "amount": r["amount_unrounded"]} for r in lines]) == {
            "team-a": D("86.4"),
            "team-b": D("28.8"),
            IDLE: D("57.6"),
        }
    assert D(manifest["total_unrounded"]) == D("172.8") == D(read_manifest(warehouse, "2026-11")["total"])
    csv = (warehouse.exports_dir("2026-11") / paths.invoice_csv_name("2026-11")).read_text()
    assert "50.40" not in csv and "14.40" not in csv


# --- the dashboard's data layer, budgets and alerts --------------------------------------------------------


def test_the_data_layer_marks_provisional_rows(month: Path) -> None:
    views = Views(warehouse_of(month), load_config(month), cache=ReadCache(0))
    filters = Filters(NOV)
    assert views.provisional_days(FINANCE, filters) == [ProvisionalDay(NOV2, THROUGH)]
    daily = views.daily_charges(FINANCE, filters, so_far=True)
    by_row = {
        (r["day"], r["tenant"]): (r["provisional"], r["through"], r["amount"]) for r in daily.to_dicts()
    }
    assert by_row[(NOV1, "team-a")] == (False, None, D("86.4"))
    assert by_row[(NOV2, "team-a")] == (True, THROUGH, D("50.4"))
    assert by_row[(NOV2, "team-b")] == (True, THROUGH, D("14.4"))
    mtd = {r["tenant"]: r for r in views.tenant_charges(FINANCE, filters, so_far=True).to_dicts()}
    assert (mtd["team-a"]["complete_days_amount"], mtd["team-a"]["provisional_amount"]) == (
        D("86.4"),
        D("50.4"),
    )
    assert mtd["team-a"]["amount"] == D("136.8") and mtd["team-a"]["through"] == THROUGH
    assert mtd["team-a"]["gpu_hours"] == 24 + 14
    # A tenant viewer gets its own rows, marked the same way.
    tenant = Viewer("tenant", "team-b", identity="test")
    assert {r["tenant"] for r in views.daily_charges(tenant, filters, so_far=True).to_dicts()} == {"team-b"}
    assert [r["amount"] for r in views.tenant_charges(tenant, filters, so_far=True).to_dicts()] == [D("43.2")]
    # The final reads are what they were: complete days only.
    final = {r["tenant"]: r["amount"] for r in views.tenant_charges(FINANCE, filters).to_dicts()}
    assert final == {"team-a": D("86.4"), "team-b": D("28.8"), IDLE: D("57.6")}


def test_budgets_count_the_provisional_day_as_the_part_it_covers(month: Path) -> None:
    views = Views(warehouse_of(month), load_config(month), cache=ReadCache(0))
    statuses = {s.tenant: s for s in views.budgets(FINANCE, Filters(NOV), so_far=True)}
    a, b = statuses["team-a"], statuses["team-b"]
    # 1 complete day and 14 hours of Nov 2: 1 + 14/24 = 38/24 days metered.
    assert a.days_elapsed == 1 and a.days_metered == 1 + D(14) / 24 and a.through == THROUGH
    # team-a: 86.40 + 50.40 = 136.80; forecast 136.80 × 30 ÷ 38/24 = 4,104 × 24 / 38 = 2,592.
    assert (a.spent, a.provisional_spent, a.forecast) == (D("136.8"), D("50.4"), D("2592"))
    # team-b: 28.80 + 14.40 = 43.20; forecast 43.20 × 30 × 24 / 38 = 31,104 / 38 = 818.526315789473684…
    assert (b.spent, b.forecast) == (D("43.2"), D("818.526315789474"))
    assert [d for d, _ in b.cumulative] == [NOV1, NOV2] and b.cumulative[-1][1] == D("43.2")
    # Without the provisional day: 28.80 over 1 day, × 30 = 864.
    assert {s.tenant: s.forecast for s in views.budgets(FINANCE, Filters(NOV))}["team-b"] == D("864")


def test_budget_alerts_fire_on_provisional_spend_and_forecast_on_complete_days(
    month: Path, tmp_path: Path
) -> None:
    config_path = copy_of(month, tmp_path)
    # team-a's budget 120: complete days 86.40 (72 %), with today so far 136.80 (114 %): spend crosses 80 and
    # 100 % on provisional figures only; its forecast (2,592 from Nov 1 alone) crosses both anyway.
    doc = yaml.safe_load(config_path.read_text())
    doc["tenants"][0]["monthly_budget"] = 120
    doc["tenants"][1].pop("monthly_budget")
    doc["alerts"] = {"webhook_url_env": "GPUMETER_TEST_UNSET_HOOK"}
    config_path.write_text(yaml.safe_dump(doc))
    config = load_config(config_path)
    assert config.alerts is not None
    found = period_alerts(warehouse_of(config_path), config, config.alerts, NOV)
    assert [(a.key, a.spent, a.provisional_through) for a in found] == [
        ("2026-11:team-a:spend:0.8", D("136.8"), THROUGH),
        ("2026-11:team-a:spend:1", D("136.8"), THROUGH),
        ("2026-11:team-a:forecast:0.8", D("86.4"), None),
        ("2026-11:team-a:forecast:1", D("86.4"), None),
    ]
    assert "and 2 November 2026 through 14:00 UTC, provisional" in found[0].message
    assert "provisional" not in found[2].message


# --- the command line and the pages ------------------------------------------------------------------------


def test_gpumeter_today_meters_and_prints_the_month_to_date(
    month: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpumeter.cli import commands
    from gpumeter.cli.main import main

    config_path = copy_of(month, tmp_path)
    monkeypatch.setattr(commands, "_now", lambda: datetime(2026, 11, 2, 15, 10, tzinfo=UTC))
    assert main(["today", "--config", str(config_path)]) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").replace("┃", " ").split())
    assert "metered c1 2026-11-02: metered through 15:00 UTC, provisional" in out
    assert "today, through 15:00 UTC, provisional" in out
    # team-a: 86.40 complete, 15 h × 3.60 = 54.00 today so far, 140.40 to date.
    assert "team-a CC-A 86.40 USD 54.00 USD 140.40 USD" in out


@pytest.mark.parametrize("page", ["charges", "budgets", "usage"])
def test_the_pages_say_through_when_and_provisional(
    month: Path, page: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamlit.testing.v1 import AppTest

    from gpumeter.dashboard import APP

    monkeypatch.setenv("GPUMETER_CONFIG", str(month))
    monkeypatch.setenv("GPUMETER_DASHBOARD_VIEWER", "finance")
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page(f"screens/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    captions = " ".join(c.value for c in at.caption)
    assert "Includes today through 14:00 UTC, provisional" in captions
