"""End to end in a real headless Chromium (the Debian package, driven by playwright; no browser download):
`streamlit run` on 127.0.0.1, every page loaded while a real `meter_days` rewrites the same warehouse, no
error or exception shown, a screenshot of each page kept under .gpumeter/test-artifacts/dashboard/."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumeter.dashboard import APP as DASHBOARD_APP
from gpumeter.pipelines.launch import meter_days
from tests.test_views import DAYS, build_metered

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / ".gpumeter" / "test-artifacts" / "dashboard"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# url path -> the page title's start; the first page of a navigation is served at "/".
FINANCE = {
    "": "Charges",
    "budgets": "Budgets",
    "invoices": "Invoices",
    "capacity": "Capacity",
    "mig": "MIG layout",
    "idle": "Allocated but idle",
    "rightsizing": "MIG right-sizing",
    "data-quality": "Data quality",
    "usage": "Usage",
}
TENANT = {
    "": "Usage",
    "charges": "What you owe",
    "budgets": "Budgets",
    "invoices": "Invoices",
    "idle": "Allocated but idle",
    "rightsizing": "MIG right-sizing",
}

# Drawn: the script run is over (no status widget), no element still a skeleton, every table on its canvas.
PAGE_DRAWN = """() => !document.querySelector('[data-testid=stStatusWidget]')
    && !document.querySelector('[data-testid=stSkeleton]')
    && [...document.querySelectorAll('[data-testid=stDataFrame]')].every(t => t.querySelector('canvas'))"""

playwright = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():  # .ci/run installs it; locally: apt-get install chromium chromium-driver
    pytest.skip("the Debian chromium package is not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_metered(tmp_path_factory.mktemp("browser"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(config_path: Path, viewer: str, log: Path) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "GPUMETER_CONFIG": str(config_path), "GPUMETER_DASHBOARD_VIEWER": viewer}
    streamlit = Path(sys.executable).parent / "streamlit"
    command = [str(streamlit), "run", str(DASHBOARD_APP), "--server.address", "127.0.0.1",
               "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false",
               "--server.fileWatcherType", "none"]  # fmt: skip
    with open(log, "w") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                if server.poll() is not None:
                    raise AssertionError(f"streamlit exited: {log.read_text()[-2000:]}") from None
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def visit_every_page(url: str, pages: dict[str, str], shot_prefix: str) -> list[str]:
    """Load each page, wait for its title and charts, screenshot it; return what went wrong."""
    problems = []
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 2200})
        for path, title in pages.items():
            page.goto(f"{url}/{path}")
            heading = page.locator("h1").filter(has_text=title)
            heading.first.wait_for(timeout=120_000)
            page.wait_for_load_state("networkidle")
            page.locator("[data-testid=stSpinner]").first.wait_for(state="detached", timeout=120_000)
            # Tables draw on a canvas after their data arrives, plotly after its element: wait for both.
            page.wait_for_function(PAGE_DRAWN, timeout=120_000)
            page.wait_for_timeout(2000)
            name = path or "home"
            page.screenshot(path=str(ARTIFACTS / f"{shot_prefix}-{name}.png"), full_page=True)
            for selector, what in (
                ("[data-testid=stException]", "exception"),
                ("[data-testid=stAlertContentError]", "error"),
                ("text=Page not found", "page not found"),
            ):
                if page.locator(selector).count():
                    problems.append(f"{name}: {what}: {page.locator(selector).first.inner_text()[:300]}")
        browser.close()
    return problems


def test_every_page_loads_in_chromium_while_the_pipeline_writes(config_path: Path, tmp_path: Path) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    errors: list[BaseException] = []
    writes = 0

    def rewrite_days() -> None:  # R15: re-running days replaces their files atomically under the reader
        nonlocal writes
        try:
            while not done.is_set() and writes < 3:
                meter_days(str(config_path), DAYS)
                writes += 1
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)

    done = threading.Event()
    writer = threading.Thread(target=rewrite_days, daemon=True)
    writer.start()
    try:
        for viewer, pages, prefix in (("finance", FINANCE, "finance"), ("tenant:serving", TENANT, "tenant")):
            for url in serve(config_path, viewer, tmp_path / f"streamlit-{prefix}.log"):
                assert visit_every_page(url, pages, prefix) == []
    finally:
        done.set()
        writer.join(timeout=600)
    assert errors == []
    assert writes >= 1, "the pipeline did not write while the pages were read"
    assert {p.name for p in ARTIFACTS.glob("*.png")} >= {f"finance-{p or 'home'}.png" for p in FINANCE}
