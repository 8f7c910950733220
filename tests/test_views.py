"""gpumeter/views/scoped.py: the dashboard's data layer. Figures equal the marts read independently from the Parquet
files with polars; a tenant viewer never reaches another tenant's rows through any filter value."""

from __future__ import annotations

import csv
import io
import shutil
from datetime import UTC, date
from decimal import Decimal
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpumeter_sim as simulator
from gpumeter.billing.documents import render_invoice
from gpumeter.billing.focus import focus_csv
from gpumeter.billing.invoices import Period, invoice_csv
from gpumeter.billing.periods import close_period, invoice_lines_path, metered_days
from gpumeter.billing.status import Status, data_through
from gpumeter.cli.demo import write_demo_config
from gpumeter.config import IDLE, UNALLOCATED, Config, ConfigError, load_config, parse_config
from gpumeter.pipelines.launch import invoice_month, meter_days
from gpumeter.storage.paths import MARTS
from gpumeter.storage.warehouse import Warehouse
from gpumeter.views import words
from gpumeter.views.csv import frame_csv
from gpumeter.views.filters import Filters
from gpumeter.views.identity import (
    AccessDenied,
    Viewer,
    ViewerError,
    config_for,
    local_viewer,
    viewer_for_identity,
)
from gpumeter.views.scoped import Views
from gpumeter.views.summary import pool_summary
from tests.builders import invoiced_by_hand

pytestmark = pytest.mark.slow

DAYS = [date(2026, 11, 1), date(2026, 11, 2)]
NOVEMBER = Period(2026, 11)
TENANTS = ["research", "evaluation", "ml-training", "serving"]
CRAFTED = ["' or 1=1 --", "serving' or '1'='1", "%", "*", "", IDLE, UNALLOCATED, 'x"; drop table t; --']


def build_metered(out: Path, days: list[date] = DAYS) -> Path:
    """A simulated factory metered through the real Dagster jobs (days, then the month's invoice)."""
    spec = simulator.FactorySpec(**{**simulator.demo_spec().__dict__, "days": len(days)})
    simulator.write_parquet(spec, out / "source")
    config_path = write_demo_config(out)
    meter_days(str(config_path), days)
    invoice_month(str(config_path), str(Period.of(days[0])))
    return config_path


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_metered(tmp_path_factory.mktemp("views"))


@pytest.fixture(scope="module")
def config(config_path: Path) -> Config:
    return load_config(config_path)


@pytest.fixture(scope="module")
def views(config: Config) -> Views:
    return Views(Warehouse.at(config.warehouse.path), config)


def stored(config: Config, zone: str, table: str) -> pl.DataFrame:
    """A stored table read straight from its Parquet files, independently of DuckDB."""
    root = Warehouse.at(config.warehouse.path).root / zone / table
    return pl.read_parquet(sorted(root.glob("**/data.parquet")), hive_partitioning=False)


def mart(config: Config, table: str) -> pl.DataFrame:
    return stored(config, MARTS, table)


# --- who is the viewer -------------------------------------------------------------------------------
ROLES_YAML = """
clusters: [{name: c, source: {kind: parquet, path: /x}}]
tenants: [{name: serving, namespaces: [inference]}, {name: research, namespaces: [research]}]
dashboard:
  roles:
    - {role: finance, emails: ["*@finance.example.com"]}
    - {role: tenant, tenant: serving, groups: [team-serving], emails: [alice@example.com]}
    - {role: ops, groups: [platform-ops, team-serving]}
"""


def test_identity_maps_to_the_first_matching_role() -> None:
    config = parse_config(ROLES_YAML)
    assert viewer_for_identity(config, "Bob@Finance.Example.com", []) == Viewer(
        "finance", None, "bob@finance.example.com"
    )
    # team-serving is in two rules: the first in file order wins.
    assert viewer_for_identity(config, "carol@example.com", ["team-serving", "platform-ops"]).role == "tenant"
    assert viewer_for_identity(config, "alice@example.com", None).tenant == "serving"
    assert viewer_for_identity(config, "dave@example.com", "platform-ops").role == "ops"  # one string claim
    assert viewer_for_identity(config, "eve@example.com", ["finance"]) is None  # no rule: sees nothing
    assert viewer_for_identity(config, None, []) is None


@pytest.mark.parametrize(
    ("role", "message"),
    [
        ("{role: tenant, groups: [g]}", "needs `tenant:`"),
        ("{role: ops, tenant: serving, groups: [g]}", "sees every tenant"),
        ("{role: finance}", "at least one of"),
        ("{role: tenant, tenant: nobody, groups: [g]}", "no tenant of that name"),
        ("{role: admin, groups: [g]}", "finance"),
    ],
)
def test_bad_role_mappings_are_config_errors(role: str, message: str) -> None:
    text = ROLES_YAML.split("dashboard:")[0] + f"dashboard:\n  roles:\n    - {role}\n"
    with pytest.raises(ConfigError, match=message):
        parse_config(text)


def test_local_mode_viewer_from_the_environment_setting() -> None:
    config = parse_config(ROLES_YAML)
    assert local_viewer(config, "") == Viewer("finance", None, "local mode")
    assert local_viewer(config, "ops").role == "ops"
    assert local_viewer(config, "tenant:serving") == Viewer("tenant", "serving", "local mode")
    with pytest.raises(ViewerError, match="no tenant 'nobody'") as refused:
        local_viewer(config, "tenant:nobody")
    assert not any(t.name in str(refused.value) for t in config.tenants)  # shown on the page: names none
    with pytest.raises(ViewerError, match="use finance, ops or tenant"):
        local_viewer(config, "admin")


# --- figures equal the marts -------------------------------------------------------------------------
def _invoice_csv_amounts(config: Config) -> dict[str, Decimal]:
    """Per tenant, the amounts of the month's all-tenants invoice CSV as exported."""
    path = Warehouse.at(config.warehouse.path).root / "exports" / "2026-11" / "invoice_lines_2026-11_all.csv"
    totals: dict[str, Decimal] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            totals[row["tenant"]] = totals.get(row["tenant"], Decimal(0)) + Decimal(row["amount"])
    return totals


def test_tenant_charges_are_what_the_invoices_say(views: Views, config: Config) -> None:
    """One amount per tenant everywhere: the Charges view, the CLI summary and the invoice CSV agree to the
    cent for every tenant and bucket, and equal the lines rounded by hand."""
    expected = invoiced_by_hand(mart(config, "tenant_daily_cost"), config.minor_unit)
    assert _invoice_csv_amounts(config) == expected
    got = views.tenant_charges(Viewer("finance"), Filters(NOVEMBER))
    assert dict(zip(got["tenant"], got["amount"], strict=True)) == expected
    assert got["tenant"].to_list()[-2:] == [UNALLOCATED, IDLE]  # the buckets last
    summary = pool_summary(Warehouse.at(config.warehouse.path), DAYS[0], DAYS[-1], config.minor_unit)
    assert {c.tenant: c.amount for c in summary.charges} == expected
    history = views.monthly_charges(Viewer("finance"), Filters(NOVEMBER))
    assert dict(zip(history["tenant"], history["amount"], strict=True)) == expected
    # R13 after rounding: the page total is within half a cent per line of the pool cost
    pool = mart(config, "pool_daily_cost")["pool_cost"].sum()
    lines = (
        mart(config, "tenant_daily_cost").select("tenant", "charge_type", "gpu_model", "mig_profile").unique()
    )
    assert abs(sum(got["amount"].to_list(), Decimal(0)) - pool) <= Decimal("0.005") * lines.height


def test_tenant_viewer_sees_its_own_figures_only(views: Views, config: Config) -> None:
    daily = mart(config, "tenant_daily_cost").filter(pl.col("tenant") == "serving")
    got = views.tenant_charges(Viewer("tenant", "serving"), Filters(NOVEMBER))
    assert got["tenant"].to_list() == ["serving"]
    assert got["amount"][0] == invoiced_by_hand(daily, config.minor_unit)["serving"]
    assert got["gpu_hours"][0] == pytest.approx(float(daily["gpu_seconds"].sum()) / 3600)


def test_filters_narrow_by_model_and_the_period_is_half_open(views: Views, config: Config) -> None:
    daily = mart(config, "tenant_daily_cost").filter(pl.col("gpu_model") == "H200-141GB")
    got = views.tenant_charges(Viewer("finance"), Filters(NOVEMBER, gpu_models=("H200-141GB",)))
    assert sum(got["amount"].to_list(), Decimal(0)) == sum(
        invoiced_by_hand(daily, config.minor_unit).values(), Decimal(0)
    )
    assert views.tenant_charges(Viewer("finance"), Filters(Period(2026, 10))).is_empty()  # R2
    assert views.tenant_charges(Viewer("finance"), Filters(Period(2026, 12))).is_empty()


def test_stranded_capacity_and_data_quality_equal_the_marts(views: Views, config: Config) -> None:
    stranded = mart(config, "stranded_capacity")
    got = views.stranded_capacity(Viewer("ops"), Filters(NOVEMBER))
    assert got["gpu_hours"].sum() == pytest.approx(float(stranded["gpu_seconds"].sum()) / 3600)
    quality = mart(config, "data_quality")
    dq = views.data_quality(Viewer("ops"), Filters(NOVEMBER))
    assert dq["observed_gpu_hours"].sum() == pytest.approx(quality["observed_gpu_seconds"].sum() / 3600)
    assert dq["expected_gpu_hours"].sum() == pytest.approx(quality["expected_gpu_seconds"].sum() / 3600)
    reported = [c for c in quality.columns if "quarantin" in c.lower() or c.startswith("repeated_scrape")]
    assert "repeated_scrape_gpu_seconds" in reported
    assert [c for c in dq.columns if c in reported] == reported  # whatever exists, by name
    for column in reported:
        if quality[column].dtype.is_numeric():
            assert float(dq[column].sum()) == pytest.approx(float(quality[column].sum())), column


def test_a_stored_unallocated_category_reads_as_free(config: Config, tmp_path: Path) -> None:
    """R11's `free` was named `unallocated` before: a day stored then (or a frozen closed month) still says so,
    and every reader shows it as free, one figure with the days stored since."""
    copy = tmp_path / "warehouse"
    shutil.copytree(Warehouse.at(config.warehouse.path).root, copy)
    old_day = sorted((copy / MARTS / "stranded_capacity").glob("cluster=*/day=2026-11-01/data.parquet"))
    assert old_day
    for path in old_day:  # day 1 as an older gpumeter stored it; day 2 as it is stored now
        rows = pq.read_table(path)
        renamed = [("unallocated" if c == "free" else c) for c in rows.column("category").to_pylist()]
        assert "unallocated" in renamed
        pq.write_table(
            rows.set_column(rows.schema.get_field_index("category"), "category", pa.array(renamed)), path
        )
    stored_free = float(
        mart(config, "stranded_capacity").filter(pl.col("category") == "free")["gpu_seconds"].sum()
    )

    got = Views(Warehouse.at(copy), config).stranded_capacity(Viewer("ops"), Filters(NOVEMBER))
    assert "unallocated" not in got["category"].to_list()
    assert got.filter(pl.col("category") == "free")["gpu_hours"].sum() == pytest.approx(stored_free / 3600)
    summary = pool_summary(Warehouse.at(copy), DAYS[0], DAYS[-1], config.minor_unit)
    assert "unallocated" not in summary.capacity_hours
    assert summary.capacity_hours["free"] == pytest.approx(stored_free / 3600)


def test_the_mig_layout_over_several_days_is_slices_of_seven(views: Views, config: Config) -> None:
    """Over the two metered days every MIG GPU's average slices (busy, held idle, free, unpartitioned) add up to
    its 7 compute slices, and each instance's average is its slice-seconds over the GPU's observed seconds
    of both days, read from the mart's files."""
    layout = views.mig_layout(Viewer("ops"), Filters(NOVEMBER))
    assert not layout.is_empty()
    slices = ["busy_slices", "held_idle_slices", "free_slices", "unpartitioned_slices"]
    per_gpu = layout.group_by("uuid").agg(pl.sum_horizontal(slices).sum().alias("slices"))
    assert per_gpu["slices"].to_list() == pytest.approx([7.0] * per_gpu.height)
    usage = mart(config, "mig_slice_usage")
    assert usage["day"].n_unique() == len(DAYS)
    row = layout.filter(pl.col("mig_profile") != "unpartitioned").row(0, named=True)
    gpu = usage.filter(pl.col("uuid") == row["uuid"])
    observed = gpu.unique(["day", "layout"])["observed_seconds"].sum()
    busy = gpu.filter(pl.col("gpu_i_id") == row["gpu_i_id"])["busy_slice_seconds"].cast(pl.Float64).sum()
    assert row["busy_slices"] == pytest.approx(busy / observed)


def test_heatmap_hour_equals_the_samples(views: Views, config: Config) -> None:
    """One GPU-hour recomputed from the stored per-sample categories: held share and busy share."""
    heat = views.gpu_hourly_heatmap(Viewer("ops"), Filters(NOVEMBER))
    root = Warehouse.at(config.warehouse.path).root / "intermediate" / "int_device_categories"
    samples = pl.read_parquet(sorted(root.glob("**/data.parquet")), hive_partitioning=False)
    cell = heat.sort(["uuid", "hour"]).row(40, named=True)
    start_ms = int(cell["hour"].replace(tzinfo=UTC).timestamp() * 1000)  # a naive UTC hour
    hour = samples.filter(
        (pl.col("uuid") == cell["uuid"])
        & (pl.col("ts_ms") >= start_ms)
        & (pl.col("ts_ms") < start_ms + 3_600_000)
    )
    observed = hour["ts_ms"].n_unique() * config.scrape_interval_seconds
    held = float(hour.filter(pl.col("is_held"))["gpu_seconds"].sum() or 0)
    busy = float((hour["gpu_seconds"].cast(pl.Float64) * hour["busy"].fill_null(0)).sum())
    assert cell["allocated"] == pytest.approx(held / observed)
    assert cell["busy"] == pytest.approx(busy / observed)


def _gpu_hours(config: Config) -> pl.DataFrame:
    """Per GPU and UTC hour from the stored per-sample categories: held, busy and observed GPU-seconds."""
    root = Warehouse.at(config.warehouse.path).root / "intermediate" / "int_device_categories"
    samples = pl.read_parquet(sorted(root.glob("**/data.parquet")), hive_partitioning=False)
    return (
        samples.with_columns(
            pl.from_epoch(pl.col("ts_ms"), time_unit="ms").dt.truncate("1h").alias("hour"),
            pl.col("gpu_seconds").cast(pl.Float64),
        )
        .group_by("cluster", "node", "uuid", "hour")
        .agg(
            pl.col("gpu_model").first(),
            pl.col("gpu_seconds").filter(pl.col("is_held")).sum().alias("held"),
            (pl.col("gpu_seconds") * pl.col("busy").fill_null(0)).sum().alias("busy"),
            (pl.col("ts_ms").n_unique() * config.scrape_interval_seconds).alias("observed"),
        )
    )


@pytest.mark.parametrize(("by", "columns"), [("node", ["cluster", "node"]), ("gpu_model", ["gpu_model"])])
def test_grouped_heatmap_is_the_groups_seconds_over_their_observed_seconds(
    views: Views, config: Config, by: str, columns: list[str]
) -> None:
    """A group's cell is its GPUs' held (busy) GPU-seconds over their observed ones in the hour, recomputed
    from the stored samples; the GPUs of a cell are those observed in it."""
    expected = (
        _gpu_hours(config)
        .group_by(*columns, "hour")
        .agg(
            pl.len().alias("gpus"),
            (pl.col("held").sum() / pl.col("observed").sum()).alias("allocated"),
            (pl.col("busy").sum() / pl.col("observed").sum()).alias("busy"),
        )
        .sort(*columns, "hour")
    )
    got = views.grouped_hourly_heatmap(Viewer("ops"), Filters(NOVEMBER), by)
    assert got.height == expected.height > 0
    assert got.select(*columns, "gpus").rows() == expected.select(*columns, "gpus").rows()
    assert got["allocated"].to_list() == pytest.approx(expected["allocated"].to_list())
    assert got["busy"].to_list() == pytest.approx(expected["busy"].to_list())


def test_heatmap_size_choices_and_the_drill_down_to_one_node(views: Views, config: Config) -> None:
    ops, november = Viewer("ops"), Filters(NOVEMBER)
    hours = _gpu_hours(config)
    assert views.heatmap_gpus(ops, november) == hours.select("cluster", "uuid").n_unique()
    assert views.heatmap_groupings(ops) == ["node", "gpu_model", "cluster"]  # the demo stores no node pool
    nodes = views.heatmap_nodes(ops, november)
    assert nodes == sorted(hours.select("cluster", "node").unique().rows())
    every = views.gpu_hourly_heatmap(ops, november)
    for node in nodes[:2]:
        mine = views.gpu_hourly_heatmap(ops, november, node)
        assert set(mine["node"]) == {node[1]}
        assert mine.equals(every.filter((pl.col("cluster") == node[0]) & (pl.col("node") == node[1])))
    # A GPU model filter narrows the count like every other view.
    h100 = views.heatmap_gpus(ops, Filters(NOVEMBER, gpu_models=("H100-80GB",)))
    assert h100 == hours.filter(pl.col("gpu_model") == "H100-80GB").select("cluster", "uuid").n_unique()
    with pytest.raises(ValueError, match="unknown heatmap grouping"):
        views.grouped_hourly_heatmap(ops, november, "uuid; drop table x")


def test_invoice_lines_are_the_stored_lines_in_scope(views: Views, config: Config) -> None:
    root = Warehouse.at(config.warehouse.path).root / MARTS / "invoice_lines"
    stored = pl.read_parquet(root / "period=2026-11" / "data.parquet")
    every = views.invoice_lines(Viewer("finance"), Filters(NOVEMBER))
    assert every.num_rows == stored.height
    mine = views.invoice_lines(Viewer("tenant", "research"), Filters(NOVEMBER))
    assert set(mine.column("tenant").to_pylist()) == {"research"}
    assert mine.num_rows == stored.filter(pl.col("tenant") == "research").height


# --- authorization at the data layer -----------------------------------------------------------------
TENANT_VIEWS = ("tenant_charges", "daily_charges", "monthly_charges", "usage_by_model", "idle_holders",
                "whole_gpu_holders")  # fmt: skip
POOL_VIEWS = ("gpu_hourly_heatmap", "stranded_capacity", "mig_layout", "data_quality", "coverage_gaps",
              "unmapped_namespaces", "heatmap_gpus", "heatmap_nodes")  # fmt: skip
filter_values = st.lists(st.sampled_from([*TENANTS, *CRAFTED]) | st.text(max_size=12), max_size=3)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tenant=st.sampled_from(TENANTS),
    tenants=filter_values,
    clusters=st.lists(st.sampled_from(["demo", *CRAFTED]), max_size=2),
    models=st.lists(st.sampled_from(["H100-80GB", "A100-80GB", *CRAFTED]), max_size=2),
)
def test_a_tenant_viewer_never_reaches_another_tenants_rows(
    views: Views, config: Config, tenant: str, tenants: list[str], clusters: list[str], models: list[str]
) -> None:
    viewer = Viewer("tenant", tenant)
    filters = Filters(NOVEMBER, tuple(clusters), tuple(tenants), tuple(models))
    others = [t for t in [*TENANTS, IDLE, UNALLOCATED] if t != tenant]
    for name in TENANT_VIEWS:
        frame = getattr(views, name)(viewer, filters)
        if not frame.is_empty():
            assert set(frame["tenant"].to_list()) == {tenant}, name
        csv_text = frame_csv(frame)
        assert not any(f",{other}," in csv_text for other in others), name
    lines = views.invoice_lines(viewer, filters)
    assert set(lines.column("tenant").to_pylist()) <= {tenant}
    for export in (invoice_csv(lines, config.minor_unit), focus_csv(lines, config, NOVEMBER)):
        assert not any(other in export for other in (IDLE, UNALLOCATED)), export[:200]
        assert not any(f",{other}," in export for other in others)
    budget_rows = views.tenant_daily_cost(viewer, filters)
    assert set(budget_rows.column("tenant").to_pylist()) <= {tenant}
    assert {s.tenant for s in views.budgets(viewer, filters)} <= {tenant}  # config-derived rows too
    assert views.options(viewer).tenants == [tenant]
    for name in POOL_VIEWS:
        with pytest.raises(AccessDenied):
            getattr(views, name)(viewer, filters)
    with pytest.raises(AccessDenied):
        views.grouped_hourly_heatmap(viewer, filters, "node")
    with pytest.raises(AccessDenied):
        views.heatmap_groupings(viewer)


@pytest.mark.parametrize("crafted", CRAFTED)
def test_crafted_filter_values_match_nothing_rather_than_everything(views: Views, crafted: str) -> None:
    assert (
        views.tenant_charges(Viewer("finance"), Filters(NOVEMBER, tenants=(crafted,)))
        .filter(~pl.col("tenant").is_in([IDLE, UNALLOCATED]))
        .is_empty()
    )
    assert views.stranded_capacity(Viewer("ops"), Filters(NOVEMBER, clusters=(crafted,))).is_empty()


def test_csv_cells_are_neutralized_against_formula_injection() -> None:
    frame = pl.DataFrame(
        {"pod": ['=HYPERLINK("x")', "+1", "-2", "@cmd", "plain"], "amount": [Decimal("1.5")] * 5}
    )
    rows = list(csv.reader(io.StringIO(frame_csv(frame))))
    assert [row[0] for row in rows] == ["pod", '\'=HYPERLINK("x")', "'+1", "'-2", "'@cmd", "plain"]
    assert rows[-1][1] == "1.5"  # numbers are not text: left as they are


def test_csv_cells_carry_money_as_decimals_and_hours_without_binary_residue() -> None:
    frame = pl.DataFrame(
        {
            "amount": [Decimal("3397.47"), Decimal("0.10")],
            "gpu_hours": [0.1 + 0.2, -1e-13],  # 0.30000000000000004 and a residue below a nanohour
        },
        schema={"amount": pl.Decimal(38, 2), "gpu_hours": pl.Float64},
    )
    rows = list(csv.reader(io.StringIO(frame_csv(frame))))
    assert rows[1:] == [["3397.47", "0.3"], ["0.10", "0.0"]]


def test_an_empty_warehouse_reads_as_no_rows(tmp_path: Path) -> None:
    config = parse_config(ROLES_YAML)
    views = Views(Warehouse.at(tmp_path), config)
    assert views.options(Viewer("finance")).periods == []
    assert views.tenant_charges(Viewer("finance"), Filters(NOVEMBER)).is_empty()
    assert views.invoice_lines(Viewer("finance"), Filters(NOVEMBER)).num_rows == 0


# --- what comes from the config is scoped like what comes from the marts ---------------------------------
def test_a_tenant_viewers_budgets_hold_its_own_tenant_only(views: Views, config: Config) -> None:
    every = {s.tenant: s for s in views.budgets(Viewer("finance"), Filters(NOVEMBER))}
    assert list(every) == [t.name for t in config.tenants]  # finance: every configured tenant, file order
    for tenant in config.tenants:
        mine = views.budgets(Viewer("tenant", tenant.name), Filters(NOVEMBER))
        assert [s.tenant for s in mine] == [tenant.name]
        # The same position whoever reads it: spend, budget, cost center, and the forecast over the same days.
        assert mine[0] == every[tenant.name]
        assert mine[0].budget == Decimal(str(tenant.monthly_budget))
        assert mine[0].cost_center == tenant.cost_center
    daily = mart(config, "tenant_daily_cost").filter(pl.col("tenant") == "serving")
    assert every["serving"].spent == invoiced_by_hand(daily, config.minor_unit)["serving"]  # as invoiced
    # Under any GPU model filter too, where a tenant may have spent nothing on a day the pool was metered.
    for model in [m.model for m in config.rate_card.models]:
        narrowed = Filters(NOVEMBER, gpu_models=(model,))
        finance = {s.tenant: s for s in views.budgets(Viewer("finance"), narrowed)}
        for tenant in config.tenants:
            assert views.budgets(Viewer("tenant", tenant.name), narrowed) == [finance[tenant.name]], model


def test_finance_budgets_follow_the_tenant_filter(views: Views) -> None:
    picked = views.budgets(Viewer("finance"), Filters(NOVEMBER, tenants=("serving", "research")))
    assert [s.tenant for s in picked] == ["research", "serving"]  # config order, only those picked
    alone = views.budgets(Viewer("finance"), Filters(NOVEMBER, tenants=("serving",)))
    assert alone == [s for s in picked if s.tenant == "serving"]  # picking others changes no figure
    assert views.budgets(Viewer("tenant", "research"), Filters(NOVEMBER, tenants=("serving",))) == []
    assert views.budgets(Viewer("finance"), Filters(Period(2026, 12))) == []  # nothing metered


def test_a_tenant_viewers_config_holds_its_own_tenant_only(config: Config) -> None:
    roles = parse_config(
        ROLES_YAML.replace("namespaces: [inference]}", "namespaces: [inference], cost_center: CC-9}")
    )
    finance = config_for(roles, Viewer("finance"))
    assert finance is roles
    scoped = config_for(roles, Viewer("tenant", "research"))
    assert [t.name for t in scoped.tenants] == ["research"]
    assert scoped.dashboard.roles == [] and scoped.dashboard.email_claim == roles.dashboard.email_claim
    text = scoped.model_dump_json()
    for leaked in ("serving", "inference", "CC-9", "finance.example.com", "alice@", "team-serving"):
        assert leaked not in text, leaked
    demo = config_for(config, Viewer("tenant", "serving"))
    assert [(t.name, t.cost_center, t.monthly_budget, t.kueue_cluster_queues) for t in demo.tenants] == [
        ("serving", "CC-2100", 15000, ["serving"])
    ]
    assert (demo.rate_card, demo.currency, demo.pool) == (config.rate_card, config.currency, config.pool)


def test_a_closed_period_shows_its_lines_of_record_r16(views: Views, config: Config) -> None:
    """Last in this module: it closes November. The draft roll-up may change afterwards; the page shows the
    closed copy, and says it is closed."""
    warehouse = Warehouse.at(config.warehouse.path)
    before = views.invoice_lines(Viewer("finance"), Filters(NOVEMBER))
    assert views.invoice_status(Filters(NOVEMBER)).closed is False
    close_period(config, warehouse, NOVEMBER, by="test")
    draft = invoice_lines_path(warehouse, str(NOVEMBER))
    pq.write_table(pq.read_table(draft).slice(0, 1), draft)  # a later draft roll-up, changed
    after = views.invoice_lines(Viewer("finance"), Filters(NOVEMBER))
    assert after.equals(before)
    status = views.invoice_status(Filters(NOVEMBER))
    assert status.closed and len(status.content_hash) == 64


def test_how_far_the_figures_go_is_said_on_the_page_and_the_draft_invoice(
    views: Views, config: Config
) -> None:
    """Two of November's 30 days are metered: the Charges page and the draft invoice say so, in words."""
    assert views.data_through(Filters(NOVEMBER)) == "through 2 Nov 2026, 2 of 30 days metered"
    warehouse = Warehouse.at(config.warehouse.path)
    lines = invoice_lines_path(warehouse, "2026-11")  # the draft roll-up (another test may close the month)
    draft = Status("2026-11", False, "ab" * 32, metered_days=metered_days(warehouse, "2026-11"))
    html = render_invoice(pq.read_table(lines), config, NOVEMBER, "serving", draft)
    assert "figures through 2 Nov 2026, 2 of 30 days metered" in html
    assert "1 Nov 2026 to 30 Nov 2026 (UTC)" in html and "end exclusive" not in html


@pytest.mark.parametrize(
    ("metered", "said"),
    [
        ([], "no day metered yet"),
        (range(1, 8), "through 7 Nov 2026, 7 of 30 days metered"),
        ([1, 2, 5], "through 5 Nov 2026, 3 of 30 days metered, 2 days before it not metered"),
        ([1, 3], "through 3 Nov 2026, 2 of 30 days metered, 1 day before it not metered"),
        (range(1, 31), "all 30 days metered"),
    ],
)
def test_data_through_in_words(metered: list[int], said: str) -> None:
    assert data_through(NOVEMBER, [date(2026, 11, d) for d in metered]) == said


def test_days_not_yet_metered_are_gaps(views: Views, config: Config) -> None:
    """November has ended and 2 of its days are metered: the other 28 are gaps on every cluster."""
    gaps = views.coverage_gaps(Viewer("ops"), Filters(NOVEMBER))
    clusters = [c.name for c in config.clusters]
    want = {(c, date(2026, 11, d)) for c in clusters for d in range(3, 31)}
    assert set(zip(gaps["cluster"], gaps["missing_day"], strict=True)) == want
    assert gaps.height == 28 * len(clusters)


def test_the_glossary_page_is_made_from_the_glossary_and_names_every_bucket() -> None:
    """docs/glossary.md is the glossary the dashboard shows (`python -m gpumeter.views.words > docs/glossary.md`),
    and it tells the two buckets and the free-GPU category apart in words."""
    doc = Path(__file__).resolve().parents[1] / "docs" / "glossary.md"
    assert doc.read_text(encoding="utf-8") == words.glossary_markdown()
    said = {t.shown_as: t.words for t in words.GLOSSARY}
    assert said[IDLE] == "Idle capacity (not billed to a tenant)"
    assert said[UNALLOCATED] == "Unmapped workloads"
    assert len(set(said.values())) == len(said)  # no two terms share words
