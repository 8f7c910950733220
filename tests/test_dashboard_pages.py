"""Every dashboard page through Streamlit's AppTest on a warehouse metered by the real Dagster jobs: it renders
without exception, and the figures it shows equal the marts, recomputed here from the Parquet files."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from streamlit.testing.v1 import AppTest

from gpumeter.billing.invoices import Period
from gpumeter.config import IDLE, UNALLOCATED, Config, load_config
from gpumeter.dashboard import APP as DASHBOARD_APP
from gpumeter.dashboard import navigation
from gpumeter.storage.paths import MARTS
from gpumeter.storage.warehouse import Warehouse
from gpumeter.views import capacity as capacity_reads
from gpumeter.views.rightsizing import HolderPeak, advise
from tests.builders import invoiced_by_hand
from tests.test_dashboard_scoping import RECORDER, Download, RecordingMediaFileManager
from tests.test_views import build_metered
from tests.test_views import stored as read

pytestmark = pytest.mark.slow

APP = DASHBOARD_APP
# The screen files of a navigation (gpumeter/dashboard/navigation.py): a page added to the app is a page tested here.
FINANCE_PAGES = [page.name for page in navigation.pages("finance")]
TENANT_PAGES = [page.name for page in navigation.pages("tenant")]


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_metered(tmp_path_factory.mktemp("dashboard"))


@pytest.fixture(scope="module")
def config(config_path: Path) -> Config:
    return load_config(config_path)


def usd(amount: Decimal | float) -> str:
    return f"{Decimal(str(amount)):,.2f} USD"


@pytest.fixture
def app(config_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., AppTest]:
    def start(viewer: str = "finance", page: str | None = None) -> AppTest:
        monkeypatch.setenv("GPUMETER_CONFIG", str(config_path))
        monkeypatch.setenv("GPUMETER_DASHBOARD_VIEWER", viewer)
        at = AppTest.from_file(str(APP), default_timeout=120).run()
        if page is not None:
            at.switch_page(f"screens/{page}.py").run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    return start


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


@pytest.mark.parametrize("page", FINANCE_PAGES)
def test_every_page_renders_for_finance(app: Callable[..., AppTest], page: str) -> None:
    at = app("finance", page)
    assert not at.error, [e.value for e in at.error]
    assert at.title and at.title[0].value
    assert any("Local mode" in w.value for w in at.warning)  # labelled: no login configured


@pytest.mark.parametrize("page", TENANT_PAGES)
def test_every_page_renders_for_a_tenant(app: Callable[..., AppTest], page: str) -> None:
    at = app("tenant:serving", page)
    assert not at.error, [e.value for e in at.error]
    assert not [m for m in at.sidebar.multiselect if m.label == "Tenant"]  # no tenant filter to widen


def test_a_tenant_has_no_pool_pages(app: Callable[..., AppTest]) -> None:
    at = app("tenant:serving")
    for page in ("capacity", "mig", "data_quality"):
        with pytest.raises(ValueError, match="Could not find a navigation page"):
            at.switch_page(f"screens/{page}.py")


def test_charges_equal_the_mart(app: Callable[..., AppTest], config: Config) -> None:
    """The page's figures are the invoice's: each tenant's lines rounded once (by hand from the mart)."""
    at = app("finance", "charges")
    daily = read(config, MARTS, "tenant_daily_cost")
    assert daily["amount"].sum() == read(config, MARTS, "pool_daily_cost")["pool_cost"].sum()  # R13
    invoiced = invoiced_by_hand(daily, config.minor_unit)
    assert metric(at, "Total in scope") == usd(sum(invoiced.values(), Decimal(0)))
    billed = sum((v for t, v in invoiced.items() if t not in (IDLE, UNALLOCATED)), Decimal(0))
    assert metric(at, "Billed to tenants") == usd(billed)
    shown = at.dataframe[0].value
    words = {IDLE: "Idle capacity (not billed to a tenant)", UNALLOCATED: "Unmapped workloads"}
    assert dict(zip(shown["tenant"], shown["amount"], strict=True)) == {
        words.get(t, t): usd(v) for t, v in invoiced.items()
    }
    assert list(shown.columns[:3]) == ["tenant", "cost_center", "amount"]  # visible without scrolling
    assert any("Figures through" in c.value for c in at.caption)
    unmapped, idle = usd(invoiced[UNALLOCATED]), usd(invoiced[IDLE])
    assert any(
        f"billed to tenants {usd(billed)} + Unmapped workloads {unmapped} + Idle capacity (not billed to a "
        f"tenant) {idle}" in c.value
        for c in at.caption
    ), [c.value for c in at.caption]
    assert [e.label for e in at.expander] == ["What these words mean"]  # the glossary, in place
    total = usd(sum(invoiced.values(), Decimal(0)))
    # the table's total, under it
    assert any(c.value == f"**Total** of the rows above: Amount {total}" for c in at.caption)


def test_a_tenant_sees_its_own_charges(app: Callable[..., AppTest], config: Config) -> None:
    at = app("tenant:serving", "charges")
    daily = read(config, MARTS, "tenant_daily_cost").filter(pl.col("tenant") == "serving")
    assert metric(at, "Your charges") == usd(invoiced_by_hand(daily, config.minor_unit)["serving"])
    assert list(at.dataframe[0].value["tenant"]) == ["serving"]


def test_usage_equals_the_mart(app: Callable[..., AppTest], config: Config) -> None:
    at = app("tenant:research", "usage")
    daily = read(config, MARTS, "tenant_daily_cost").filter(pl.col("tenant") == "research")
    held = float(daily["gpu_seconds"].sum()) / 3600
    used = float(daily["busy_gpu_seconds"].sum()) / 3600
    assert metric(at, "GPU-hours held") == f"{held:,.1f}"
    assert metric(at, "GPU-hours used") == f"{used:,.1f}"
    assert metric(at, "Efficiency (used ÷ held)") == f"{used / held:.0%}"  # R10


def test_budgets_equal_the_mart(app: Callable[..., AppTest], config: Config) -> None:
    at = app("finance", "budgets")
    daily = read(config, MARTS, "tenant_daily_cost")
    shown = at.dataframe[0].value
    assert list(shown["tenant"]) == [t.name for t in config.tenants]
    invoiced = invoiced_by_hand(daily, config.minor_unit)  # spent is what the invoice says so far
    for tenant, spent in zip(shown["tenant"], shown["spent"], strict=True):
        assert spent == usd(invoiced.get(tenant, Decimal(0)))


def test_invoices_are_the_stored_lines_in_scope(app: Callable[..., AppTest], config: Config) -> None:
    stored = pl.read_parquet(
        Warehouse.at(config.warehouse.path).root / MARTS / "invoice_lines" / "period=2026-11" / "data.parquet"
    )
    assert len(app("finance", "invoices").dataframe[0].value) == stored.height
    at = app("tenant:evaluation", "invoices")
    mine = at.dataframe[0].value
    assert set(mine["tenant"]) == {"evaluation"}
    assert len(mine) == stored.filter(pl.col("tenant") == "evaluation").height
    labels = [button.proto.label for button in at.get("download_button")]
    assert labels == [
        "Invoice lines (CSV)",
        "FOCUS 1.2 (CSV)",
        "evaluation: lines (CSV)",
        "evaluation: invoice (HTML)",
        "evaluation: invoice (PDF)",
    ]


def test_capacity_stranded_share_equals_the_mart(app: Callable[..., AppTest], config: Config) -> None:
    at = app("ops", "capacity")
    stranded = read(config, MARTS, "stranded_capacity")
    share = float(stranded.filter(pl.col("is_stranded"))["gpu_seconds"].sum()) / float(
        stranded["gpu_seconds"].sum()
    )
    assert metric(at, "Stranded share") == f"{share:.1%}"  # R11
    assert len(at.get("plotly_chart")) == 3  # heatmap, by category, by node


def test_mig_layout_lists_every_instance_and_remainder(app: Callable[..., AppTest], config: Config) -> None:
    at = app("ops", "mig")
    usage = read(config, MARTS, "mig_slice_usage")
    instances = usage.select("uuid", pl.col("gpu_i_id").fill_null("-"), "mig_profile").unique()
    assert len(at.dataframe[0].value) == instances.height


def test_data_quality_coverage_equals_the_mart(app: Callable[..., AppTest], config: Config) -> None:
    at = app("ops", "data_quality")
    quality = read(config, MARTS, "data_quality")
    coverage = quality["observed_gpu_seconds"].sum() / quality["expected_gpu_seconds"].sum()
    assert metric(at, "Coverage (observed ÷ expected)") == f"{coverage:.1%}"  # R4
    unmapped = set(read(config, MARTS, "device_seconds").filter(pl.col("tenant") == UNALLOCATED)["namespace"])
    assert set(at.dataframe[-1].value["namespace"]) == unmapped  # R7


def test_idle_holders_rank_by_cost_as_the_samples_say(app: Callable[..., AppTest], config: Config) -> None:
    at = app("finance", "idle")
    categories = read(config, "intermediate", "int_device_categories").filter(
        pl.col("category") == "allocated_idle"
    )
    holders = read(config, "intermediate", "int_device_holders")
    samples = read(config, "intermediate", "int_device_samples").select(
        "device_id", "ts_ms", "device_price_per_hour"
    )
    idle = (
        categories.join(holders, on=["device_id", "ts_ms"])
        .join(samples, on=["device_id", "ts_ms"])
        .with_columns(
            (config.scrape_interval_seconds / 3600 * pl.col("device_price_per_hour") * pl.col("share")).alias(
                "cost"
            )
        )
        .group_by("namespace", "pod")
        .agg(pl.col("cost").sum())
        .sort("cost", descending=True)
    )
    top = idle.row(0, named=True)
    shown = at.dataframe[0].value
    assert (shown["namespace"][0], shown["pod"][0]) == (top["namespace"], top["pod"])
    assert shown["idle_cost"][0] == usd(round(top["cost"], 6))


def test_rightsizing_total_from_the_device_mart(app: Callable[..., AppTest], config: Config) -> None:
    at = app("ops", "rightsizing")
    whole = (
        read(config, MARTS, "device_seconds")
        .filter(pl.col("mig_profile").is_null())
        .group_by("cluster", "node", "uuid", "model_name", "gpu_model", "tenant", "namespace", "pod")
        .agg(
            (pl.col("gpu_seconds").sum() / 3600).alias("hours"),
            pl.col("peak_fb_used_mib").max(),
            pl.col("peak_busy").max(),
        )
    )
    holders = [
        HolderPeak(r["cluster"], r["node"], r["uuid"], r["model_name"], r["gpu_model"], r["tenant"],
                   r["namespace"], r["pod"], Decimal(str(r["hours"])), r["peak_fb_used_mib"], r["peak_busy"])
        for r in whole.to_dicts()
    ]  # fmt: skip
    days = read(config, MARTS, "tenant_daily_cost")["day"].n_unique()
    advice = advise(holders, config, days, len(Period(2026, 11).days()))
    assert advice, "the demo factory has whole GPUs held by near-idle notebooks"
    assert metric(at, "Monthly saving if all were right-sized") == usd(sum(a.monthly_saving for a in advice))
    assert len(at.dataframe[0].value) == len(advice)


def test_missing_config_says_to_run_make_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUMETER_CONFIG", str(tmp_path / "absent.yaml"))
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception
    assert "make demo" in at.error[0].value


def test_a_bad_local_viewer_is_one_message(
    app: Callable[..., AppTest], config_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMETER_CONFIG", str(config_path))
    monkeypatch.setenv("GPUMETER_DASHBOARD_VIEWER", "tenant:nobody")
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception
    assert "no tenant 'nobody'" in at.error[0].value
    assert not at.dataframe


def test_with_oidc_configured_nothing_shows_before_sign_in(
    config_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMETER_CONFIG", str(config_path))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.secrets["auth"] = {
        "redirect_uri": "http://127.0.0.1:8501/oauth2callback",
        "cookie_secret": "test-only-not-a-secret",
        "client_id": "gpumeter",
        "client_secret": "test-only-not-a-secret",
        "server_metadata_url": "http://127.0.0.1:1/realms/x/.well-known/openid-configuration",
    }
    at.run()
    assert not at.exception
    assert [b.label for b in at.button] == ["Sign in"]
    assert not at.dataframe and not at.metric and not at.warning  # no data, and not local mode


# --- the capacity heatmap at fleet size: grouped rows, a drill-down, the downloads of what is drawn ---------
def _heatmap_rows(at: AppTest, index: int) -> list[str]:
    """The row labels of the page's `index`-th chart (a heatmap), from its plotly spec."""
    spec = json.loads(at.get("plotly_chart")[index].proto.spec)
    return list(spec["data"][0]["y"])


def _csv(download: Download) -> pl.DataFrame:
    return pl.read_csv(io.BytesIO(download.data))


def test_capacity_draws_one_row_per_gpu_below_the_threshold(
    app: Callable[..., AppTest], config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("streamlit.testing.v1.app_test.MediaFileManager", RecordingMediaFileManager)
    RECORDER.downloads.clear()
    at = app("ops", "capacity")
    samples = read(config, "intermediate", "int_device_categories")
    gpus = samples.select("cluster", "uuid").n_unique()
    assert gpus <= capacity_reads.HEATMAP_GPU_ROWS
    assert len(_heatmap_rows(at, 0)) == gpus
    assert not [s for s in at.selectbox if s.label == "Node"]  # no drill-down: every GPU is a row
    (heat,) = [d for d in RECORDER.downloads if (d.file_name or "").startswith("gpu_hourly_heatmap_")]
    assert _csv(heat).select("uuid").n_unique() == gpus


def test_capacity_groups_rows_above_the_threshold_and_drills_down_to_a_node(
    app: Callable[..., AppTest], config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    samples = read(config, "intermediate", "int_device_categories")
    nodes = sorted(samples["node"].unique())
    monkeypatch.setattr(capacity_reads, "HEATMAP_GPU_ROWS", 10)  # the demo's GPUs count as a fleet
    monkeypatch.setattr("streamlit.testing.v1.app_test.MediaFileManager", RecordingMediaFileManager)
    RECORDER.downloads.clear()
    at = app("ops", "capacity")
    assert not at.error, [e.value for e in at.error]
    assert any("too many for one row each" in c.value for c in at.caption)
    assert _heatmap_rows(at, 0) == nodes  # one row per node (one cluster: named by the node alone)
    grouping = next(s for s in at.selectbox if s.label == "One row per")
    assert grouping.options == ["node", "GPU model", "cluster"]
    (grouped,) = [d for d in RECORDER.downloads if (d.file_name or "").startswith("hourly_heatmap_by_node_")]
    assert sorted(_csv(grouped)["node"].unique()) == nodes  # the download is the grouped data
    assert {"gpus", "allocated", "busy", "observed_gpu_hours"} <= set(_csv(grouped).columns)

    RECORDER.downloads.clear()
    node = nodes[1]
    at.selectbox(key="heat-node").select(node).run()
    assert not at.exception, [e.value for e in at.exception]
    node_gpus = samples.filter(pl.col("node") == node)["uuid"].n_unique()
    assert len(_heatmap_rows(at, 1)) == node_gpus  # the drill-down: that node's GPUs, one row each
    (drill,) = [
        d for d in RECORDER.downloads if (d.file_name or "").startswith("gpu_hourly_heatmap_of_node_")
    ]
    assert set(_csv(drill)["node"]) == {node}
    assert _csv(drill)["uuid"].n_unique() == node_gpus

    RECORDER.downloads.clear()
    at.selectbox(key="heat-group").select("gpu_model").run()
    models = sorted(samples["gpu_model"].unique())
    assert _heatmap_rows(at, 0) == models
    (by_model,) = [
        d for d in RECORDER.downloads if (d.file_name or "").startswith("hourly_heatmap_by_gpu_model_")
    ]
    assert sorted(_csv(by_model)["gpu_model"].unique()) == models


def test_tables_show_headers_in_words_and_numbers_for_their_unit() -> None:
    """Column headers in words, ratios as percentages, amounts of time with thousands separators, days as dates."""
    from gpumeter.dashboard.common import column_config

    def shown(name: str, dtype: pl.DataType, money: bool = False) -> tuple[str, str | None]:
        config = column_config(name, dtype, money)
        return config["label"], (config.get("type_config") or {}).get("format")

    assert shown("used_gpu_hours", pl.Float64) == ("GPU-hours used", "accounting")
    assert shown("efficiency", pl.Float64) == ("Efficiency (used ÷ held)", "percent")
    assert shown("coverage", pl.Float64) == ("Coverage", "percent")
    assert shown("amount", pl.Utf8, money=True) == ("Amount", None)
    assert shown("missing_day", pl.Date) == ("Day not metered", "D MMM YYYY")
    assert shown("held_slice_hours", pl.Float64) == ("Held slice hours", "accounting")
    assert shown("gpu_model", pl.Utf8) == ("GPU model", None)
    assert shown("observed_gpus", pl.Int64) == ("Observed GPUs", "localized")


def test_a_table_gives_streamlit_its_words_and_blank_cost_centers(app: Callable[..., AppTest]) -> None:
    at = app("finance", "charges")
    table = at.dataframe[0]
    assert "None" not in [str(v) for v in table.value["cost_center"]]  # a missing cost center is blank
    columns = json.loads(table.proto.columns)  # what the browser's grid is told
    assert columns["used_gpu_hours"]["label"] == "GPU-hours used"
    assert columns["efficiency"]["type_config"]["format"] == "percent"


def _trace_colors(at: AppTest) -> dict[str, str]:
    """Each chart trace's name and colour, over every chart of the page."""
    found: dict[str, str] = {}
    for chart in at.get("plotly_chart"):
        for trace in json.loads(chart.proto.spec).get("data", []):
            color = (trace.get("marker") or {}).get("color") or (trace.get("line") or {}).get("color")
            if trace.get("name") and isinstance(color, str):
                found.setdefault(trace["name"], color)
    return found


def test_a_tenant_has_one_colour_on_every_page(app: Callable[..., AppTest], config: Config) -> None:
    charges = _trace_colors(app("finance", "charges"))
    usage = _trace_colors(app("finance", "usage"))
    shared = [t.name for t in config.tenants if t.name in charges and t.name in usage]
    assert shared  # the demo's tenants are drawn on both pages
    assert {t: charges[t] for t in shared} == {t: usage[t] for t in shared}
    assert len({charges[t] for t in shared}) == len(shared)  # one colour each
