"""PDF invoices: each tenant's invoice as PDF beside its HTML, read back with pypdf and checked against the
tenant's CSV of the same export (its invoice id, every line's amount, the total), the status it was written
with (a draft says so; a closed period shows the content hash of its manifest), and a closed period's PDF
never changes (R16)."""

import csv
import hashlib
import json
import os
import re
import subprocess
import sys
from collections import Counter
from datetime import date
from decimal import Decimal
from io import BytesIO
from pathlib import Path

import pyarrow as pa
import pytest
from pypdf import PdfReader
from test_invoices import CONFIG, DEC, config, daily

from gpumeter.billing import periods
from gpumeter.billing.exports import write_exports
from gpumeter.billing.invoices import Period, build_invoice_lines
from gpumeter.billing.month import export_month, roll_up_month
from gpumeter.billing.status import Status
from gpumeter.storage.paths import MARTS
from gpumeter.storage.warehouse import Warehouse

NOV = Period.parse("2026-11")
D1, D30 = date(2026, 11, 1), date(2026, 11, 30)
EXPORTED = ["ml-training", "serving"]

# (tenant, charge_type, gpu_model, mig_profile, device_seconds, gpu_seconds, amount) per day.
DAYS = {
    D1: [
        ("ml-training", "reserved", "H100-80GB", None, "3600", "3600", "1234.5"),
        ("ml-training", "reserved", "H100-80GB", "3g.40gb", "3600", "1542.857142857143", "1.714285714286"),
        ("serving", "reserved", "H100-80GB", None, "1800", "1800", "2"),
        ("__idle__", "idle", "H100-80GB", None, "0", "3600", "4"),
    ],
    D30: [
        ("ml-training", "reserved", "H100-80GB", None, "3600", "3600", "4"),
        ("serving", "reserved", "H100-80GB", "1g.10gb", "3600", "514.285714285714", "0.571428571429"),
    ],
}


def _store(warehouse: Warehouse, day: date, rows: list[tuple]) -> None:
    """A day's tenant_daily_cost and its pool cost (the sum of its amounts)."""
    warehouse.write_day(MARTS, "tenant_daily_cost", "c1", day, daily([(day, *r) for r in rows]))
    pool = sum((Decimal(r[-1]) for r in rows), Decimal(0))
    table = pa.table({"day": pa.array([day], pa.date32()), "pool_cost": pa.array([pool], DEC)})
    warehouse.write_day(MARTS, "pool_daily_cost", "c1", day, table)


@pytest.fixture
def warehouse(tmp_path: Path) -> Warehouse:
    wh = Warehouse.at(tmp_path / "wh")
    for day, rows in DAYS.items():
        _store(wh, day, rows)
    return wh


def _pages(pdf: bytes) -> list[str]:
    return [page.extract_text() for page in PdfReader(BytesIO(pdf)).pages]


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def _as_on_invoice(amount: str) -> str:
    """A CSV amount (`1234.50`: the minor unit's digits, no grouping) as the invoice prints it (`1,234.50`)."""
    return f"{Decimal(amount):,}"  # grouping only: the digits stay the CSV's


def _assert_says_what_its_csv_says(pdf: bytes, rows: list[dict[str, str]]) -> str:
    text = "\n".join(_pages(pdf))
    words = Counter(text.split())
    assert {r["invoice_id"] for r in rows} == {rows[0]["invoice_id"]} and rows[0]["invoice_id"] in words
    assert re.search(rf"^Tenant {re.escape(rows[0]['tenant'])}$", text, re.MULTILINE), text
    needed = Counter(_as_on_invoice(r["amount"]) for r in rows)
    assert all(words[amount] >= n for amount, n in needed.items()), (needed, text)
    total = sum((Decimal(r["amount"]) for r in rows), Decimal(0))
    due = re.search(r"^Total due \(.*\) (\S+) (\S+)$", text, re.MULTILINE)
    assert due is not None, text
    assert due.groups() == (_as_on_invoice(str(total)), rows[0]["currency"])
    return text


def test_each_tenants_pdf_says_what_its_csv_of_the_same_export_says(warehouse: Warehouse) -> None:
    roll_up_month(config(), warehouse, "2026-11")  # a draft: lines and every export
    out = periods.exports_dir(warehouse, "2026-11")
    for tenant in EXPORTED:
        pdf = (out / f"tenant_invoice_2026-11_{tenant}.pdf").read_bytes()
        assert pdf.startswith(b"%PDF-")
        text = _assert_says_what_its_csv_says(pdf, _csv(out / f"invoice_lines_2026-11_{tenant}.csv"))
        assert "DRAFT" in text and "CLOSED" not in text  # a draft says it is one, on every page too
        assert text.count("DRAFT") == 2 and "Page 1 of 1" in text
    # By hand: 1234.5 + 4 for the whole GPU, 1.714285714286 -> 1.71 for the MIG slice (R12).
    words = "\n".join(_pages((out / "tenant_invoice_2026-11_ml-training.pdf").read_bytes())).split()
    assert "1,238.50" in words and "1.71" in words and "1,240.21" in words
    assert "INV-2026-11-ML-TRAINING" in words
    assert not (out / "tenant_invoice_2026-11___idle__.pdf").exists()  # the buckets get no invoice


def test_an_unchanged_draft_is_exported_to_the_same_bytes(warehouse: Warehouse) -> None:
    roll_up_month(config(), warehouse, "2026-11")
    out = periods.exports_dir(warehouse, "2026-11")
    names = [f"tenant_invoice_2026-11_{t}.pdf" for t in EXPORTED]
    first = {name: (out / name).read_bytes() for name in names}
    for name, pdf in first.items():  # no wall-clock time, no file identifier in the bytes
        assert b"/CreationDate" not in pdf and b"/ModDate" not in pdf and b"/ID" not in pdf, name
        assert PdfReader(BytesIO(pdf)).metadata.creation_date is None
    written = export_month(config(), warehouse, "2026-11", "documents")
    assert sorted(p.name for p in written if p.suffix == ".pdf") == names
    assert {name: (out / name).read_bytes() for name in names} == first
    # Another process (another hash seed, fonts loaded afresh) writes the same bytes too.
    script = (
        "import os, sys\n"
        "from gpumeter.billing.month import export_month\n"
        "from gpumeter.config import parse_config\n"
        "from gpumeter.storage.warehouse import Warehouse\n"
        "export_month(parse_config(os.environ['PDF_TEST_CONFIG']), Warehouse.at(sys.argv[1]), '2026-11', "
        "'documents')\n"
    )
    for name in names:
        (out / name).unlink()
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PDF_TEST_CONFIG": CONFIG.format(currency="USD")}
    subprocess.run([sys.executable, "-c", script, str(warehouse.root)], env=env, check=True)
    assert {name: (out / name).read_bytes() for name in names} == first


def test_a_closed_period_pdf_shows_its_hash_is_in_its_manifest_and_never_changes(
    warehouse: Warehouse, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the shells: the invoice_month job's invoice_documents asset, `gpumeter close` and
    `gpumeter invoices`."""
    from gpumeter.cli.main import main
    from gpumeter.pipelines.launch import invoice_month

    config_path = tmp_path / "config.yaml"
    config_path.write_text(
        CONFIG.format(currency="USD") + f"warehouse: {{path: {json.dumps(str(warehouse.root))}}}\n"
    )
    names = [f"tenant_invoice_2026-11_{t}.pdf" for t in EXPORTED]
    reported = invoice_month(str(config_path), "2026-11").materialized["invoice_documents"]
    pdfs = [Path(p).name for p in reported["files"] if p.endswith(".pdf")]
    assert sorted(pdfs) == names and reported["pdf_count"] == 2

    args = ["--config", str(config_path), "--period", "2026-11"]
    assert main(["close", *args, "--by", "cfo", "--reason", "month end"]) == 0
    manifest = periods.read_manifest(warehouse, "2026-11")
    assert manifest is not None
    out = periods.exports_dir(warehouse, "2026-11")
    # The content hash of record is the sha256 of the period's all-tenants CSV (R16).
    assert (
        manifest["content_hash"]
        == hashlib.sha256((out / "invoice_lines_2026-11_all.csv").read_bytes()).hexdigest()
    )
    closed = {}
    for tenant, name in zip(EXPORTED, names, strict=True):
        closed[name] = (out / name).read_bytes()
        assert manifest["files"][name] == hashlib.sha256(closed[name]).hexdigest()
        text = _assert_says_what_its_csv_says(closed[name], _csv(out / f"invoice_lines_2026-11_{tenant}.csv"))
        assert f"sha256:{manifest['content_hash']}" in text.split()
        assert "CLOSED" in text and "DRAFT" not in text and "closed 2026-" in text and "by cfo" in text
    capsys.readouterr()

    copies = tmp_path / "out"
    assert main(["invoices", *args, "--out", str(copies)]) == 0  # runs the invoice job again
    listed = {line.split()[1]: line for line in capsys.readouterr().out.splitlines() if ".pdf" in line}
    assert sorted(listed) == names and all("invoice (PDF)" in line for line in listed.values())
    assert {name: (out / name).read_bytes() for name in names} == closed  # R16: never written again
    assert {name: (copies / name).read_bytes() for name in names} == closed
    assert periods.verify_closed(warehouse, "2026-11") == []


def test_markup_in_a_tenant_or_cost_center_is_text_in_the_pdf(tmp_path: Path) -> None:
    tenant = '<img src=x onerror=alert(1)>&amp;"q"'
    center = "<script>alert(1)</script>"
    rows = daily([(D1, tenant, "reserved", "H100-80GB", None, "3600", "3600", "4")])
    rows = rows.set_column(2, "cost_center", pa.array([center]))
    lines = build_invoice_lines(rows, config(), NOV)
    status = Status("2026-11", False, "cd" * 32)
    written = write_exports(lines, config(), NOV, tmp_path, status, kinds=("documents",))
    pdf = tmp_path / f"tenant_invoice_2026-11_{tenant}.pdf"
    assert pdf in written
    text = "\n".join(_pages(pdf.read_bytes()))
    # Shown as written: as markup, the img would be no text and &amp; would read "&".
    assert f"Tenant {tenant}" in text and f"Cost center {center}" in text
    assert "4.00 USD" in text


def test_a_long_invoice_repeats_its_table_header_and_numbers_its_pages(tmp_path: Path) -> None:
    profiles = [f"p{i:02d}" for i in range(60)]
    rows = [
        (D1, "serving", "reserved", "H100-80GB", p, "3600", "3600", f"{i}.25") for i, p in enumerate(profiles)
    ]
    lines = build_invoice_lines(daily(rows), config(), NOV)
    write_exports(
        lines, config(), NOV, tmp_path, Status("2026-11", False, "ef" * 32), kinds=("csv", "documents")
    )
    pdf = (tmp_path / "tenant_invoice_2026-11_serving.pdf").read_bytes()
    pages = _pages(pdf)
    assert len(pages) >= 2
    for number, page in enumerate(pages, start=1):
        if "per GPU-hour" in page:  # a page of lines (the last may hold only the note under them)
            assert "Charge GPU model MIG profile Device-hours Quantity Unit price Amount" in page
        assert f"Page {number} of {len(pages)}" in page and "DRAFT" in page
    text = _assert_says_what_its_csv_says(pdf, _csv(tmp_path / "invoice_lines_2026-11_serving.csv"))
    # 0.25 + 1.25 + … + 59.25 = 60 * 0.25 + 59 * 60 / 2, once, after the last line.
    assert text.count("Total due") == 1 and "1,785.00 USD" in text


def test_an_energy_line_shows_its_kilowatt_hours_and_price_per_kwh(tmp_path: Path) -> None:
    """An energy line bills kWh (its GPU-hours are 0): the invoice shows the kWh and the price per kWh, not a
    unit price of 0 per GPU-hour beside a non-zero amount."""
    rows = [
        (D1, "serving", "reserved", "H100-80GB", None, "3600", "3600", "4.1"),
        (D1, "serving", "energy", "H100-80GB", None, "0", "0", "0.252"),
    ]
    cost = daily(rows).append_column(
        "energy_joules",
        pa.array([Decimal(0), Decimal(2_520_000)], DEC),  # 0.7 kWh at 0.36 per kWh
    )
    lines = build_invoice_lines(cost, config(), NOV)
    write_exports(
        lines, config(), NOV, tmp_path, Status("2026-11", False, "ab" * 32), kinds=("csv", "documents")
    )
    text = _assert_says_what_its_csv_says(
        (tmp_path / "tenant_invoice_2026-11_serving.pdf").read_bytes(),
        _csv(tmp_path / "invoice_lines_2026-11_serving.csv"),
    )
    # By hand: 0.252 / 0.7 = 0.36 per kWh; 4.1 / 1 per GPU-hour; 0.252 rounds to 0.25 (R12).
    assert re.search(
        r"^GPU time reserved H100-80GB whole GPU 1\.000 1\.000 GPU-hours 4\.10 per GPU-hour 4\.10$",
        text,
        re.M,
    )
    assert re.search(r"^Energy H100-80GB whole GPU 0\.000 0\.700 kWh 0\.3600 per kWh 0\.25$", text, re.M), (
        text
    )
    assert "4.35 USD" in text


def test_a_closed_pdf_invoice_reads_its_dates_number_charges_in_words_and_note_on_a4(tmp_path: Path) -> None:
    """What finance sends, read back from the PDF: the invoice number, issued the day the month was closed and
    due 30 days later (the default terms), each line's charge in words, the note on GPU-equivalent hours,
    every line and the total, on A4 pages."""
    from gpumeter.billing.documents import render_invoice_pdf

    rows = [
        (D1, "ml-training", "reserved", "H100-80GB", None, "3600", "3600", "4"),
        (D1, "ml-training", "usage", "H100-80GB", "3g.40gb", "3600", "1542.857142857143", "1.714285714286"),
        (D30, "ml-training", "energy", "H100-80GB", None, "0", "0", "0.252"),
    ]
    lines = build_invoice_lines(daily(rows), config(), NOV)
    closed = Status("2026-11", True, "ab" * 32, "2026-12-01T09:00:00Z", "cfo")
    pdf = render_invoice_pdf(lines, config(), NOV, "ml-training", closed)
    reader = PdfReader(BytesIO(pdf))
    for page in reader.pages:  # A4: 210 x 297 mm, in points
        assert (round(float(page.mediabox.width)), round(float(page.mediabox.height))) == (595, 842)
    text = "\n".join(_pages(pdf))
    assert re.search(r"^Invoice number INV-2026-11-ML-TRAINING$", text, re.M), text
    assert re.search(r"^Issue date 1 Dec 2026$", text, re.M), text
    assert re.search(r"^Due date 31 Dec 2026 \(30 days after issue\)$", text, re.M), text
    assert re.search(
        r"^GPU time reserved H100-80GB whole GPU 1\.000 1\.000 GPU-hours 4\.00 per GPU-hour 4\.00$",
        text,
        re.M,
    )
    assert re.search(r"^GPU time used H100-80GB 3g\.\s?40gb 1\.000 0\.429 GPU-hours .* 1\.71$", text, re.M), (
        text
    )
    assert re.search(r"^Energy H100-80GB whole GPU 0\.000 ", text, re.M), text
    assert re.search(r"^Total due \(3 lines, .*\) 5\.96 USD$", text, re.M), text  # 4 + 1.71 + 0.25
    words = " ".join(text.split())
    assert "Device-hours are the hours a device, a whole GPU or a MIG instance, was held." in words
    assert "is 3/7 of a GPU-hour, and a GPU shared by several pods is split among them (equally)." in words


def test_a_draft_pdf_invoice_is_not_issued_and_has_no_due_date(tmp_path: Path) -> None:
    from gpumeter.billing.documents import render_invoice_pdf

    lines = build_invoice_lines(
        daily([(D1, "serving", "reserved", "H100-80GB", None, "3600", "3600", "4")]), config(), NOV
    )
    text = "\n".join(
        _pages(render_invoice_pdf(lines, config(), NOV, "serving", Status("2026-11", False, "cd" * 32)))
    )
    assert re.search(r"^Issue date not issued \(draft\)$", text, re.M), text
    assert "Due date" not in text and "INV-2026-11-SERVING" in text and "GPU time reserved" in text
