"""No page of a tenant viewer names another tenant: every page of the tenant navigation, for every tenant, through
Streamlit's AppTest on a warehouse metered by the real Dagster jobs. Everything a page puts out is collected (every
element's text and figure spec, every table cell, every download's bytes) and searched for the other tenants'
names, cost centers and budget figures, and for the `__idle__` / `__unallocated__` buckets. The same search
finds them all on finance's pages and the tenant's own on its pages, so it is known to see what it looks for."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import pytest
from pypdf import PdfReader
from streamlit.runtime.media_file_manager import MediaFileManager
from streamlit.testing.v1 import AppTest

from gpumeter.config import IDLE, UNALLOCATED, Config, Tenant, load_config
from gpumeter.dashboard import APP, navigation
from gpumeter.views.cache import READS
from tests.test_views import build_metered

pytestmark = pytest.mark.slow


# The screen files of a navigation (gpumeter/dashboard/navigation.py): a page added to the app is a page tested here.
TENANT_PAGES = [page.name for page in navigation.pages("tenant")]
EVERY_PAGE = list(dict.fromkeys(page.name for page in navigation.pages("finance") + navigation.pages("ops")))


@dataclass
class Download:
    file_name: str | None
    data: bytes

    @property
    def text(self) -> str:
        """What a reader of the file sees: a PDF's text (its streams are compressed), else the bytes as text."""
        if self.data.startswith(b"%PDF"):
            reader = PdfReader(io.BytesIO(self.data))
            return "\n".join(page.extract_text() for page in reader.pages) + f"\n{reader.metadata}"
        return self.data.decode("utf-8", "replace")


@dataclass
class Recorder:
    """Every payload the app hands to Streamlit's media file manager for a download, in call order."""

    downloads: list[Download] = field(default_factory=list)


RECORDER = Recorder()


def _as_bytes(data: bytes | str | BinaryIO | TextIO | io.RawIOBase) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, bytes):
        return data
    read = data.read()
    return read.encode("utf-8") if isinstance(read, str) else bytes(read or b"")


class RecordingMediaFileManager(MediaFileManager):
    """Streamlit's own manager, keeping a copy of each download's bytes: AppTest drops its media store after a
    run. A download made on click (a callable) is made here at once, so that it is searched too."""

    def add(
        self,
        path_or_data: bytes | str,
        mimetype: str,
        coordinates: str,
        file_name: str | None = None,
        is_for_static_download: bool = False,
    ) -> str:
        if is_for_static_download:
            data = path_or_data if isinstance(path_or_data, bytes) else Path(path_or_data).read_bytes()
            RECORDER.downloads.append(Download(file_name, data))
        return super().add(path_or_data, mimetype, coordinates, file_name, is_for_static_download)

    def add_deferred(
        self,
        data_callable: Callable[[], Any],
        mimetype: str | None,
        coordinates: str,
        file_name: str | None = None,
        *,
        element_id: str = "",
    ) -> str:
        data = _as_bytes(data_callable())
        RECORDER.downloads.append(Download(file_name, data))
        return super().add_deferred(lambda: data, mimetype, coordinates, file_name, element_id=element_id)


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_metered(tmp_path_factory.mktemp("scoping"))


@pytest.fixture(scope="module")
def config(config_path: Path) -> Config:
    return load_config(config_path)


@dataclass
class Page:
    """What one page put out: its elements as text, its table cells, its downloads."""

    name: str
    texts: list[str]
    download_buttons: int
    downloads: list[Download]

    def everything(self) -> Iterator[tuple[str, str]]:
        for index, text in enumerate(self.texts):
            yield f"{self.name}: element {index}", text
        for download in self.downloads:
            yield f"{self.name}: download {download.file_name}", download.text


def _walk(node: Any) -> Iterator[Any]:
    yield node
    children = getattr(node, "children", None)
    if isinstance(children, dict):
        for child in children.values():
            yield from _walk(child)


def collect(at: AppTest, name: str) -> Page:
    """Every element of the page, sidebar included: its proto as text (titles, markdown, metrics, alerts,
    widget labels and options, chart specs with their data, download labels and file names), and each table's
    cells, read back from its Arrow data."""
    texts: list[str] = []
    buttons = 0
    for node in _walk(at._tree):
        if getattr(node, "type", "") == "arrow_data_frame":
            frame = node.value
            texts.append(frame.to_csv(index=False))
            continue
        if getattr(node, "type", "") == "download_button":
            buttons += 1
        proto = getattr(node, "proto", None)
        if proto is not None:
            texts.append(str(proto))
    return Page(name, texts, buttons, list(RECORDER.downloads))


def word(text: str) -> re.Pattern[str]:
    """A tenant name or cost center as a whole token: `serving`, not the `serving` in `ml-serving-0`."""
    return re.compile(rf"(?<![\w-]){re.escape(text)}(?![\w-])")


def figure(amount: float) -> re.Pattern[str]:
    """A budget figure however a page writes it: 12000, 12000.0, 12,000.00, not 112000 nor 12000.5."""
    whole = int(amount)
    assert whole == amount, "the demo's budgets are whole amounts"
    forms = "|".join(re.escape(f) for f in (f"{whole:,}", str(whole)))
    return re.compile(rf"(?<![\d.])(?<!\d,)(?:{forms})(?:\.0+)?(?![\d]|\.\d|,\d{{3}}(?!\d))")


def marks(tenant: Tenant) -> dict[str, re.Pattern[str]]:
    """What identifies a tenant's config entry on a page."""
    found = {f"name {tenant.name}": word(tenant.name)}
    if tenant.cost_center:
        found[f"cost center {tenant.cost_center}"] = word(tenant.cost_center)
    if tenant.monthly_budget is not None:
        found[f"budget {tenant.monthly_budget:,.0f}"] = figure(tenant.monthly_budget)
    return found


def found_in(pages: list[Page], patterns: dict[str, re.Pattern[str]]) -> list[str]:
    return [
        f"{what} in {where}: …{text[max(0, m.start() - 80) : m.end() + 80]}…"
        for page in pages
        for where, text in page.everything()
        for what, pattern in patterns.items()
        if (m := pattern.search(text))
    ]


def visit(config_path: Path, monkeypatch: pytest.MonkeyPatch, viewer: str, pages: list[str]) -> list[Page]:
    monkeypatch.setenv("GPUMETER_CONFIG", str(config_path))
    monkeypatch.setenv("GPUMETER_DASHBOARD_VIEWER", viewer)
    monkeypatch.setattr("streamlit.testing.v1.app_test.MediaFileManager", RecordingMediaFileManager)
    at = AppTest.from_file(str(APP), default_timeout=180).run()
    assert not at.exception, [e.value for e in at.exception]
    shown = []
    for name in pages:
        RECORDER.downloads.clear()
        at.switch_page(f"screens/{name}.py").run()
        assert not at.exception, (name, [e.value for e in at.exception])
        assert not at.error, (name, [e.value for e in at.error])
        page = collect(at, name)
        # Every download button's payload was caught (each page run renders each button once).
        assert len(page.downloads) == page.download_buttons, name
        shown.append(page)
    return shown


@pytest.mark.parametrize("tenant", ["research", "evaluation", "ml-training", "serving"])
def test_no_page_or_download_of_a_tenant_names_another_tenant(
    config_path: Path, config: Config, monkeypatch: pytest.MonkeyPatch, tenant: str
) -> None:
    assert tenant in [t.name for t in config.tenants]
    pages = visit(config_path, monkeypatch, f"tenant:{tenant}", TENANT_PAGES)
    assert [p.name for p in pages] == TENANT_PAGES
    assert sum(p.download_buttons for p in pages) >= len(TENANT_PAGES)  # tables and invoices to download
    others: dict[str, re.Pattern[str]] = {b: word(b) for b in (IDLE, UNALLOCATED)}
    for other in config.tenants:
        if other.name != tenant:
            others |= marks(other)
    assert found_in(pages, others) == []
    # The search sees what it looks for: the tenant's own name, cost center and budget are on its pages,
    # and its name and cost center in each of its invoice documents (HTML, and PDF where the page has one).
    own = next(t for t in config.tenants if t.name == tenant)
    budget_page = [p for p in pages if p.name == "budgets"]
    assert len(found_in(budget_page, marks(own))) >= len(marks(own))
    documents = [d for p in pages for d in p.downloads if (d.file_name or "").endswith((".html", ".pdf"))]
    assert documents
    for document in documents:
        for what in (own.name, own.cost_center or ""):
            assert word(what).search(document.text), (document.file_name, what)


def test_finance_pages_name_every_tenant(
    config_path: Path, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: the same search over finance's pages finds every tenant's name, cost center and budget."""
    pages = visit(config_path, monkeypatch, "finance", ["charges", "budgets", "invoices"])
    for tenant in config.tenants:
        for what, pattern in marks(tenant).items():
            assert found_in(pages, {what: pattern}), what


def test_a_warm_cache_hands_no_tenant_anothers_rows(
    config_path: Path, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process-wide read cache (gpumeter/views/cache.py) filled by finance and by one tenant, then every
    page of another tenant read through it: the other tenants are still nowhere on its pages or downloads,
    and the cache did serve that tenant (its second visit is all hits)."""
    READS.clear()
    visit(config_path, monkeypatch, "finance", EVERY_PAGE)
    visit(config_path, monkeypatch, "tenant:serving", TENANT_PAGES)
    first = visit(config_path, monkeypatch, "tenant:research", TENANT_PAGES)
    misses = READS.misses
    second = visit(config_path, monkeypatch, "tenant:research", TENANT_PAGES)
    assert READS.misses == misses  # served from the cache
    others: dict[str, re.Pattern[str]] = {b: word(b) for b in (IDLE, UNALLOCATED)}
    for other in config.tenants:
        if other.name != "research":
            others |= marks(other)
    assert found_in(first + second, others) == []
