"""One amount per tenant everywhere, on the demo month as `gpumeter demo` makes it: what the demo prints, the
invoice files (lines CSV, FOCUS, HTML, PDF read back) and the dashboard read in a real Chromium (finance's
Charges and Budgets pages, a tenant's own page) say the same amount to the cent for every tenant and bucket.
The truth is the stored daily mart's exact units, each invoice line rounded once by hand."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from pypdf import PdfReader

from gpumeter.config import IDLE, UNALLOCATED, load_config
from gpumeter.storage.paths import MARTS, TENANT_DAILY_COST
from gpumeter.storage.warehouse import Warehouse
from tests.builders import invoiced_by_hand
from tests.test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS, PAGE_DRAWN, playwright, serve

pytestmark = pytest.mark.slow

PERIOD = "2026-11"
# How a page and the summary name the buckets (finance's words, docs/glossary.md).
SHOWN = {IDLE: "Idle capacity (not billed to a tenant)", UNALLOCATED: "Unmapped workloads"}
AMOUNT = re.compile(r"^(-?[\d,]+\.\d{2}) USD$")


def money(text: str) -> Decimal:
    found = AMOUNT.match(text.strip())
    assert found, f"not an amount in USD: {text!r}"
    return Decimal(found.group(1).replace(",", ""))


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The demo run by its command, as a user runs it (two days, to keep it short); its printed summary."""
    out = tmp_path_factory.mktemp("demo")
    gpumeter = Path(sys.executable).parent / "gpumeter"
    run = subprocess.run(
        [str(gpumeter), "demo", "--out", str(out), "--days", "2"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return out, run.stdout


@pytest.fixture(scope="module")
def truth(demo: tuple[Path, str]) -> dict[str, Decimal]:
    config = load_config(demo[0] / "config.yaml")
    root = Warehouse.at(config.warehouse.path).root / MARTS / TENANT_DAILY_COST
    daily = pl.read_parquet(sorted(root.glob("**/data.parquet")), hive_partitioning=False)
    by_hand = invoiced_by_hand(daily, config.minor_unit)
    assert set(by_hand) >= {IDLE, UNALLOCATED, "ml-training", "serving", "research", "evaluation"}
    return by_hand


def test_the_printed_summary_says_the_invoices_amounts(
    demo: tuple[Path, str], truth: dict[str, Decimal]
) -> None:
    printed = demo[1]
    charges = printed[printed.index("Charges") : printed.index("pool cost")]
    rows = {}
    for line in charges.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) >= 5 and AMOUNT.match(cells[4]):
            rows[cells[0]] = money(cells[4])
    assert rows == {SHOWN.get(t, t): amount for t, amount in truth.items()}


def test_each_invoice_file_says_the_same_amount(demo: tuple[Path, str], truth: dict[str, Decimal]) -> None:
    invoices = demo[0] / "invoices"
    with (invoices / f"invoice_lines_{PERIOD}_all.csv").open(newline="", encoding="utf-8") as fh:
        every_line = list(csv.DictReader(fh))
    in_lines: dict[str, Decimal] = {}
    for row in every_line:
        in_lines[row["tenant"]] = in_lines.get(row["tenant"], Decimal(0)) + Decimal(row["amount"])
    assert in_lines == truth
    with (invoices / f"invoice_lines_{PERIOD}_all.focus.csv").open(newline="", encoding="utf-8") as fh:
        in_focus: dict[str, Decimal] = {}
        for row in csv.DictReader(fh):
            in_focus[row["SubAccountId"]] = in_focus.get(row["SubAccountId"], Decimal(0)) + Decimal(
                row["BilledCost"]
            )
    assert in_focus == truth
    tenants = [t for t in truth if t not in (IDLE, UNALLOCATED)]
    for tenant in tenants:
        with (invoices / f"invoice_lines_{PERIOD}_{tenant}.csv").open(newline="", encoding="utf-8") as fh:
            assert sum((Decimal(r["amount"]) for r in csv.DictReader(fh)), Decimal(0)) == truth[tenant]
        due = f"{truth[tenant]:,} USD"
        html = (invoices / f"tenant_invoice_{PERIOD}_{tenant}.html").read_text(encoding="utf-8")
        total = re.search(r"<td>Total due[^<]*</td><td[^>]*>([^<]+)</td>", html)
        assert total and total.group(1) == due, tenant
        pdf = "\n".join(
            p.extract_text() for p in PdfReader(invoices / f"tenant_invoice_{PERIOD}_{tenant}.pdf").pages
        )
        total = re.search(r"^Total due \(.*\) (\S+ USD)$", pdf, re.MULTILINE)
        assert total and total.group(1) == due, (tenant, pdf[-500:])


def _cells(page: object, table: int = 0) -> list[list[str]]:
    """A table's rows as its accessible grid gives them (the canvas draws what this holds)."""
    grid = page.locator("[data-testid=stDataFrame]").nth(table)  # type: ignore[attr-defined]
    grid.locator("table tbody tr").first.wait_for(state="attached", timeout=60_000)  # after the canvas
    rows = grid.locator("table tr").all()
    return [[(c.text_content() or "").strip() for c in row.locator("th, td").all()] for row in rows]


def _open(page: object, url: str, title: str) -> None:
    page.goto(url)  # type: ignore[attr-defined]
    page.locator("h1").filter(has_text=title).first.wait_for(timeout=120_000)  # type: ignore[attr-defined]
    page.wait_for_load_state("networkidle")  # type: ignore[attr-defined]
    page.wait_for_function(PAGE_DRAWN, timeout=120_000)  # type: ignore[attr-defined]


def _column(rows: list[list[str]], header: str) -> dict[str, str]:
    at = rows[0].index(header)
    return {row[0]: row[at] for row in rows[1:]}


def test_the_dashboard_in_chromium_says_the_invoices_amounts(
    demo: tuple[Path, str], truth: dict[str, Decimal], tmp_path: Path
) -> None:
    config_path = demo[0] / "config.yaml"
    tenants = {t: a for t, a in truth.items() if t not in (IDLE, UNALLOCATED)}
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 2400})
        for url in serve(config_path, "finance", tmp_path / "finance.log"):
            _open(page, url, "Charges")
            charges = _column(_cells(page), "Amount")
            assert {t: money(a) for t, a in charges.items()} == {SHOWN.get(t, t): a for t, a in truth.items()}
            metrics = {
                m.locator("label").inner_text().strip(): m.locator("[data-testid=stMetricValue]").inner_text()
                for m in page.locator("[data-testid=stMetric]").all()
            }
            assert money(metrics["Total in scope"]) == sum(truth.values(), Decimal(0))
            assert money(metrics["Billed to tenants"]) == sum(tenants.values(), Decimal(0))
            _open(page, f"{url}/budgets", "Budgets")
            spent = _column(_cells(page), "Spent")
            assert {t: money(a) for t, a in spent.items()} == tenants
        for url in serve(config_path, "tenant:serving", tmp_path / "tenant.log"):
            _open(page, url, "Usage")
            _open(page, f"{url}/charges", "What you owe")
            assert _column(_cells(page), "Amount") == {"serving": f"{tenants['serving']:,} USD"}
            yours = page.locator("[data-testid=stMetric]").filter(has_text="Your charges")
            assert money(yours.locator("[data-testid=stMetricValue]").inner_text()) == tenants["serving"]
        browser.close()
