"""The dashboard's cache (gpumeter/views/cache.py): a cached read is only ever handed to a viewer of the same
scope, and a day re-metered with other figures is read afresh, by the data layer and on the page; the DuckDB
session is shared until a table appears; the concurrent-viewers bench step runs against the real server."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from streamlit.testing.v1 import AppTest

from bench import fleet
from gpumeter.billing.invoices import Period
from gpumeter.config import Config, load_config, parse_config
from gpumeter.dashboard import APP
from gpumeter.pipelines.launch import meter_days
from gpumeter.storage.paths import MARTS
from gpumeter.storage.replacement import Acceptance
from gpumeter.storage.warehouse import Warehouse
from gpumeter.views import cache as cache_module
from gpumeter.views.cache import READS, ReadCache, files_version
from gpumeter.views.filters import Filters
from gpumeter.views.identity import Viewer
from gpumeter.views.scoped import Views
from gpumeter.views.session import cached
from tests.builders import edit_config, invoiced_by_hand
from tests.test_views import DAYS, ROLES_YAML, TENANTS, build_metered

NOVEMBER = Period(2026, 11)
DAY = DAYS[0]
SCOPED_READS = ("tenant_charges", "daily_charges", "monthly_charges", "usage_by_model", "idle_holders",
                "whole_gpu_holders", "metered_days", "budgets", "rightsizing_advice")  # fmt: skip


# --- the cache itself (no warehouse) -----------------------------------------------------------------
def test_the_cache_is_bounded_and_can_be_turned_off() -> None:
    small = ReadCache(max_bytes=20_000)
    frame = pl.DataFrame({"x": list(range(1000))})  # ~8 kB
    for key in range(10):
        assert small.get(key, lambda: frame).equals(frame)
    assert 1 <= len(small) <= 2  # least recently used first out
    assert small.list_keys()[-1] == 9
    off = ReadCache(max_bytes=0)
    calls: list[int] = []
    for _ in range(3):
        off.get("k", lambda: calls.append(1) or frame)
    assert len(calls) == 3 and len(off) == 0


def test_concurrent_misses_of_one_key_read_once() -> None:
    cache = ReadCache(max_bytes=2**20)
    calls: list[int] = []
    gate = threading.Event()

    def slow_read() -> int:
        calls.append(1)
        gate.wait(10)
        return 42

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(cache.get, "key", slow_read) for _ in range(8)]
        threading.Timer(0.3, gate.set).start()
        assert [f.result(timeout=30) for f in futures] == [42] * 8
    assert calls == [1]


def test_a_failed_read_is_not_kept() -> None:
    cache = ReadCache(max_bytes=2**20)

    def failing() -> int:
        raise PermissionError("no")

    with pytest.raises(PermissionError):
        cache.get("key", failing)
    assert cache.get("key", lambda: 7) == 7


def test_a_file_replaced_by_one_of_the_same_size_is_a_new_version(tmp_path: Path) -> None:
    warehouse = Warehouse.at(tmp_path)
    path = warehouse.write_day(MARTS, "t", "c", DAY, pa.table({"amount": [1]}))
    before = files_version([path.parent])
    size = path.stat().st_size
    warehouse.write_day(MARTS, "t", "c", DAY, pa.table({"amount": [2]}))  # the pipeline's atomic rename
    assert path.stat().st_size == size
    assert files_version([path.parent]) != before


def test_the_duckdb_session_is_shared_until_a_table_appears(tmp_path: Path) -> None:
    warehouse = Warehouse.at(tmp_path)
    config = parse_config(ROLES_YAML)
    warehouse.write_day(MARTS, "stranded_capacity", "c", DAY, pa.table({"day": [DAY], "x": [1]}))

    def sessions() -> list[object]:
        return [db for key, db in cache_module.SESSIONS.databases.items() if key[0] == str(warehouse.root)]

    first, second = Views(warehouse, config), Views(warehouse, config)
    assert len(sessions()) == 1  # one session for both page views
    assert first.tables == second.tables == {"stranded_capacity"}
    # A new day of a stored table is read through the same session: views glob their files when read.
    warehouse.write_day(
        MARTS, "stranded_capacity", "c", date(2026, 11, 2), pa.table({"day": [DAY], "x": [2]})
    )
    assert Views(warehouse, config).con.sql("select sum(x) from stranded_capacity").fetchall() == [(3,)]
    assert len(sessions()) == 1
    warehouse.write_day(MARTS, "data_quality", "c", DAY, pa.table({"day": [DAY]}))
    third = Views(warehouse, config)
    assert third.tables == {"stranded_capacity", "data_quality"}
    assert len(sessions()) == 2  # a table appeared: a session with its view
    for views in (first, second, third):
        views.close()


# --- on a metered warehouse ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Its own warehouse: the tests below re-meter its day.
    return build_metered(tmp_path_factory.mktemp("cache"), days=[DAY])


@pytest.fixture(scope="module")
def config(config_path: Path) -> Config:
    return load_config(config_path)


def viewers() -> list[Viewer]:
    return [Viewer("finance"), Viewer("ops"), *(Viewer("tenant", t) for t in TENANTS)]


def _read(views: Views, name: str, viewer: Viewer, filters: Filters) -> Any:
    return getattr(views, name)(viewer, filters)


def _same(got: Any, want: Any) -> bool:
    """The same rows (a read's order of equal rows is the query's, not the cache's, to keep)."""
    if isinstance(want, pl.DataFrame):
        return got.columns == want.columns and got.sort(got.columns).equals(want.sort(want.columns))
    return got == want


def _tenants_of(value: Any) -> set[str]:
    if isinstance(value, pl.DataFrame):
        return set(value["tenant"]) if "tenant" in value.columns else set()
    if isinstance(value, list):
        return {
            getattr(v, "tenant", None) or getattr(getattr(v, "holder", None), "tenant", None) for v in value
        } - {None}
    return set()


@pytest.mark.slow
def test_cached_reads_never_cross_viewer_scopes(config: Config) -> None:
    """Every scoped read for every scope, twice in interleaved orders through one cache: each result equals
    the same read made without a cache, and a tenant's holds its own tenant only."""
    warehouse = Warehouse.of(config.warehouse)
    shared, none = ReadCache(max_bytes=256 * 2**20), ReadCache(max_bytes=0)
    filters = [Filters(NOVEMBER), Filters(NOVEMBER, tenants=("serving",))]
    plan = [(name, viewer, f) for name in SCOPED_READS for viewer in viewers() for f in filters]
    random.Random(7).shuffle(plan)
    for round_ in (plan, plan[::-1]):
        for name, viewer, f in round_:
            got = _read(Views(warehouse, config, shared), name, viewer, f)
            want = _read(Views(warehouse, config, none), name, viewer, f)
            assert _same(got, want), (name, viewer, f)
            if viewer.role == "tenant":
                assert _tenants_of(got) <= {viewer.tenant}, (name, viewer)
    assert shared.hits >= len(plan)  # the second round was served by the cache
    # Every key of a scoped read names the scope it was read for, and nothing of who read it.
    for key in shared.list_keys():
        scope = [part for part in key[1] if isinstance(part, tuple) and part[:1] == ("viewer",)]
        assert len(scope) == 1 and len(scope[0]) == 3, key


@pytest.mark.slow
def test_concurrent_viewers_of_different_scopes_get_their_own_rows(config: Config) -> None:
    warehouse = Warehouse.of(config.warehouse)
    none = ReadCache(max_bytes=0)
    filters = Filters(NOVEMBER)
    want = {
        (name, viewer): _read(Views(warehouse, config, none), name, viewer, filters)
        for name in SCOPED_READS
        for viewer in viewers()
    }
    shared = ReadCache(max_bytes=256 * 2**20)
    jobs = list(want) * 3
    random.Random(11).shuffle(jobs)

    def job(item: tuple[str, Viewer]) -> bool:
        views = Views(warehouse, config, shared)  # a page view: its own cursor of the shared session
        try:
            return _same(_read(views, item[0], item[1], filters), want[item])
        finally:
            views.close()

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(job, jobs))
    assert shared.hits > 0


def _doubled_prices(doc: dict[str, Any]) -> None:
    for model in doc["rate_card"]["models"]:
        model["price_per_gpu_hour"] = model["price_per_gpu_hour"] * 2


@pytest.fixture
def remeter(config_path: Path, tmp_path: Path) -> Iterator[Callable[[], None]]:
    """Re-meter the day at doubled prices (the same warehouse); put it back as it was afterwards."""
    doubled = edit_config(config_path, _doubled_prices, to=tmp_path / "doubled.yaml")
    yield lambda: meter_days(str(doubled), [DAY])
    # halving the prices again bills the day less: accepted, as an operator would (audited)
    meter_days(str(config_path), [DAY], acceptance=Acceptance("the test puts the prices back", "pytest"))


def _mart_total(config: Config) -> Decimal:
    """What the tenants' invoices say in all, from the mart by hand (each line rounded once)."""
    root = Warehouse.of(config.warehouse).root / MARTS / "tenant_daily_cost"
    frame = pl.read_parquet(sorted(root.glob("**/data.parquet")), hive_partitioning=False)
    return sum(invoiced_by_hand(frame, config.minor_unit).values(), Decimal(0))


@pytest.mark.slow
def test_a_remetered_day_is_read_afresh(config: Config, remeter: Callable[[], None]) -> None:
    warehouse = Warehouse.of(config.warehouse)
    cache = ReadCache(max_bytes=256 * 2**20)
    finance, tenant = Viewer("finance"), Viewer("tenant", "serving")

    def read() -> tuple[pl.DataFrame, pl.DataFrame]:
        # The same config object throughout: only the stored files change.
        views = Views(warehouse, config, cache)
        return views.tenant_charges(finance, Filters(NOVEMBER)), views.tenant_charges(
            tenant, Filters(NOVEMBER)
        )

    before, before_tenant = read()
    again, _ = read()
    assert again.equals(before) and cache.hits >= 1  # cached while nothing changed
    assert sum(before["amount"], Decimal(0)) == _mart_total(config)
    remeter()
    after, after_tenant = read()
    assert sum(after["amount"], Decimal(0)) == _mart_total(config) != sum(before["amount"], Decimal(0))
    assert after_tenant["amount"][0] != before_tenant["amount"][0]
    assert set(after_tenant["tenant"]) == {"serving"}


@pytest.mark.slow
def test_the_page_shows_a_remetered_day(
    config_path: Path, config: Config, remeter: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the app and its process-wide cache: the Charges total before and after re-metering."""
    monkeypatch.setenv("GPUMETER_CONFIG", str(config_path))
    monkeypatch.setenv("GPUMETER_DASHBOARD_VIEWER", "finance")
    assert READS.max_bytes > 0

    def total() -> str:
        at = AppTest.from_file(str(APP), default_timeout=120).run()
        assert not at.exception, [e.value for e in at.exception]
        return next(m.value for m in at.metric if m.label == "Total in scope")

    before = total()
    hits = READS.hits
    assert total() == before and READS.hits > hits  # the second view was served from the cache
    remeter()
    after = total()
    assert after != before
    assert after == f"{_mart_total(config):,.2f} USD"


@pytest.mark.slow
def test_concurrent_viewers_step_times_each_viewers_pages(config_path: Path, config: Config) -> None:
    """bench/fleet.py's `dashboard_viewers` on this warehouse, two viewers: every page of every viewer timed
    through the real server, with and without the cache."""
    ws = fleet.Workspace(config_path.parent, 36, 1)
    measure = fleet.step_dashboard_viewers(ws, 2)
    extra = measure.extra
    pages = set(fleet.dashboard_pages())
    assert set(extra["alone"]) == pages
    passes = ("cold", "warm", "cold_gc_off", "warm_gc_off", "re_metered_gc_off", "cold_warm_up_gc_off",
              "re_metered_warmed_up_gc_off", "uncached")  # fmt: skip
    for name in passes:
        assert len(extra[name]) == 2 and all(set(run) == pages for run in extra[name])
        assert extra[f"{name}_slowest_per_viewer"] == [max(run.values()) for run in extra[name]]
    assert measure.wall_s == max(extra["cold_slowest_per_viewer"]) > 0
    assert extra["server_peak_rss_mib"] > 0
    assert extra["warm_up_settle_s"] >= 5


class _TornViews(Views):
    """A read whose first query fails the way a Parquet file replaced mid-scan can fail, optionally after the
    day's file really is replaced (the pipeline's atomic rename, same rows)."""

    calls = 0
    replace_first = True

    @cached("stranded_capacity")
    def torn(self, viewer: Viewer, filters: Filters) -> int:
        type(self).calls += 1
        if type(self).calls == 1:
            if self.replace_first:
                path = next((self.warehouse.root / MARTS / "stranded_capacity").glob("**/data.parquet"))
                self.warehouse.write_day(MARTS, "stranded_capacity", "c", DAY, pq.read_table(path))
            raise duckdb.Error("don't know what type")  # what DuckDB raised in the browser test
        return int(self.con.execute("select count(*) from stranded_capacity").fetchall()[0][0])


def test_a_read_torn_by_a_re_metered_day_is_read_again_and_not_kept(tmp_path: Path) -> None:
    warehouse = Warehouse.at(tmp_path)
    warehouse.write_day(MARTS, "stranded_capacity", "c", DAY, pa.table({"day": [DAY], "x": [1]}))
    cache = ReadCache(max_bytes=2**20)
    _TornViews.calls, _TornViews.replace_first = 0, True
    views = _TornViews(warehouse, parse_config(ROLES_YAML), cache, snapshot=True)
    assert views.torn(Viewer("finance"), Filters(NOVEMBER)) == 1
    assert _TornViews.calls == 2 and len(cache) == 0  # read again; nothing kept under the old version


def test_a_read_error_with_the_files_unchanged_is_raised(tmp_path: Path) -> None:
    warehouse = Warehouse.at(tmp_path)
    warehouse.write_day(MARTS, "stranded_capacity", "c", DAY, pa.table({"day": [DAY], "x": [1]}))
    _TornViews.calls, _TornViews.replace_first = 0, False
    views = _TornViews(warehouse, parse_config(ROLES_YAML), ReadCache(max_bytes=2**20), snapshot=True)
    with pytest.raises(duckdb.Error, match="know what type"):
        views.torn(Viewer("finance"), Filters(NOVEMBER))
    assert _TornViews.calls == 1
