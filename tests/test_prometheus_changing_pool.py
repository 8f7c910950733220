"""A pool that changes during the day, through a real HA Prometheus pair and through Parquet: the same bill.

The simulated factory with every dynamic on — a GPU re-partitioned at noon (whole in the morning), another
MIG GPU re-partitioned with its ResourceSlice re-published under new device names, `vllm-0` deleted and
recreated under a new uid, a 20-minute DRA job whose claim lives only in the timed snapshots of its life, a
pod relabelled at noon, kube-state-metrics stamped 20 s before dcgm-exporter, a node that joins at 06:00 and
one removed at 18:00 — is written once as Parquet and once as OpenMetrics scraped by an HA pair
(`prometheus_replica` a and b, b 2 s later, a down 10:05–10:20 and b 10:35–10:50 every day), backfilled with
promtool into a real Prometheus on 127.0.0.1 (and, again, imported into a real VictoriaMetrics, another
PromQL API). The Prometheus path reads the DRA objects from the timed snapshot folder (`k8s_snapshots_dir`).
Both are metered by the real Dagster jobs: every invoice line and every mart must be identical — the union of the replicas' scrapes
loses no sample and counts none twice.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

import gpumeter_sim as simulator
from gpumeter.billing.periods import invoice_lines_path
from gpumeter.cli.demo import write_demo_config, write_prometheus_demo_config
from gpumeter.config import load_config
from gpumeter.pipelines.launch import invoice_month, meter_days
from gpumeter.storage.paths import MARTS
from gpumeter.storage.warehouse import Warehouse
from tests.prometheus_fixtures import BACKENDS, needs_prometheus, serve_openmetrics

pytestmark = [pytest.mark.slow, needs_prometheus]

SPEC = simulator.FactorySpec(
    h100_nodes=2,
    a100_nodes=1,
    h200_nodes=1,
    gpus_per_node=8,
    scrape_interval_s=300,
    days=2,
    autoscale=True,
    **simulator.CHANGING_POOL,
)
PERIOD = "2026-11"
# A replica's sample 2 s late stands for 302 s: a lookback above Δ (300 s here) lets it.
LOOKBACK_S = 600


def _edit(config_path: Path, **changes: object) -> None:
    doc = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    doc.update({k: v for k, v in changes.items() if k != "source"})
    if "source" in changes:
        doc["clusters"][0]["source"] = changes["source"]
    config_path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")


@pytest.fixture(scope="module", params=BACKENDS)
def two_paths(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("changing-pool")
    parquet_dir = root / "parquet"
    simulator.write_parquet(SPEC, parquet_dir / "source")
    parquet_config = write_demo_config(parquet_dir)
    _edit(parquet_config, scrape_interval_seconds=SPEC.scrape_interval_s, kube_lookback_seconds=LOOKBACK_S)
    snapshots = parquet_dir / "source" / "k8s"
    assert any(snapshots.glob("cluster=*/day=*/resourceclaims-*.json")), "timed claim snapshots"

    prom_dir = root / "prometheus"
    simulator.write_openmetrics(SPEC, prom_dir / "factory.om")
    text = (prom_dir / "factory.om").read_text(encoding="utf-8")
    assert 'prometheus_replica="a"' in text and 'prometheus_replica="b"' in text
    with serve_openmetrics(request.param, prom_dir / "factory.om", prom_dir) as server:
        placeholder = prom_dir / "none.json"
        prom_config = write_prometheus_demo_config(
            prom_dir, server.url, claims_file=placeholder, slices_file=placeholder
        )
        source = (
            load_config(prom_config)
            .clusters[0]
            .source.model_dump(exclude={"claims_file", "slices_file"}, exclude_none=True)
        )
        _edit(
            prom_config,
            scrape_interval_seconds=SPEC.scrape_interval_s,
            kube_lookback_seconds=LOOKBACK_S,
            source={**source, "k8s_snapshots_dir": str(snapshots)},
        )
        meter_days(str(prom_config), SPEC.day_list)
        invoice_month(str(prom_config), PERIOD)
    found = subprocess.run(["pgrep", "-f", str(prom_dir)], capture_output=True, text=True, check=False)
    assert found.stdout.split() == [], "no server is left running"
    meter_days(str(parquet_config), SPEC.day_list)
    invoice_month(str(parquet_config), PERIOD)
    yield parquet_config, prom_config


def _warehouse(config_path: Path) -> Warehouse:
    return Warehouse.at(load_config(config_path).warehouse.path)


def test_the_invoices_are_identical(two_paths: tuple[Path, Path]) -> None:
    a, b = (pq.read_table(invoice_lines_path(_warehouse(c), PERIOD)) for c in two_paths)
    tenants = set(a.column("tenant").to_pylist())
    assert {"research", "serving", "ml-training", "__idle__"} <= tenants
    assert a.equals(b), (a.to_pylist(), b.to_pylist())


def test_every_mart_file_is_identical(two_paths: tuple[Path, Path]) -> None:
    a_root, b_root = (_warehouse(c).root / MARTS for c in two_paths)
    files = sorted(p.relative_to(a_root) for p in a_root.glob("**/data.parquet"))
    assert files and files == sorted(p.relative_to(b_root) for p in b_root.glob("**/data.parquet"))
    for rel in files:
        assert pq.read_table(a_root / rel).equals(pq.read_table(b_root / rel)), str(rel)


def test_the_dynamics_are_billed(two_paths: tuple[Path, Path]) -> None:
    """Not an empty equality: the day of the events shows each of them in the marts."""
    wh = _warehouse(two_paths[1])
    day = SPEC.day_list[1]
    held = pq.read_table(wh.day_path(MARTS, "device_seconds", SPEC.cluster, day)).to_pylist()
    assert ("inference", "vllm-0") in {(r["namespace"], r["pod"]) for r in held}
    assert any(r["pod"].startswith("smoke-test-") and r["holder_source"] == "dra" for r in held)
    # The relabelled pod is two tenants' in one day.
    jupyter = {r["tenant"] for r in held if r["pod"] == "jupyter-alice-0"}
    assert "research" in jupyter and len(jupyter) == 2
    layouts = {
        r["layout"]
        for r in pq.read_table(wh.day_path(MARTS, "mig_slice_usage", SPEC.cluster, day)).to_pylist()
        if r["layout"]
    }
    assert "2g.20gb+2g.20gb+3g.40gb" in layouts and "3g.40gb+3g.40gb" in layouts
    # The autoscaler's nodes, 8 GPUs each: gpu-a100-01 joins at 06:00Z, 18 h of each GPU but the 10 minutes of
    # its re-partitioned GPU's reset (no series); gpu-h100-01 is removed at 18:00Z, 18 h of each GPU.
    pool = pq.read_table(wh.day_path(MARTS, "pool_daily_cost", SPEC.cluster, day)).to_pylist()
    observed: dict[str, Decimal] = {}
    for r in pool:
        observed[r["node"]] = observed.get(r["node"], Decimal(0)) + r["observed_gpu_seconds"]
    assert observed["gpu-a100-01"] == 8 * 18 * 3600 - 600
    assert observed["gpu-h100-01"] == 8 * 18 * 3600
