"""Invoice roll-up, rounding (R12), lines (R14) and the CSV output contract."""

import hashlib
from datetime import date
from decimal import Decimal

import pyarrow as pa
import pytest

from gpumeter.billing.exports import write_invoice_csvs
from gpumeter.billing.invoices import (
    INVOICE_COLUMNS,
    InvoiceError,
    Period,
    build_invoice_lines,
    invoice_csv,
    invoice_id,
    neutralize,
    reconcile,
    round_money,
)
from gpumeter.billing.status import Status
from gpumeter.config import parse_config

CONFIG = """
clusters: [{{name: c1, source: {{kind: parquet, path: /nonexistent}}}}]
currency: {currency}
rate_card: {{models: [{{model: H100-80GB, price_per_gpu_hour: 4.0}}]}}
tenants:
  - {{name: ml-training, cost_center: CC-1, namespaces: [training]}}
  - {{name: serving, cost_center: CC-2, namespaces: [inference]}}
"""

DEC = pa.decimal128(38, 12)


def config(currency: str = "USD"):
    return parse_config(CONFIG.format(currency=currency))


def daily(rows: list[tuple]) -> pa.Table:
    """rows: (day, tenant, charge_type, gpu_model, mig_profile, device_seconds, gpu_seconds, amount)."""
    cols = list(zip(*rows, strict=True))
    return pa.table(
        {
            "day": pa.array(cols[0], pa.date32()),
            "tenant": pa.array(cols[1]),
            "cost_center": pa.array([None] * len(rows), pa.string()),
            "charge_type": pa.array(cols[2]),
            "gpu_model": pa.array(cols[3]),
            "mig_profile": pa.array(cols[4], pa.string()),
            "device_seconds": pa.array([Decimal(v) for v in cols[5]], DEC),
            "gpu_seconds": pa.array([Decimal(v) for v in cols[6]], DEC),
            "amount": pa.array([Decimal(v) for v in cols[7]], DEC),
        }
    )


def test_round_half_even_r12() -> None:
    assert round_money(Decimal("0.125"), 2) == Decimal("0.12")
    assert round_money(Decimal("0.135"), 2) == Decimal("0.14")
    assert round_money(Decimal("-0.125"), 2) == Decimal("-0.12")
    assert round_money(Decimal("2.5"), 0) == Decimal("2")
    assert round_money(Decimal("3.5"), 0) == Decimal("4")


def test_month_is_sum_of_days_and_lines_per_charge_model_profile_r2_r14() -> None:
    rows = [
        (date(2026, 11, 1), "ml-training", "reserved", "H100-80GB", None, "3600", "3600", "4.000000000001"),
        (date(2026, 11, 2), "ml-training", "reserved", "H100-80GB", None, "3600", "3600", "4"),
        (
            date(2026, 11, 2),
            "ml-training",
            "reserved",
            "H100-80GB",
            "3g.40gb",
            "3600",
            "1542.857142857143",
            "1.714285714286",
        ),
        (date(2026, 11, 2), "__idle__", "idle", "H100-80GB", None, "0", "1800", "2.005"),
        (date(2026, 12, 1), "ml-training", "reserved", "H100-80GB", None, "3600", "3600", "4"),  # other month
    ]
    lines = build_invoice_lines(daily(rows), config(), Period.parse("2026-11"))
    as_rows = lines.to_pylist()
    assert [(r["tenant"], r["mig_profile"]) for r in as_rows] == [
        ("ml-training", ""),
        ("ml-training", "3g.40gb"),
        ("__idle__", ""),
    ]
    whole = as_rows[0]
    assert whole["invoice_id"] == "INV-2026-11-ML-TRAINING"
    assert whole["cost_center"] == "CC-1"  # from the config
    assert whole["period_start"] == "2026-11-01T00:00:00Z"
    assert whole["period_end"] == "2026-12-01T00:00:00Z"
    assert whole["device_hours"] == Decimal(2)
    assert whole["amount"] == Decimal("8.00")
    assert whole["unit_price"] == Decimal("4.000000000")
    mig = as_rows[1]
    assert mig["gpu_hours"] == Decimal("0.428571429")  # 3/7 of an hour, GPU-equivalents
    assert mig["amount"] == Decimal("1.71")
    assert as_rows[2]["amount"] == Decimal("2.00")  # 2.005 half-even -> 2.00


def test_a_month_with_a_price_change_has_one_line_per_model_at_the_average_price_r8_r14() -> None:
    """The rate card changes H100 from 4.00 to 5.00 on 15 November (docs/config.md, "Price changes"): each
    day's amount is at its own price (tests/test_rules.py), and the month keeps R14's grain, one line per
    model, at the average price of its hours: (1 h × 4.00 + 3 h × 5.00) / 4 h = 4.75."""
    rows = [
        (date(2026, 11, 14), "ml-training", "reserved", "H100-80GB", None, "3600", "3600", "4"),
        (date(2026, 11, 15), "ml-training", "reserved", "H100-80GB", None, "10800", "10800", "15"),
    ]
    [line] = build_invoice_lines(daily(rows), config(), Period.parse("2026-11")).to_pylist()
    assert (line["gpu_hours"], line["amount"], line["unit_price"]) == (
        Decimal(4),
        Decimal("19.00"),
        Decimal("4.750000000"),
    )


def test_minor_unit_of_currency_r12() -> None:
    rows = [(date(2026, 11, 1), "serving", "reserved", "H100-80GB", None, "3600", "3600", "412.5")]
    lines = build_invoice_lines(daily(rows), config("JPY"), Period.parse("2026-11"))
    assert lines.column("amount").to_pylist() == [Decimal("412")]
    csv_text = invoice_csv(lines, 0)
    assert csv_text.splitlines()[1].split(",")[11] == "412"


def test_csv_output_contract_and_files(tmp_path) -> None:
    rows = [
        (date(2026, 11, 1), "ml-training", "reserved", "H100-80GB", None, "3600", "3600", "4"),
        (date(2026, 11, 1), "serving", "reserved", "H100-80GB", None, "1800", "1800", "2"),
        (date(2026, 11, 1), "__unallocated__", "reserved", "H100-80GB", None, "900", "900", "1"),
        (date(2026, 11, 1), "__idle__", "idle", "H100-80GB", None, "0", "900", "1"),
    ]
    period = Period.parse("2026-11")
    lines = build_invoice_lines(daily(rows), config(), period)
    paths = write_invoice_csvs(lines, config(), period, tmp_path, Status(str(period), False, ""))
    names = sorted(p.name for p in paths)
    assert names == [
        "invoice_lines_2026-11_all.csv",
        "invoice_lines_2026-11_ml-training.csv",
        "invoice_lines_2026-11_serving.csv",
    ]
    all_lines = (tmp_path / "invoice_lines_2026-11_all.csv").read_text().splitlines()
    # The contract's 13 columns in order, then the two trailing R16 columns (docs/billing.md).
    assert all_lines[0] == ",".join(INVOICE_COLUMNS) + ",corrects_period,corrects_charge_type"
    assert len(all_lines) == 5
    assert any(line.split(",")[1] == "__idle__" for line in all_lines[1:])
    serving = (tmp_path / "invoice_lines_2026-11_serving.csv").read_text().splitlines()
    assert len(serving) == 2 and serving[1].split(",")[1] == "serving"
    assert serving[1].split(",")[-4:] == ["2.00", "USD", "", ""]  # a usage line corrects nothing


def test_formula_injection_is_neutralized() -> None:
    assert neutralize("=HYPERLINK(1)") == "'=HYPERLINK(1)"
    assert neutralize("+1") == "'+1"
    assert neutralize("-1") == "'-1"
    assert neutralize("@SUM(A1)") == "'@SUM(A1)"
    assert neutralize("ml-training") == "ml-training"


def test_reconciliation_after_rounding_r13() -> None:
    rows = [
        (date(2026, 11, 1), "ml-training", "reserved", "H100-80GB", None, "10", "10", "0.335"),
        (date(2026, 11, 1), "serving", "reserved", "H100-80GB", None, "10", "10", "0.335"),
        (date(2026, 11, 1), "__idle__", "idle", "H100-80GB", None, "0", "10", "0.33"),
    ]
    lines = build_invoice_lines(daily(rows), config(), Period.parse("2026-11"))
    pool = pa.table(
        {"day": pa.array([date(2026, 11, 1)], pa.date32()), "pool_cost": pa.array([Decimal("1.0")], DEC)}
    )
    rec = reconcile(lines, pool, Period.parse("2026-11"), 2)
    assert rec.exact
    assert rec.lines_rounded == Decimal("1.01")  # 0.34 + 0.34 + 0.33: the rounding shows, within tolerance
    assert rec.within_rounding and rec.ok


def test_period_parsing() -> None:
    assert Period.parse("2026-12").end == date(2027, 1, 1)
    assert len(Period.parse("2028-02").days()) == 29
    with pytest.raises(InvoiceError, match="YYYY-MM"):
        Period.parse("2026-13")


INJECTING = """
clusters: [{name: c1, source: {kind: parquet, path: /nonexistent}}]
pool: "@pool"
rate_card: {models: [{model: H100-80GB, price_per_gpu_hour: 4.0}]}
tenants:
  - {name: ml-training, cost_center: "=HYPERLINK(\\"http://evil\\",\\"x\\")", namespaces: [training]}
  - {name: serving, cost_center: "<script>alert(1)</script>", namespaces: [inference]}
"""


def _injecting_lines():
    cfg = parse_config(INJECTING)
    rows = [
        (date(2026, 11, 1), "ml-training", "reserved", "H100-80GB", None, "3600", "3600", "4"),
        (date(2026, 11, 1), "serving", "reserved", "-1+1", "+cmd", "3600", "3600", "4"),
    ]
    return cfg, build_invoice_lines(daily(rows), cfg, Period.parse("2026-11"))


def test_formula_injection_through_cost_center_and_model_in_every_csv(tmp_path) -> None:
    import csv

    from gpumeter.billing.exports import write_exports
    from gpumeter.billing.status import Status

    cfg, lines = _injecting_lines()
    period = Period.parse("2026-11")
    paths = write_exports(lines, cfg, period, tmp_path, Status("2026-11", False, "0" * 64))
    for path in (p for p in paths if p.suffix == ".csv"):
        with path.open(newline="") as fh:
            for row in csv.DictReader(fh):
                for column, value in row.items():
                    numeric = column in (
                        "amount",
                        "device_hours",
                        "gpu_hours",
                        "unit_price",
                    ) or column.endswith("Cost")
                    if not numeric:
                        assert not value.startswith(("=", "+", "-", "@", "\t", "\r")), (
                            path.name,
                            column,
                            value,
                        )
    all_csv = (tmp_path / "invoice_lines_2026-11_all.csv").read_text()
    assert "'=HYPERLINK" in all_csv and ",'-1+1,'+cmd," in all_csv


def test_html_invoice_escapes_and_shows_what_finance_reads(tmp_path) -> None:
    from gpumeter.billing.documents import render_invoice
    from gpumeter.billing.status import Status

    cfg, lines = _injecting_lines()
    period = Period.parse("2026-11")
    html = render_invoice(
        lines, cfg, period, "serving", Status("2026-11", True, "ab" * 32, "2026-12-01T09:00:00Z", "cfo")
    )
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # HTML-escaped
    assert "INV-2026-11-SERVING" in html and "CLOSED" in html and "ab" * 32 in html
    assert "1 Nov 2026 to 30 Nov 2026 (UTC)" in html  # the period as dates, its last day included
    assert "4.00 USD" in html  # the total: the one 4.00 line (R12)
    assert "ml-training" not in html  # another tenant's lines never show
    draft = render_invoice(lines, cfg, period, "ml-training", Status("2026-11", False, "cd" * 32))
    assert "DRAFT" in draft and "may still change" in draft


# --- invoice identities (R14): one id per tenant and period, never shared -------------------------------


def test_invoice_ids_of_plain_names_stay_readable() -> None:
    period = Period.parse("2026-11")
    assert invoice_id(period, "ml-training") == "INV-2026-11-ML-TRAINING"
    assert invoice_id(period, "serving") == "INV-2026-11-SERVING"
    assert invoice_id(period, "team-a") == "INV-2026-11-TEAM-A"
    assert invoice_id(Period.parse("2026-12"), "ml-training") == "INV-2026-12-ML-TRAINING"


def test_names_that_read_alike_get_distinct_stable_ids() -> None:
    """team-a, team.a and TEAM_A all read TEAM-A: the plain one keeps it, the others add 8 hex digits of the
    SHA-256 of their exact name (written out here, so that a change of the rule shows)."""
    period = Period.parse("2026-11")
    ids = {name: invoice_id(period, name) for name in ("team-a", "team.a", "TEAM_A")}
    assert ids == {
        "team-a": "INV-2026-11-TEAM-A",
        "team.a": "INV-2026-11-TEAM-A--DC627329",
        "TEAM_A": "INV-2026-11-TEAM-A--A44A58AE",
    }
    assert hashlib.sha256(b"team.a").hexdigest()[:8] == "dc627329"  # anyone can recompute the suffix
    assert invoice_id(period, "team.a") == ids["team.a"]  # a function of the name alone: stable


def test_a_tenant_named_idle_is_not_the_idle_bucket() -> None:
    period = Period.parse("2026-11")
    assert invoice_id(period, "__idle__") == "INV-2026-11-__IDLE__"
    assert invoice_id(period, "__unallocated__") == "INV-2026-11-__UNALLOCATED__"
    # `idle` may come from days metered before config check refused the name: it still has an id of its own.
    assert invoice_id(period, "idle") == "INV-2026-11-IDLE"
    assert invoice_id(period, "unallocated") == "INV-2026-11-UNALLOCATED"


def test_lines_of_look_alike_tenants_are_invoiced_apart() -> None:
    rows = [
        (date(2026, 11, 1), name, "reserved", "H100-80GB", None, "3600", "3600", "4")
        for name in ("team-a", "team.a", "TEAM_A", "idle")
    ] + [(date(2026, 11, 1), "__idle__", "idle", "H100-80GB", None, "0", "3600", "4")]
    lines = build_invoice_lines(daily(rows), config(), Period.parse("2026-11")).to_pylist()
    ids = [r["invoice_id"] for r in lines]
    assert len(set(ids)) == len({r["tenant"] for r in lines}) == 5


# --- an invoice finance can send (issue 46): issue and due dates, number, charges in words, the note ---------


def _lines_of_every_charge_type():
    """serving's lines of every charge type, an adjustment among them (a reserved line relabelled as the
    correction of October's reserved charge, as periods.py writes one)."""
    d1 = date(2026, 11, 1)
    rows = [
        (d1, "serving", kind, "H100-80GB", profile, "3600", gpu, amount)
        for kind, profile, gpu, amount in [
            ("reserved", None, "3600", "4"),
            ("usage", "3g.40gb", "1542.857142857143", "1.714285714286"),
            ("idle", None, "3600", "0.5"),
            ("energy", None, "0", "0.25"),
            ("reserved", "1g.10gb", "514.285714285714", "0.571428571429"),
        ]
    ]
    lines = build_invoice_lines(daily(rows), config(), Period.parse("2026-11"))
    last = lines.num_rows - 1

    def relabel(name: str, value: str) -> pa.Array:
        column = lines.column(name).to_pylist()
        column[last] = value
        return pa.array(column, lines.schema.field(name).type)

    for name, value in [
        ("charge_type", "adjustment"),
        ("corrects_period", "2026-10"),
        ("corrects_charge_type", "reserved"),
    ]:
        lines = lines.set_column(lines.schema.get_field_index(name), name, relabel(name, value))
    return lines


def test_payment_terms_are_days_from_0_to_365_and_30_by_default() -> None:
    from gpumeter.config import ConfigError

    assert config().payment_terms_days == 30
    base = CONFIG.format(currency="USD")
    for days in (0, 14, 365):
        assert parse_config(base + f"payment_terms_days: {days}\n").payment_terms_days == days
    for bad in ("-1", "366", "100000", "thirty"):
        with pytest.raises(ConfigError, match="payment_terms_days"):
            parse_config(base + f"payment_terms_days: {bad}\n")


def test_a_closed_invoice_is_issued_the_day_its_month_closed_and_due_after_the_terms() -> None:
    from gpumeter.billing.documents import render_invoice

    lines, period = _lines_of_every_charge_type(), Period.parse("2026-11")
    closed = Status("2026-11", True, "ab" * 32, "2026-12-07T23:59:59Z", "cfo")
    html = render_invoice(lines, config(), period, "serving", closed)
    assert "<dt>Issue date</dt><dd>7 Dec 2026</dd>" in html
    assert "<dt>Due date</dt><dd>6 Jan 2027 (30 days after issue)</dd>" in html  # 7 Dec + 30 days
    terms = parse_config(CONFIG.format(currency="USD") + "payment_terms_days: 0\n")
    html = render_invoice(lines, terms, period, "serving", closed)
    assert "<dt>Due date</dt><dd>7 Dec 2026 (0 days after issue)</dd>" in html  # due on issue
    assert '<dt>Invoice number</dt><dd class="number">INV-2026-11-SERVING</dd>' in html
    draft = render_invoice(lines, config(), period, "serving", Status("2026-11", False, "cd" * 32))
    assert "<dt>Issue date</dt><dd>not issued (draft)</dd>" in draft and "Due date" not in draft
    assert '<dd class="number">INV-2026-11-SERVING</dd>' in draft


def test_charge_types_are_printed_in_words_and_gpu_equivalent_hours_are_explained() -> None:
    from gpumeter.billing.documents import render_invoice
    from gpumeter.billing.invoices import CHARGE_WORDS

    assert CHARGE_WORDS["reserved"] == "GPU time reserved" and CHARGE_WORDS["usage"] == "GPU time used"
    assert CHARGE_WORDS["idle"] == "Idle capacity" and CHARGE_WORDS["energy"] == "Energy"
    assert CHARGE_WORDS["adjustment"] == "Correction to a closed month"
    html = render_invoice(
        _lines_of_every_charge_type(),
        config(),
        Period.parse("2026-11"),
        "serving",
        Status("2026-11", False, "cd" * 32),
    )
    for words in ("GPU time reserved", "GPU time used", "Energy"):  # idle is __idle__'s, never a tenant's
        assert f'<tr><td class="charge">{words}</td>' in html, words
    assert "<td>2026-10</td><td>Correction to a closed month: GPU time reserved</td>" in html
    for raw in ("reserved", "usage", "idle", "energy", "adjustment"):
        assert f"<td>{raw}</td>" not in html and f"<td>{raw}:" not in html
    note = " ".join(html.split('<p class="note">', 1)[1].split("</p>", 1)[0].split())
    assert "Device-hours are the hours a device, a whole GPU or a MIG instance, was held." in note
    assert "3g.40gb MIG instance, 3 of the 7 compute slices of its GPU, is 3/7 of a GPU-hour" in note
    assert "a GPU shared by several pods is split among them (equally)" in note
    memory = parse_config(CONFIG.format(currency="USD").replace("{models:", "{mig_weight: memory, models:"))
    html = render_invoice(
        _lines_of_every_charge_type(),
        memory,
        Period.parse("2026-11"),
        "serving",
        Status("2026-11", False, "cd" * 32),
    )
    assert "4 of the 8 memory slices of its GPU, is 4/8 of a GPU-hour" in html


def test_the_html_invoice_holds_in_a_narrow_window_and_the_pdf_keeps_its_a4_stylesheet() -> None:
    from gpumeter.billing.documents import render_invoice

    args = (_lines_of_every_charge_type(), config(), Period.parse("2026-11"), "serving")
    html = render_invoice(*args, Status("2026-11", False, "cd" * 32))
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in html
    # Each table of lines sits in a box that scrolls sideways: the page itself never overflows.
    assert ".lines { max-width: 100%; overflow-x: auto;" in html
    assert html.count('<div class="lines"><table>') == 2 and html.count("</table></div>") == 2
    assert "@media (max-width: 40rem)" in html and "minmax(0, 1fr)" in html
    assert "@page" not in html  # the HTML file has no print stylesheet
    printed = render_invoice(*args, Status("2026-11", False, "cd" * 32), for_print=True)
    assert "size: A4;" in printed and "thead { display: table-header-group; }" in printed
    assert "overflow-x" not in printed and "@media" not in printed  # nothing WeasyPrint would ignore
