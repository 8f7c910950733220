"""Sign-in end to end: a real OpenID Connect provider (oidc-provider-mock, its own server process) and the real
Streamlit server, both on 127.0.0.1, driven by a real headless Chromium (the Debian package, through playwright;
no browser download). The dashboard's `.streamlit/secrets.toml` [auth] points at the provider, as in production;
the roles come from the config's `dashboard.roles`, matched on the ID token's email and groups claims.

- a finance login sees every tenant (the Charges table, read back through its download);
- a tenant login (by its group) sees its own rows only, on its pages and in its downloads;
- a login no role matches sees whom to ask and a sign-out button, nothing else;
- signing out ends the session: the provider's end-session page, then the sign-in screen, and no data.
Screenshots of each step: .gpumeter/test-artifacts/dashboard-oidc/."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, expect, sync_playwright
from pypdf import PdfReader

from gpumeter.config import IDLE, UNALLOCATED, Config, load_config
from gpumeter.dashboard import APP
from tests.test_views import build_metered

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / ".gpumeter" / "test-artifacts" / "dashboard-oidc"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
WAIT_MS = 120_000  # a first page run reads the warehouse; a slow machine takes its time

# A dev dependency (pyproject.toml): missing, it is an error, never a skip.
assert importlib.util.find_spec("oidc_provider_mock"), "pip install oidc-provider-mock (a dev dependency)"
if not Path(CHROMIUM).exists():  # .ci/run installs it (and tests/conftest.py refuses a CI run without it)
    pytest.skip("the Debian chromium package is not installed", allow_module_level=True)

# The tenant navigation: url path (the first page is served at "/") -> the page title's start, and the
# downloads the page has for the tenant `serving` of the demo (each clicked, with any other the page has).
TENANT_PAGES = {
    "": ("Usage and efficiency of serving", ["Download usage_by_model (CSV)"]),
    "charges": ("What you owe", ["Download tenant_charges (CSV)", "Download monthly_charges (CSV)"]),
    "budgets": ("Budgets", ["Download budgets (CSV)"]),
    "invoices": (
        "Invoices",
        [
            "Invoice lines (CSV)",
            "FOCUS 1.2 (CSV)",
            "serving: lines (CSV)",
            "serving: invoice (HTML)",
            "serving: invoice (PDF)",
        ],
    ),
    "idle": ("Allocated but idle", ["Download idle_holders (CSV)"]),
    "rightsizing": ("MIG right-sizing", []),  # none of its whole GPUs would fit a smaller profile
}
# Who may sign in, as the provider knows them (their ID-token claims), and the roles the config gives them.
FINANCE = {"sub": "fiona@finance.example.com", "email": "fiona@finance.example.com", "name": "Fiona",
           "groups": ["staff"]}  # fmt: skip
SERVING = {"sub": "sam@example.com", "email": "sam@example.com", "name": "Sam", "groups": ["team-serving"]}
NOBODY = {
    "sub": "mallory@example.com",
    "email": "mallory@example.com",
    "name": "Mallory",
    "groups": ["interns"],
}
ROLES = """
dashboard:
  email_claim: email
  group_claim: groups
  roles:
    - {role: finance, emails: ["*@finance.example.com"]}
    - {role: tenant, tenant: serving, groups: [team-serving]}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_up(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Poll `url` until it answers 200 (a server starting up has no other signal to wait on)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            if process.poll() is not None:
                raise AssertionError(f"{process.args} exited: {log.read_text()[-3000:]}") from None
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer in 120 s: {log.read_text()[-3000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=20)


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = build_metered(tmp_path_factory.mktemp("oidc"))
    with path.open("a", encoding="utf-8") as config:
        config.write(ROLES)
    load_config(path)  # the roles are valid config
    return path


@pytest.fixture(scope="module")
def config(config_path: Path) -> Config:
    return load_config(config_path)


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The OpenID provider on 127.0.0.1, its users registered with their claims (its login form then offers
    each as a one-click choice). Any client id and secret is accepted, as a registered client's would be."""
    port = free_port()
    log = tmp_path_factory.mktemp("provider") / "provider.log"
    users = [arg for user in (FINANCE, SERVING, NOBODY) for arg in ("--user-claims", json.dumps(user))]
    command = [sys.executable, "-m", "oidc_provider_mock", "--host", "127.0.0.1", "--port", str(port), *users]
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_up(f"{url}/.well-known/openid-configuration", process, log)
        yield url
    finally:
        stop(process)


@pytest.fixture(scope="module")
def dashboard(config_path: Path, provider: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`streamlit run` of the dashboard in a folder of its own (its working directory, and its home), whose
    .streamlit/secrets.toml has the [auth] section a deployment has, pointing at the provider."""
    port = free_port()
    home = tmp_path_factory.mktemp("dashboard-home")
    (home / ".streamlit").mkdir()
    (home / ".streamlit" / "secrets.toml").write_text(
        f"""[auth]
redirect_uri = "http://127.0.0.1:{port}/oauth2callback"
cookie_secret = "{secrets.token_urlsafe(32)}"
client_id = "gpumeter-dashboard"
client_secret = "{secrets.token_urlsafe(16)}"
server_metadata_url = "{provider}/.well-known/openid-configuration"
client_kwargs = {{ scope = "openid profile email" }}
""",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k != "GPUMETER_DASHBOARD_VIEWER"}  # no local-mode viewer
    env |= {"GPUMETER_CONFIG": str(config_path), "HOME": str(home)}
    streamlit = Path(sys.executable).parent / "streamlit"
    command = [str(streamlit), "run", str(APP), "--server.address", "127.0.0.1", "--server.port", str(port),
               "--server.headless", "true", "--browser.gatherUsageStats", "false",
               "--server.fileWatcherType", "none"]  # fmt: skip
    log = home / "streamlit.log"
    with log.open("w") as out:
        process = subprocess.Popen(command, env=env, cwd=home, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_up(f"{url}/_stcore/health", process, log)
        yield url
    finally:
        stop(process)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser profile per test: no cookie of an earlier login."""
    context = browser.new_context(viewport={"width": 1440, "height": 1600}, accept_downloads=True)
    try:
        yield context.new_page()
    finally:
        context.close()


def shot(page: Page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def sign_in_screen(page: Page) -> None:
    """The app's sign-in screen, and nothing of the data."""
    expect(page.get_by_role("button", name="Sign in")).to_be_visible(timeout=WAIT_MS)
    expect(page.get_by_text("Sign in to see GPU metering and chargeback.")).to_be_visible()
    assert_no_data(page)


def run_over(page: Page) -> None:
    """The page's script run has ended (Streamlit's marker on the app's root): what it shows is all it shows."""
    expect(page.locator("[data-testid=stApp]")).to_have_attribute(
        "data-test-script-state", "notRunning", timeout=WAIT_MS
    )


def assert_no_data(page: Page) -> None:
    run_over(page)
    for selector in ("[data-testid=stDataFrame]", "[data-testid=stMetric]", "[data-testid=stPlotlyChart]",
                     "[data-testid=stDownloadButton]", "[data-testid=stSidebarNav]",
                     "[data-testid=stSelectbox]"):  # fmt: skip
        expect(page.locator(selector)).to_have_count(0)
    expect(page.get_by_text("Viewing as")).to_have_count(0)


def sign_in(page: Page, dashboard: str, provider: str, user: dict[str, object]) -> None:
    """From the app's sign-in screen through the provider's login form (choosing the registered user) and
    back through /oauth2callback to the app."""
    page.goto(dashboard)
    sign_in_screen(page)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{provider}/oauth2/authorize**", timeout=WAIT_MS)
    page.get_by_role("button", name=str(user["sub"]), exact=True).click()
    page.wait_for_url(f"{dashboard}/**", timeout=WAIT_MS)


def sign_out(page: Page, dashboard: str, provider: str) -> None:
    """The app's sign-out button, then the provider's end-session page, then back to the app signed out."""
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(f"{provider}/oauth2/end_session**", timeout=WAIT_MS)
    page.get_by_role("button", name="End session").click()
    page.wait_for_url(f"{dashboard}/**", timeout=WAIT_MS)
    sign_in_screen(page)


def open_page(page: Page, dashboard: str, path: str, title: str, shows: Sequence[Locator] = ()) -> None:
    """Open one page of the app (a new session, the login cookie read again) and wait until it is drawn: its
    title, the end of its script run (Streamlit's marker on the app's root), and what it `shows` (the browser
    may draw the last elements a moment after the run ends)."""
    page.goto(f"{dashboard}/{path}")
    expect(page.locator("h1").filter(has_text=title).first).to_be_visible(timeout=WAIT_MS)
    run_over(page)
    for element in shows:
        expect(element).to_be_visible(timeout=WAIT_MS)


@dataclass(frozen=True)
class Download:
    file_name: str
    data: bytes

    @property
    def text(self) -> str:
        """What a reader of the file sees: a PDF's text (its streams are compressed), else the bytes as text."""
        if self.data.startswith(b"%PDF"):
            reader = PdfReader(io.BytesIO(self.data))
            return "\n".join(page.extract_text() for page in reader.pages) + f"\n{reader.metadata}"
        return self.data.decode("utf-8")

    def column(self, name: str) -> set[str]:
        return {row[name] for row in csv.DictReader(io.StringIO(self.text))}


def save(page: Page, button: Locator) -> Download:
    """Click a download button as a person would; what the browser saves (a file made on click included)."""
    expect(button).to_be_visible(timeout=WAIT_MS)
    with page.expect_download(timeout=WAIT_MS) as started:
        button.click()
    saved = started.value
    return Download(saved.suggested_filename, Path(saved.path()).read_bytes())


def download(page: Page, label: str) -> Download:
    return save(page, page.get_by_role("button", name=label, exact=True))


def download_every_file(page: Page) -> list[Download]:
    """Every download button of the page, each clicked."""
    buttons = page.locator("[data-testid=stDownloadButton] button")
    return [save(page, buttons.nth(index)) for index in range(buttons.count())]


def test_finance_sees_every_tenant_and_sign_out_ends_the_session(
    page: Page, dashboard: str, provider: str, config: Config
) -> None:
    sign_in(page, dashboard, provider, FINANCE)
    expect(page.locator("h1").filter(has_text="Charges")).to_be_visible(timeout=WAIT_MS)
    expect(page.get_by_text("Viewing as finance (fiona@finance.example.com)")).to_be_visible()
    expect(page.get_by_text("Local mode")).to_have_count(0)  # signed in, not the unauthenticated fallback
    charges = download(page, "Download tenant_charges (CSV)")
    assert charges.column("tenant") == {t.name for t in config.tenants} | {IDLE, UNALLOCATED}
    assert charges.column("cost_center") >= {t.cost_center for t in config.tenants}
    shot(page, "finance-charges")
    open_page(page, dashboard, "budgets", "Budgets")  # the login holds across pages (its cookie)
    assert download(page, "Download budgets (CSV)").column("tenant") == {t.name for t in config.tenants}

    sign_out(page, dashboard, provider)
    shot(page, "finance-signed-out")
    # The session is over, not just the page: a page opened afterwards asks to sign in again.
    page.goto(f"{dashboard}/budgets")
    sign_in_screen(page)
    assert not [c for c in page.context.cookies() if c["name"].startswith("_streamlit_user")]


def test_a_tenant_sees_only_its_own_rows_and_downloads(
    page: Page, dashboard: str, provider: str, config: Config
) -> None:
    others = [t for t in config.tenants if t.name != "serving"]
    hidden = [t.name for t in others] + [t.cost_center or "" for t in others] + [IDLE, UNALLOCATED]
    sign_in(page, dashboard, provider, SERVING)  # by its group claim: team-serving
    expect(page.locator("h1").filter(has_text="Usage and efficiency of serving")).to_be_visible(
        timeout=WAIT_MS
    )
    expect(page.get_by_text("Viewing as tenant serving (sam@example.com)")).to_be_visible()
    for label in ("Capacity", "MIG layout", "Data quality"):  # the pool-wide pages are not in its navigation
        expect(page.get_by_role("link", name=label)).to_have_count(0)
    files: dict[str, list[Download]] = {}
    for path, (title, labels) in TENANT_PAGES.items():  # every page of its navigation, every download
        shows = [page.get_by_role("button", name=label, exact=True) for label in labels] or [
            page.get_by_text("No whole GPU in scope would fit a smaller MIG profile.")
        ]
        open_page(page, dashboard, path, title, shows)
        text = page.locator("body").inner_text()
        assert not [name for name in hidden if name in text], path
        files[path] = download_every_file(page)
        shot(page, f"tenant-{path or 'home'}")
    assert len(files["charges"]) >= 2 and len(files["budgets"]) >= 1
    assert len(files["invoices"]) >= 5  # all its lines, FOCUS, and its own lines and invoice documents
    for saved in (d for on_page in files.values() for d in on_page):
        assert not [name for name in hidden if name in saved.text], saved.file_name
        if saved.file_name.endswith(".csv") and "tenant" in saved.text.splitlines()[0].split(","):
            assert saved.column("tenant") == {"serving"}, saved.file_name
        if saved.file_name.endswith((".html", ".pdf")):  # its own invoice names it: the search sees names
            assert "serving" in saved.text and "CC-2100" in saved.text, saved.file_name
    sign_out(page, dashboard, provider)


def test_a_login_no_role_matches_sees_whom_to_ask_and_nothing_else(
    page: Page, dashboard: str, provider: str
) -> None:
    sign_in(page, dashboard, provider, NOBODY)
    message = page.get_by_text("has no gpumeter dashboard role")
    expect(message).to_be_visible(timeout=WAIT_MS)
    expect(message).to_contain_text("mallory@example.com")
    expect(message).to_contain_text("Ask the platform team")
    # All it can do: sign out.
    expect(page.locator("[data-testid=stMain]").get_by_role("button")).to_have_text(["Sign out"])
    assert_no_data(page)
    shot(page, "no-role")
    sign_out(page, dashboard, provider)
