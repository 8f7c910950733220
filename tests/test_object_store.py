"""The warehouse on an object store: a real S3 server (moto's, on 127.0.0.1) reached through s3fs, the demo
factory metered with `warehouse.path: s3://...` through the real Dagster jobs, DuckDB reading the objects in
place. Its results must be those of the same days on a local warehouse."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest

import gpumeter_sim as simulator
from gpumeter.billing.invoices import Period
from gpumeter.billing.periods import exports_dir, published_exports, stored_lines
from gpumeter.cli.demo import write_demo_config
from gpumeter.config import ConfigError, load_config, parse_config
from gpumeter.models.project import load_models
from gpumeter.pipelines.launch import invoice_month, meter_days
from gpumeter.storage.files import WarehouseError
from gpumeter.storage.paths import MARTS, RAW
from gpumeter.storage.warehouse import Warehouse
from gpumeter.views.filters import Filters
from gpumeter.views.identity import local_viewer
from gpumeter.views.scoped import Views
from tests.builders import edit_config
from tests.s3_server import s3_server

moto_server = pytest.importorskip("moto.server")
s3fs = pytest.importorskip("s3fs")

pytestmark = pytest.mark.slow

DAY = date(2026, 11, 1)
PERIOD = "2026-11"
BUCKET = "gpumeter-test"
MINIMAL = "clusters:\n  - name: a\n    source: {kind: parquet, path: x}\n"
MART_TABLES = sorted({m.table for m in load_models() if m.layer == "marts"})


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """A real S3 API server on 127.0.0.1 (tests/s3_server.py)."""
    with s3_server(BUCKET) as endpoint:
        yield endpoint


def _metered(out: Path, warehouse_path: str | None) -> Path:
    """The demo factory's day and month through the Dagster jobs, into `warehouse_path` (default: local)."""
    if not (out / "source").exists():
        spec = simulator.FactorySpec(**{**simulator.demo_spec().__dict__, "days": 1})
        simulator.write_parquet(spec, out / "source")
    config_path = write_demo_config(out)
    if warehouse_path:
        assert load_config(config_path).warehouse.path == str((out / "warehouse").resolve())
        edit_config(config_path, lambda doc: doc["warehouse"].update(path=warehouse_path))
    # The asset checks run on what was stored: on S3 they pass as they do locally (only warnings).
    (day,) = meter_days(str(config_path), [DAY])
    assert all(check.endswith("(WARN)") for check in day.failed_checks), day.failed_checks
    assert invoice_month(str(config_path), PERIOD).failed_checks == []
    return config_path


@pytest.fixture(scope="module")
def local_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _metered(tmp_path_factory.mktemp("local"), None)


@pytest.fixture(scope="module")
def s3_config(s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _metered(tmp_path_factory.mktemp("s3"), f"s3://{BUCKET}/factory/warehouse")


def _warehouse(config_path: Path) -> Warehouse:
    return Warehouse.of(load_config(config_path).warehouse)


def _rows(table: pa.Table | None) -> list[tuple]:
    assert table is not None
    return sorted(tuple(map(repr, row.values())) for row in table.to_pylist())


def _digests(warehouse: Warehouse, zone: str) -> dict[str, str]:
    root = warehouse.root / zone
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.glob("**/*.parquet")}


def test_results_live_on_the_object_store(s3_config: Path, s3_endpoint: str) -> None:
    fs = s3fs.S3FileSystem(endpoint_url=s3_endpoint)
    base = f"{BUCKET}/factory/warehouse"
    assert fs.glob(f"{base}/{RAW}/raw_dcgm_samples/cluster=*/day={DAY}/*.parquet")
    assert fs.glob(f"{base}/{MARTS}/tenant_daily_cost/cluster=*/day={DAY}/data.parquet")
    assert fs.exists(f"{base}/{MARTS}/invoice_lines/period={PERIOD}/data.parquet")
    # Nothing of the run is left behind: no lock object, no temp object.
    assert not fs.glob(f"{base}/.locks/*")
    assert not [p for p in fs.find(base) if p.endswith(".tmp")]


@pytest.mark.parametrize("table", MART_TABLES)
def test_marts_on_s3_equal_the_local_marts(s3_config: Path, local_config: Path, table: str) -> None:
    # The same raw day metered where it lies on S3 (DuckDB through fsspec) or on disk gives the same rows.
    ours = _warehouse(s3_config).read_days(MARTS, table, [DAY])
    theirs = _warehouse(local_config).read_days(MARTS, table, [DAY])
    assert (ours is None) == (theirs is None)
    if theirs is not None:
        assert _rows(ours) == _rows(theirs)


def test_month_rolls_up_and_exports_on_s3_r2(s3_config: Path, local_config: Path) -> None:
    # R2: the month is the sum of its days, on either storage; its export files are the same bytes.
    s3, local = _warehouse(s3_config), _warehouse(local_config)
    assert _rows(stored_lines(s3, PERIOD)) == _rows(stored_lines(local, PERIOD))
    s3_files = {p.name: p.read_bytes() for p in published_exports(s3, PERIOD).glob("*")}
    local_files = {p.name: p.read_bytes() for p in exports_dir(local, PERIOD).glob("*")}
    assert f"invoice_lines_{PERIOD}_all.csv" in s3_files
    assert s3_files == local_files


def test_dashboard_reads_the_marts_from_s3(s3_config: Path, local_config: Path) -> None:
    config = load_config(s3_config)
    filters = Filters(Period.parse(PERIOD))
    viewer = local_viewer(config, "")
    s3_views = Views(_warehouse(s3_config), config)
    local_views = Views(_warehouse(local_config), load_config(local_config))
    try:
        assert s3_views.options(viewer).periods == [PERIOD]
        assert s3_views.metered_days(viewer, filters) == [DAY]
        assert s3_views.tenant_charges(viewer, filters).equals(local_views.tenant_charges(viewer, filters))
        assert _rows(s3_views.invoice_lines(viewer, filters)) == _rows(
            local_views.invoice_lines(viewer, filters)
        )
        status = s3_views.invoice_status(filters)
        assert status is not None and not status.closed
    finally:
        s3_views.close()
        local_views.close()


def test_remetering_a_day_replaces_it_on_s3_r15(s3_config: Path) -> None:
    # R15: a re-run of the day replaces its objects with identical ones; nothing is added beside them.
    warehouse = _warehouse(s3_config)
    before = _digests(warehouse, MARTS)
    meter_days(str(s3_config), [DAY])
    assert _digests(warehouse, MARTS) == before


def test_a_day_held_by_another_run_is_refused_r15(s3_endpoint: str) -> None:
    # R15: the lock object is created only if absent, so a second run of the (cluster, day) writes nothing.
    warehouse = Warehouse.at(f"s3://{BUCKET}/locking")
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with warehouse.day_lock(DAY, cluster="demo"):
            held.set()
            release.wait(30)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(30)
        with pytest.raises(WarehouseError) as caught, warehouse.day_lock(DAY, cluster="demo", timeout_s=0.5):
            pytest.fail("two runs held the same day")
        message = str(caught.value)
        assert f"s3://{BUCKET}/locking/.locks/cluster=demo/day={DAY}.lock" in message
        assert "wrote nothing" in message and "delete the lock object" in message
    finally:
        release.set()
        thread.join()
    with warehouse.day_lock(DAY, cluster="demo", timeout_s=5):  # released at the end of the holder's run
        pass


def test_missing_bucket_is_one_clear_error(s3_endpoint: str) -> None:
    with pytest.raises(WarehouseError) as caught:
        Warehouse.at("s3://no-such-bucket/warehouse")
    message = str(caught.value)
    assert "s3://no-such-bucket/warehouse" in message and "check the bucket exists" in message


def test_unreachable_endpoint_is_one_clear_error(s3_endpoint: str) -> None:
    with pytest.raises(WarehouseError) as caught:
        Warehouse.at(f"s3://{BUCKET}/warehouse", endpoint_url="http://127.0.0.1:9")
    message = str(caught.value)
    assert f"s3://{BUCKET}/warehouse" in message and "endpoint" in message


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("ftp://host/warehouse", "unknown storage scheme ftp://"),
        ("s3://", "names no bucket"),
        ("file://relative/dir", "absolute path"),
    ],
)
def test_bad_warehouse_uri_is_refused_naming_the_field(path: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f"{MINIMAL}warehouse:\n  path: {path!r}\n")
    assert "warehouse.path" in str(caught.value) and expected in str(caught.value)


def test_file_uri_is_a_local_warehouse(tmp_path: Path) -> None:
    warehouse = Warehouse.at(f"file://{tmp_path}/wh")
    assert warehouse.root == tmp_path / "wh" and not warehouse.is_object_store
    warehouse.write_day(MARTS, "t", "c1", DAY, pa.table({"x": [1]}))
    assert warehouse.read_days(MARTS, "t", [DAY]).to_pylist() == [{"x": 1}]


def test_s3_options_are_refused_for_other_locations() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f"{MINIMAL}warehouse:\n  path: /srv/wh\n  endpoint_url: http://minio:9000\n")
    assert "endpoint_url and region apply to an s3:// path only" in str(caught.value)
