"""The dashboard's warm-up (gpumeter/dashboard/warmup.py): after one round, a view of every page of a warmed scope
reads nothing (every read is a cache hit), for finance and for a tenant; a re-metered day is read again by the
next round; a round stops at half the cache's bound; the scopes follow the config's roles, finance first;
the thread of a running server warms and stops."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from gpumeter.config import Config, load_config, parse_config
from gpumeter.dashboard import APP, warmup
from gpumeter.pipelines.launch import meter_days
from gpumeter.storage.replacement import Acceptance
from gpumeter.views.cache import READS, ReadCache
from gpumeter.views.identity import Viewer
from tests.builders import edit_config
from tests.test_dashboard_pages import FINANCE_PAGES, TENANT_PAGES
from tests.test_views import DAYS, ROLES_YAML, build_metered


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_metered(tmp_path_factory.mktemp("warmup"), days=[DAYS[0]])


@pytest.fixture(scope="module")
def config(config_path: Path) -> Config:
    return load_config(config_path)


@pytest.fixture
def cold() -> Iterator[None]:
    READS.clear()
    yield
    READS.clear()


def _view_every_page(
    config_path: Path, viewer: str, pages: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMETER_CONFIG", str(config_path))
    monkeypatch.setenv("GPUMETER_DASHBOARD_VIEWER", viewer)
    for page in pages:
        at = AppTest.from_file(str(APP), default_timeout=120).run()
        at.switch_page(f"screens/{page}.py").run()
        assert not at.exception and not at.error, (page, [e.value for e in [*at.exception, *at.error]])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("setting", "viewer", "pages"),
    [
        ("finance", Viewer("finance"), FINANCE_PAGES),
        ("tenant:serving", Viewer("tenant", "serving"), TENANT_PAGES),
    ],
)
def test_after_a_round_every_page_view_is_served_from_the_cache(
    config_path: Path,
    config: Config,
    cold: None,
    monkeypatch: pytest.MonkeyPatch,
    setting: str,
    viewer: Viewer,
    pages: list[str],
) -> None:
    assert warmup.warm(config, [viewer]) == [viewer]
    warmed, misses = len(READS), READS.misses
    assert warmed > 0
    _view_every_page(config_path, setting, pages, monkeypatch)
    assert READS.misses == misses  # not one read of any page had to be made
    assert READS.hits > 0


@pytest.mark.slow
def test_a_re_metered_day_is_read_again_by_the_next_round(
    config_path: Path, config: Config, cold: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    finance = Viewer("finance")
    warmup.warm(config, [finance])
    misses = READS.misses
    warmup.warm(config, [finance])
    assert READS.misses == misses  # nothing changed: the round is all hits

    def doubled(doc: dict) -> None:
        for model in doc["rate_card"]["models"]:
            model["price_per_gpu_hour"] *= 2

    # The day re-metered (other figures, same config file afterwards): its files are new versions.
    meter_days(str(edit_config(config_path, doubled, to=tmp_path / "doubled.yaml")), [DAYS[0]])
    try:
        warmup.warm(config, [finance])
        assert READS.misses > misses  # read afresh by the warm-up, not by the next viewer
        misses = READS.misses
        _view_every_page(config_path, "finance", ["charges", "usage"], monkeypatch)
        assert READS.misses == misses
    finally:  # halving the prices again bills the day less: accepted, as an operator would (audited)
        meter_days(
            str(config_path), [DAYS[0]], acceptance=Acceptance("the test puts the prices back", "pytest")
        )


def test_a_round_stops_at_half_the_cache(config: Config) -> None:
    finance, serving = Viewer("finance"), Viewer("tenant", "serving")
    sized = ReadCache(max_bytes=2**30)
    assert warmup.warm(config, [finance], sized) == [finance]
    held = sized.used_bytes  # what finance's pages keep
    assert held > 0
    # Room for finance's reads, but then half full: the tenant's wait for a viewer.
    half = ReadCache(max_bytes=2 * held)
    assert warmup.warm(config, [finance, serving], half) == [finance]
    roomy = ReadCache(max_bytes=2 * held + 2**20 * 64)
    assert warmup.warm(config, [finance, serving], roomy) == [finance, serving]
    assert warmup.warm(config, [finance, serving], ReadCache(max_bytes=0)) == []  # the cache off


def test_the_scopes_are_the_configs_roles_finance_first() -> None:
    config = parse_config(ROLES_YAML)
    assert warmup.scopes(config, signed_in=True) == [
        Viewer("finance", identity="warm-up"),
        Viewer("ops", identity="warm-up"),
        Viewer("tenant", "serving", identity="warm-up"),
    ]


def test_without_sign_in_the_local_viewer_is_warmed(monkeypatch: pytest.MonkeyPatch) -> None:
    config = parse_config(ROLES_YAML)
    monkeypatch.setenv("GPUMETER_DASHBOARD_VIEWER", "tenant:research")
    assert [(v.role, v.tenant) for v in warmup.scopes(config, signed_in=False)] == [("tenant", "research")]


def test_the_interval_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(warmup.WARMUP_ENV, "2.5")
    assert warmup.interval_from_env() == 2.5
    monkeypatch.setenv(warmup.WARMUP_ENV, "")
    assert warmup.interval_from_env() == warmup.DEFAULT_WARMUP_S
    monkeypatch.setenv(warmup.WARMUP_ENV, "soon")
    with pytest.raises(ValueError, match="GPUMETER_DASHBOARD_WARMUP_S='soon'"):
        warmup.interval_from_env()
    monkeypatch.setenv(warmup.WARMUP_ENV, "0")
    assert warmup.start(Path("/nonexistent.yaml"), signed_in=False) is None  # off: no thread


@pytest.mark.slow
def test_the_servers_thread_warms_and_stops(
    config_path: Path, cold: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(warmup.WARMUP_ENV, "0.2")
    monkeypatch.setenv("GPUMETER_DASHBOARD_VIEWER", "finance")
    running = warmup.start(config_path, signed_in=False)
    assert running is not None
    try:
        assert warmup.start(config_path, signed_in=False) is running  # one per server and config
        _wait(lambda: running.rounds >= 2, 120)
        assert len(READS) > 0
    finally:
        warmup.stop_all()
    assert not running.thread.is_alive()


def _wait(done: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
