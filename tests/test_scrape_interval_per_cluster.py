"""Δ per cluster (R1): a pool whose clusters are scraped at different intervals. Each sample stands for its own
cluster's Δ: a cluster's `scrape_interval_seconds` where the config gives one, else the pool's.

Two clusters of one pool, metered by the real Dagster job from Parquet sources: `c30` is scraped every 30 s
(the pool's Δ), `c60` every 60 s (its own). Each holds one H100 at 3.60 per GPU-hour (0.001 per second) for
one hour. Truth by hand: 120 × 30 s and 60 × 60 s are both 3,600 GPU-seconds, 3.60 each; read with the
pool's 30 s, `c60` would have been half of that.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from gpumeter.billing.invoices import Period, build_invoice_lines
from gpumeter.config import IDLE, ConfigError, load_config, parse_config
from gpumeter.ingest.contract import lookback_ms
from gpumeter.pipelines.launch import meter_days
from gpumeter.storage.paths import MARTS
from gpumeter.storage.warehouse import Warehouse
from gpumeter.views.cache import ReadCache
from gpumeter.views.filters import Filters
from gpumeter.views.identity import Viewer
from gpumeter.views.scoped import Views
from tests.builders import FactoryBuilder

DAY = date(2026, 11, 2)
H100 = "NVIDIA H100 80GB HBM3"


def _doc(source: Path, warehouse: Path, c60_interval: int | None = 60) -> dict[str, Any]:
    c60: dict[str, Any] = {"name": "c60", "source": {"kind": "parquet", "path": str(source)}}
    if c60_interval is not None:
        c60["scrape_interval_seconds"] = c60_interval
    return {
        "clusters": [{"name": "c30", "source": {"kind": "parquet", "path": str(source)}}, c60],
        "scrape_interval_seconds": 30,
        "kube_lookback_seconds": 60,
        "rate_card": {"models": [{"model": "H100-80GB", "aliases": [H100], "price_per_gpu_hour": 3.60}]},
        "tenants": [
            {"name": "team-30", "namespaces": ["ns-30"]},
            {"name": "team-60", "namespaces": ["ns-60"]},
        ],
        "warehouse": {"path": str(warehouse), "persist_models": "all"},
    }


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Warehouse]:
    root = tmp_path_factory.mktemp("delta")
    source = root / "source"
    c30 = FactoryBuilder("c30", DAY, scrape_s=30).gpu("n1", "GPU-30", H100)
    c30.samples("GPU-30", range(120), util=50, pod=("ns-30", "p", "c"))  # 00:00-01:00 every 30 s
    c60 = FactoryBuilder("c60", DAY, scrape_s=60).gpu("n1", "GPU-60", H100)
    c60.samples("GPU-60", range(60), util=50, pod=("ns-60", "p", "c"))  # 00:00-01:00 every 60 s
    c30.write_parquet_source(source)
    c60.write_parquet_source(source)
    config_path = root / "config.yaml"
    config_path.write_text(yaml.safe_dump(_doc(source, root / "warehouse")), encoding="utf-8")
    outcomes = meter_days(str(config_path), [DAY])
    # A run that fails raises; every asset check of both partitions (conservation among them) passes.
    assert [(o.cluster, o.failed_checks) for o in outcomes] == [("c30", []), ("c60", [])]
    assert all(o.checks for o in outcomes)
    return config_path, Warehouse.of(load_config(config_path).warehouse)


def _marts(warehouse: Warehouse, table: str) -> list[dict[str, Any]]:
    files = sorted((warehouse.root / MARTS / table).glob("**/*.parquet"))
    return pa.concat_tables([pa.parquet.read_table(f) for f in files]).to_pylist()  # type: ignore[attr-defined]


def test_each_cluster_counts_its_own_scrape_interval(metered: tuple[Path, Warehouse]) -> None:
    _, warehouse = metered
    seconds = {
        (r["cluster"], r["namespace"]): r["device_seconds"] for r in _marts(warehouse, "device_seconds")
    }
    assert seconds == {("c30", "ns-30"): Decimal(3600), ("c60", "ns-60"): Decimal(3600)}


def test_the_invoice_bills_each_hour_once_and_nothing_is_idle(metered: tuple[Path, Warehouse]) -> None:
    config_path, warehouse = metered
    config = load_config(config_path)
    cost = pa.Table.from_pylist(_marts(warehouse, "tenant_daily_cost"))
    lines = build_invoice_lines(cost, config, Period.of(DAY)).to_pylist()
    amounts = {line["tenant"]: line["amount"] for line in lines}
    # 3,600 s × 0.001 = 3.60 each; every observed second is held, so the pool's idle is 0.
    assert amounts == {"team-30": Decimal("3.60"), "team-60": Decimal("3.60"), IDLE: Decimal("0.00")}
    pool = sum((r["pool_cost"] for r in _marts(warehouse, "pool_daily_cost")), Decimal(0))
    assert pool == Decimal("7.20")


def test_the_heatmap_reads_each_cluster_with_its_interval(metered: tuple[Path, Warehouse]) -> None:
    config_path, warehouse = metered
    views = Views(warehouse, load_config(config_path), cache=ReadCache(0))
    heat = views.gpu_hourly_heatmap(Viewer("finance"), Filters(Period.of(DAY)))
    # Held the whole observed hour on both clusters: allocated 1.0, not 2.0 on the 60 s cluster.
    assert sorted(zip(heat["cluster"], heat["allocated"], strict=True)) == [("c30", 1.0), ("c60", 1.0)]
    grouped = views.grouped_hourly_heatmap(Viewer("finance"), Filters(Period.of(DAY)), "node")
    assert sorted(grouped["observed_gpu_hours"].to_list()) == [1.0, 1.0]


def test_the_lookback_covers_two_of_the_clusters_own_intervals(tmp_path: Path) -> None:
    config = parse_config(yaml.safe_dump(_doc(tmp_path, tmp_path / "wh", c60_interval=600)))
    assert config.scrape_interval_of("c30") == 30 and config.scrape_interval_of("c60") == 600
    assert lookback_ms(config, "c30") == 60_000  # kube_lookback_seconds, more than 2 × 30 s
    assert lookback_ms(config, "c60") == 1_200_000  # 2 × 600 s
    assert config.scrape_interval_of("gone") == 30  # a cluster no longer configured: the pool's


@pytest.mark.parametrize("bad", [0, -30, 3601])
def test_a_bad_cluster_interval_is_one_error_naming_the_field(tmp_path: Path, bad: int) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(yaml.safe_dump(_doc(tmp_path, tmp_path / "wh", c60_interval=bad)))
    assert "clusters[1].scrape_interval_seconds" in str(caught.value)
