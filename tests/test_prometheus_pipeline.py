"""The key acceptance test of the Prometheus source: for the same simulated days, `gpumeter run` through a
real Prometheus gives the same invoices and the same device-seconds as through the Parquet source.

Nothing is mocked: the factory is written both as Parquet and as OpenMetrics, the OpenMetrics is
backfilled with promtool into a real TSDB served by a real `prometheus` on 127.0.0.1, and both configs
are metered by the real Dagster jobs (`meter_day`, `invoice_month`) into two separate warehouses.

Also `gpumeter demo --prometheus` end to end (`demo_prometheus`, what the command runs) on a small factory:
the demo's own factory takes promtool about a minute per simulated day to backfill, so
`main(["demo", "--prometheus", "--days", "1"])` takes ~2 min, too slow for the suite (docs/prometheus.md,
"The demo through Prometheus"). Every test checks that no `prometheus` process is left behind.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import gpumeter_sim as simulator
from gpumeter.billing.month import read_mart
from gpumeter.billing.periods import exports_dir, invoice_lines_path
from gpumeter.cli import demo as cli_demo
from gpumeter.cli.demo import write_demo_config, write_demo_k8s_objects, write_prometheus_demo_config
from gpumeter.cli.main import main as cli_main
from gpumeter.config import load_config
from gpumeter.pipelines.launch import RunFailed, invoice_month, meter_days
from gpumeter.storage.paths import MARTS, RAW
from gpumeter.storage.warehouse import Warehouse
from gpumeter_sim.promserver import PrometheusServer, backfill
from tests.builders import edit_config
from tests.prometheus_fixtures import needs_prometheus
from tests.test_row_order import python_key

pytestmark = [pytest.mark.slow, needs_prometheus]

# Small but complete: whole-GPU jobs, MIG (with unpartitioned remainders), a time-sliced GPU shared by
# three pods (vgpu), DRA GPUs, an unmapped namespace, the outage, the XID and the energy reset on day 2,
# a cordoned node. 300 s scrapes keep the backfill to a few seconds.
SPEC = simulator.FactorySpec(
    h100_nodes=2, a100_nodes=1, h200_nodes=1, gpus_per_node=4, scrape_interval_s=300, days=2
)
PERIOD = "2026-11"
MARTS_COMPARED = (
    "device_seconds",
    "stranded_capacity",
    "tenant_daily_cost",
    "pool_daily_cost",
    "mig_slice_usage",
    "data_quality",
)


def _prometheus_pids(tsdb: Path) -> list[str]:
    found = subprocess.run(["pgrep", "-f", str(tsdb)], capture_output=True, text=True, check=False)
    return found.stdout.split()


def _set_scrape_interval(config_path: Path, seconds: int) -> None:
    assert load_config(config_path).scrape_interval_seconds == 30
    edit_config(config_path, lambda doc: doc.update(scrape_interval_seconds=seconds))


@dataclass(frozen=True)
class TwoPaths:
    parquet: Path  # config of the Parquet path
    prometheus: Path  # config of the Prometheus path
    tsdb: Path

    def warehouse(self, config_path: Path) -> Warehouse:
        return Warehouse.at(load_config(config_path).warehouse.path)


@pytest.fixture(scope="module")
def two_paths(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoPaths]:
    root = tmp_path_factory.mktemp("two-paths")
    days = SPEC.day_list

    # Parquet path: the simulator's raw samples, the demo config's parquet source.
    parquet_dir = root / "parquet"
    simulator.write_parquet(SPEC, parquet_dir / "source")
    parquet_config = write_demo_config(parquet_dir)
    _set_scrape_interval(parquet_config, SPEC.scrape_interval_s)

    # Prometheus path: the same days as OpenMetrics, backfilled and served; the DRA objects (not metrics)
    # are the same documents the Parquet source reads, gathered into one file per kind.
    prom_dir = root / "prometheus"
    simulator.write_openmetrics(SPEC, prom_dir / "factory.om")
    tsdb = backfill(prom_dir / "factory.om", prom_dir / "prometheus-tsdb")
    k8s = parquet_dir / "source" / "k8s" / f"cluster={SPEC.cluster}"
    claims = [json.loads((k8s / f"day={d}" / "resourceclaims.json").read_text()) for d in days]
    slices = json.loads((k8s / f"day={days[0]}" / "resourceslices.json").read_text())
    claims_file, slices_file = write_demo_k8s_objects(prom_dir / "k8s", claims, slices)
    with PrometheusServer(tsdb) as server:
        assert _prometheus_pids(tsdb), "the server should be running inside the block"
        prom_config = write_prometheus_demo_config(
            prom_dir,
            server.url,
            claims_file=claims_file,
            slices_file=slices_file,
            scrape_interval_s=SPEC.scrape_interval_s,
        )
        meter_days(str(prom_config), days)
        invoice_month(str(prom_config), PERIOD)

    meter_days(str(parquet_config), days)
    invoice_month(str(parquet_config), PERIOD)
    yield TwoPaths(parquet_config, prom_config, tsdb)


def test_configs_differ_only_in_the_source(two_paths: TwoPaths) -> None:
    parquet, prom = load_config(two_paths.parquet), load_config(two_paths.prometheus)
    assert parquet.clusters[0].source.kind == "parquet"
    source = prom.clusters[0].source
    assert source.kind == "prometheus"
    assert source.url.startswith("http://127.0.0.1:")
    assert source.selector == f'cluster="{SPEC.cluster}"'
    assert parquet.scrape_interval_seconds == prom.scrape_interval_seconds == SPEC.scrape_interval_s
    assert parquet.warehouse.path != prom.warehouse.path
    # Same tenants, rate card, policies: everything but the clusters' source and the warehouse.
    skip = {"clusters", "warehouse"}
    assert parquet.model_dump(exclude=skip) == prom.model_dump(exclude=skip)
    assert parquet.clusters[0].name == prom.clusters[0].name == SPEC.cluster
    # The Prometheus path really read Prometheus: its config names no Parquet directory at all.
    assert "kind: parquet" not in two_paths.prometheus.read_text(encoding="utf-8")


def test_invoice_lines_are_identical(two_paths: TwoPaths) -> None:
    a = pq.read_table(invoice_lines_path(two_paths.warehouse(two_paths.parquet), PERIOD))
    b = pq.read_table(invoice_lines_path(two_paths.warehouse(two_paths.prometheus), PERIOD))
    assert a.num_rows > 4  # tenants, __idle__, __unallocated__
    assert a.schema.equals(b.schema)
    assert a.equals(b), (a.to_pylist(), b.to_pylist())


def test_invoice_csvs_are_byte_identical(two_paths: TwoPaths) -> None:
    a_dir = exports_dir(two_paths.warehouse(two_paths.parquet), PERIOD)
    b_dir = exports_dir(two_paths.warehouse(two_paths.prometheus), PERIOD)
    names = sorted(p.name for p in a_dir.glob("*.csv"))
    assert f"invoice_lines_{PERIOD}_all.csv" in names and len(names) > 1
    assert names == sorted(p.name for p in b_dir.glob("*.csv"))
    for name in names:
        assert (a_dir / name).read_bytes() == (b_dir / name).read_bytes(), name


@pytest.mark.parametrize("mart", MARTS_COMPARED)
def test_marts_are_identical_day_by_day(two_paths: TwoPaths, mart: str) -> None:
    a_wh, b_wh = two_paths.warehouse(two_paths.parquet), two_paths.warehouse(two_paths.prometheus)
    for day in SPEC.day_list:
        a, b = read_mart(a_wh, mart, [day]), read_mart(b_wh, mart, [day])
        assert a is not None and b is not None, (mart, day)
        assert a.num_rows > 0, (mart, day)
        assert a.equals(b), (mart, day)


def test_device_seconds_cover_the_factory(two_paths: TwoPaths) -> None:
    """Not an empty equality: both paths metered every day, MIG and DRA-held devices included."""
    table = read_mart(two_paths.warehouse(two_paths.prometheus), "device_seconds", SPEC.day_list)
    assert table is not None and table.num_rows > 20
    assert set(table.column("day").to_pylist()) == set(SPEC.day_list)
    assert "dra" in set(table.column("holder_source").to_pylist())
    assert table.column("mig_profile").null_count < table.num_rows
    tenants = set(table.column("tenant").to_pylist())
    assert {"ml-training", "evaluation", "__unallocated__"} <= tenants


def test_every_mart_file_is_identical(two_paths: TwoPaths) -> None:
    """The whole marts zone, file by file (the same partitions, the same rows)."""
    a_root = two_paths.warehouse(two_paths.parquet).root / MARTS
    b_root = two_paths.warehouse(two_paths.prometheus).root / MARTS
    a_files = sorted(p.relative_to(a_root) for p in a_root.glob("**/data.parquet"))
    assert a_files == sorted(p.relative_to(b_root) for p in b_root.glob("**/data.parquet"))
    for rel in a_files:
        assert pq.read_table(a_root / rel).equals(pq.read_table(b_root / rel)), str(rel)


def test_both_raw_zones_store_dcgm_rows_in_gpu_order(two_paths: TwoPaths) -> None:
    """Each part either pull wrote (a Parquet row group of the stored day: an hour of Prometheus' answers, a
    file of the simulator's) holds its DCGM rows by GPU, time, series key and metric, as Python sorts them."""
    for config in (two_paths.parquet, two_paths.prometheus):
        warehouse = two_paths.warehouse(config)
        for day in SPEC.day_list:
            stored = pq.ParquetFile(warehouse.day_path(RAW, "raw_dcgm_samples", SPEC.cluster, day))
            assert stored.num_row_groups >= 1
            for group in range(stored.num_row_groups):
                rows = stored.read_row_group(group).to_pylist()
                assert rows and rows == sorted(rows, key=python_key), (config, day, group)


def test_no_prometheus_is_left_running(two_paths: TwoPaths) -> None:
    assert _prometheus_pids(two_paths.tsdb) == []


# --- gpumeter demo --prometheus ----------------------------------------------------------------

SMALL = simulator.FactorySpec(
    h100_nodes=2, a100_nodes=1, h200_nodes=1, gpus_per_node=4, scrape_interval_s=300, days=1
)


@pytest.fixture
def dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "dagster-home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def test_demo_prometheus_end_to_end(
    tmp_path: Path, dagster_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`gpumeter demo --prometheus` on a small factory: the same code path as the command, whose only
    difference is the demo's factory (see the module docstring)."""
    out = tmp_path / "demo"
    assert cli_demo.demo_prometheus(out, SMALL) == 0
    printed = capsys.readouterr().out
    for text in (
        "writing OpenMetrics",
        "promtool backfill",
        "done in",
        "Charges",
        "Where capacity went",
        "Conservation",
    ):
        assert text in printed, text
    assert "reconciled" in printed
    config = load_config(out / "config.yaml")
    assert config.clusters[0].source.kind == "prometheus"
    assert config.scrape_interval_seconds == SMALL.scrape_interval_s
    assert (out / "prometheus-tsdb").is_dir()
    assert (out / "invoices" / f"invoice_lines_{PERIOD}_all.csv").is_file()
    assert _prometheus_pids(out / "prometheus-tsdb") == []
    assert any(dagster_home.glob("**/*.db")) or any(dagster_home.iterdir())  # runs recorded

    # A re-run backfills into a fresh TSDB (no second copy of the blocks) and gives the same invoices.
    first = (out / "invoices" / f"invoice_lines_{PERIOD}_all.csv").read_bytes()
    assert cli_demo.demo_prometheus(out, SMALL) == 0
    assert (out / "invoices" / f"invoice_lines_{PERIOD}_all.csv").read_bytes() == first
    assert _prometheus_pids(out / "prometheus-tsdb") == []


def test_demo_prometheus_stops_prometheus_when_metering_fails(
    tmp_path: Path, dagster_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(config_path: Path, days: list[date], clusters: list[str] | None = None) -> bool:
        assert _prometheus_pids(tmp_path / "demo" / "prometheus-tsdb"), "the server runs while metering"
        raise RunFailed("meter_day cluster demo day 2026-11-01: boom")

    monkeypatch.setattr(cli_demo, "meter_and_invoice", fail)
    with pytest.raises(RunFailed, match="boom"):
        cli_demo.demo_prometheus(tmp_path / "demo", SMALL)
    assert _prometheus_pids(tmp_path / "demo" / "prometheus-tsdb") == []


def test_demo_prometheus_defaults_to_one_day_of_the_demo_factory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[simulator.FactorySpec] = []
    monkeypatch.setattr(cli_demo, "demo_prometheus", lambda out, spec: seen.append(spec) or 0)
    assert cli_main(["demo", "--prometheus", "--out", str(tmp_path)]) == 0
    assert cli_main(["demo", "--prometheus", "--out", str(tmp_path), "--days", "3"]) == 0
    demo = simulator.demo_spec()
    assert seen[0] == simulator.FactorySpec(**{**demo.__dict__, "days": 1})
    assert seen[1].days == 3 and seen[1].scrape_interval_s == demo.scrape_interval_s


def test_demo_help_says_the_prometheus_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli_main(["demo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--prometheus" in text
    assert "with --prometheus: 1" in text


def test_prometheus_demo_config_replaces_only_the_source(tmp_path: Path) -> None:
    path = write_prometheus_demo_config(
        tmp_path,
        "http://127.0.0.1:9",
        claims_file=tmp_path / "k8s" / "resourceclaims.json",
        slices_file=tmp_path / "k8s" / "resourceslices.json",
    )
    text = path.read_text(encoding="utf-8")
    assert "kind: parquet" not in text and "kind: prometheus" in text
    config = load_config(path)
    # Everything but the cluster's source (rate card, tenants, policies, warehouse) is the example's, as the
    # demo writes it beside its warehouse.
    example = load_config(write_demo_config(tmp_path / "example"))
    assert config.model_dump(exclude={"clusters", "warehouse"}) == example.model_dump(
        exclude={"clusters", "warehouse"}
    )
    assert config.clusters[0].model_dump(exclude={"source"}) == example.clusters[0].model_dump(
        exclude={"source"}
    )
    assert config.scrape_interval_seconds == 30  # unchanged unless asked
    source = config.clusters[0].source
    assert source.url == "http://127.0.0.1:9"
    assert source.selector == 'cluster="demo"'
    assert source.claims_file == str((tmp_path / "k8s" / "resourceclaims.json").resolve())
    assert config.warehouse.path == str((tmp_path / "warehouse").resolve())
    again = write_prometheus_demo_config(
        tmp_path / "again",
        "http://127.0.0.1:9",
        claims_file=tmp_path / "k8s" / "resourceclaims.json",
        slices_file=tmp_path / "k8s" / "resourceslices.json",
        scrape_interval_s=60,
    )
    assert load_config(again).scrape_interval_seconds == 60


def test_demo_k8s_objects_hold_every_claim_once(tmp_path: Path) -> None:
    def claim(uid: str, name: str) -> dict[str, object]:
        return {"kind": "ResourceClaim", "metadata": {"uid": uid, "name": name, "namespace": "ns"}}

    day1 = {"apiVersion": "v1", "kind": "List", "items": [claim("a", "c-a"), claim("b", "c-b")]}
    day2 = {"apiVersion": "v1", "kind": "List", "items": [claim("b", "c-b"), claim("c", "c-c")]}
    claims_path, slices_path = write_demo_k8s_objects(tmp_path, [day1, day2], {"kind": "List", "items": []})
    doc = json.loads(claims_path.read_text())
    assert [item["metadata"]["uid"] for item in doc["items"]] == ["a", "b", "c"]
    assert doc["kind"] == "List" and json.loads(slices_path.read_text())["kind"] == "List"
