"""The dashboard's warm-up: every page's reads made before a viewer asks for them.

The read cache (gpumeter/views/cache.py) removes repeated reads, not first ones: after the server starts, and
after every metering run that changes the stored files (the nightly run, the hourly today-so-far run), the
first viewers would wait for every page's reads at once. A background thread of the server makes them
instead: the reads of every page, with the filters and widgets as a page view opens them, for each viewer
scope the config names (finance first), one scope after another. Then again every
GPUMETER_DASHBOARD_WARMUP_S seconds: reads whose files did not change are cache hits, so a round costs one
listing of each table unless the data changed. It stops filling the cache at half its memory bound, so that
it never pushes out what viewers read. The reads are the pages' own: each page of the scope's navigation
(navigation.py) names them beside its code (its screen's `warm`), through gpumeter/views/scoped.py, scoped the
same way: a tenant scope's reads hold its own rows only, and only a viewer of that scope is handed them.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from gpumeter.billing.invoices import Period
from gpumeter.config import Config, load_config
from gpumeter.dashboard import navigation
from gpumeter.dashboard.common import Context
from gpumeter.storage.warehouse import Warehouse
from gpumeter.views.cache import READS, ReadCache
from gpumeter.views.filters import Filters, Options
from gpumeter.views.identity import Viewer, local_viewer
from gpumeter.views.scoped import Views

WARMUP_ENV = "GPUMETER_DASHBOARD_WARMUP_S"
DEFAULT_WARMUP_S = 15.0
ROLE_ORDER = ("finance", "ops", "tenant")
log = logging.getLogger(__name__)


def interval_from_env() -> float:
    """Seconds between warm-up rounds: GPUMETER_DASHBOARD_WARMUP_S (0 turns the warm-up off)."""
    text = os.environ.get(WARMUP_ENV, "").strip()
    try:
        return max(0.0, float(text)) if text else DEFAULT_WARMUP_S
    except ValueError:
        raise ValueError(
            f"{WARMUP_ENV}={text!r}: give a number of seconds between warm-up rounds (0 turns it off)"
        ) from None


def periods(views: Views, options: Options) -> list[str]:
    """The periods a viewer can pick (`options`, the viewer's), newest first (a page view opens on the first):
    every stored period, and a month whose only figures so far are today's provisional ones."""
    return sorted(set(options.periods) | set(views.provisional_periods()), reverse=True)


def scopes(config: Config, signed_in: bool) -> list[Viewer]:
    """The viewer scopes to warm, finance first: with sign-in configured, every role of `dashboard.roles`;
    without, the local viewer (GPUMETER_DASHBOARD_VIEWER)."""
    if not signed_in:
        return [local_viewer(config)]
    found = {(role.role, role.tenant if role.role == "tenant" else None) for role in config.dashboard.roles}
    ordered = sorted(found, key=lambda scope: (ROLE_ORDER.index(scope[0]), scope[1] or ""))
    return [Viewer(role, tenant, identity="warm-up") for role, tenant in ordered]


def page_reads(views: Views, viewer: Viewer, filters: Filters) -> None:
    """The reads of a view of every page of the viewer's navigation (gpumeter/dashboard/navigation.py), each
    page's own (its screen's `warm`), widgets at their defaults, with the config as the viewer may read it."""
    ctx = Context(views.config_for(viewer), views, viewer, filters)
    for page in navigation.pages(viewer.role):
        page.screen.warm(ctx)


def warm(
    config: Config,
    viewers: list[Viewer],
    cache: ReadCache = READS,
    stop: threading.Event | None = None,
) -> list[Viewer]:
    """One round: every page's reads of each viewer scope in turn, on the newest period. Returns the scopes
    it warmed; it stops before a scope once the cache holds half its bound, or when `stop` is set."""
    warmed: list[Viewer] = []
    warehouse = Warehouse.of(config.warehouse)
    for viewer in viewers:
        if (stop is not None and stop.is_set()) or cache.used_bytes * 2 >= cache.max_bytes:
            break
        views = Views(warehouse, config, cache=cache, snapshot=True)  # one page view's version of the files
        try:
            choices = periods(views, views.options(viewer))
            if choices:
                page_reads(views, viewer, Filters(Period.parse(choices[0])))
                warmed.append(viewer)
        finally:
            views.close()
    return warmed


class WarmUp:
    """The server's warm-up thread: a round at once, then one every `interval` seconds, until `stop()`."""

    def __init__(self, config_path: Path, signed_in: bool, interval: float, cache: ReadCache = READS) -> None:
        self.config_path = config_path
        self.signed_in = signed_in
        self.interval = interval
        self.cache = cache
        self.rounds = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="gpumeter-dashboard-warmup", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                # Read each round: a config edited while the server runs is what page views read too.
                config = load_config(self.config_path)
                warm(config, scopes(config, self.signed_in), self.cache, self._stop)
            except Exception:  # a failed round must never stop the server; the page views say what is wrong
                log.warning(
                    "dashboard warm-up round failed; the next one runs in %g s", self.interval, exc_info=True
                )
            self.rounds += 1
            self._stop.wait(self.interval)

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        self.thread.join(timeout)


_RUNNING: dict[str, WarmUp] = {}
_LOCK = threading.Lock()


def start(config_path: Path, signed_in: bool) -> WarmUp | None:
    """The warm-up of this server for a config, started on the first page view (each script run calls this;
    the first starts it). None when it is off (GPUMETER_DASHBOARD_WARMUP_S=0, or the cache is off)."""
    seconds = interval_from_env()
    if seconds <= 0 or READS.max_bytes <= 0:
        return None
    key = f"{config_path.resolve()}|{signed_in}"
    with _LOCK:
        running = _RUNNING.get(key)
        if running is None or not running.thread.is_alive():
            # Imported here, in the script's thread, before the warm-up's exists: reads import pandas lazily
            # (DuckDB's and polars' conversions), and two threads importing it at once can see it half made.
            import pandas  # noqa: F401

            running = _RUNNING[key] = WarmUp(config_path, signed_in, seconds)
            running.thread.start()
        return running


def stop_all() -> None:
    """Stop every warm-up thread of this process (tests)."""
    with _LOCK:
        running = list(_RUNNING.values())
        _RUNNING.clear()
    for warm_up in running:
        warm_up.stop(timeout=60)
