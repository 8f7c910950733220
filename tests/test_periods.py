"""The invoice lifecycle (R16): close, immutability, adjustments in the next open period, reopen, audit log.

Fast tests write hand-made daily marts into a real warehouse; the end-to-end test runs the real Dagster
jobs on a simulated day, then lets late samples arrive for a closed month."""

import csv
import hashlib
import io
import json
from datetime import date
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from focus_validator import validate_focus_csv
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_invoices import DEC, config, daily

from gpumeter.billing import adjustments, periods
from gpumeter.billing import invoice_checks as checks
from gpumeter.billing.invoices import Period, round_money
from gpumeter.billing.month import export_month, roll_up_month
from gpumeter.storage import audit, paths
from gpumeter.storage.paths import MARTS
from gpumeter.storage.warehouse import Warehouse

NOV, DECEMBER, JAN = Period.parse("2026-11"), Period.parse("2026-12"), Period.parse("2027-01")
D_NOV = date(2026, 11, 30)
D_DEC = date(2026, 12, 1)


def _store(warehouse: Warehouse, day: date, rows: list[tuple]) -> None:
    """A day's tenant_daily_cost (rows as test_invoices.daily) and its pool cost = Σ amounts (R13)."""
    tenant_daily = daily([(day, *r) for r in rows])
    warehouse.write_day(MARTS, "tenant_daily_cost", "c1", day, tenant_daily)
    pool = sum((Decimal(r[-1]) for r in rows), Decimal(0))
    pool_table = pa.table({"day": pa.array([day], pa.date32()), "pool_cost": pa.array([pool], DEC)})
    warehouse.write_day(MARTS, "pool_daily_cost", "c1", day, pool_table)


NOV_ROWS = [
    ("ml-training", "reserved", "H100-80GB", None, "3600", "3600", "4"),
    ("serving", "reserved", "H100-80GB", None, "1800", "1800", "2"),
    ("__idle__", "idle", "H100-80GB", None, "0", "3600", "4"),
]
DEC_ROWS = [("serving", "reserved", "H100-80GB", None, "3600", "3600", "4")]


@pytest.fixture
def warehouse(tmp_path: Path) -> Warehouse:
    wh = Warehouse.at(tmp_path / "wh")
    _store(wh, D_NOV, NOV_ROWS)
    _store(wh, D_DEC, DEC_ROWS)
    return wh


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _close(wh: Warehouse, period: Period, **kw: str) -> dict:
    roll_up_month(config(), wh, str(period))
    return periods.close_period(config(), wh, period, by=kw.get("by", "finance"), reason=kw.get("reason"))


def _lines(wh: Warehouse, period: Period) -> list[dict]:
    table = periods.stored_lines(wh, str(period))
    return table.to_pylist() if table is not None else []


def test_close_freezes_files_with_the_hash_of_the_csv_r16(warehouse: Warehouse) -> None:
    manifest = _close(warehouse, NOV, reason="month end")
    out = periods.exports_dir(warehouse, "2026-11")
    all_csv = (out / "invoice_lines_2026-11_all.csv").read_bytes()
    assert manifest["content_hash"] == hashlib.sha256(all_csv).hexdigest()
    assert manifest["line_count"] == 3 and manifest["total"] == "10.00"
    assert manifest["invoice_ids"] == [
        "INV-2026-11-ML-TRAINING",
        "INV-2026-11-SERVING",
        "INV-2026-11-__IDLE__",
    ]
    before = _digests(out)
    assert set(before) == set(manifest["files"])  # every export is hashed in the manifest
    html = (out / "tenant_invoice_2026-11_serving.html").read_text()
    assert "CLOSED" in html and manifest["content_hash"] in html

    # The day is metered again with different numbers: the closed month does not move (R15 vs R16).
    _store(warehouse, D_NOV, [*NOV_ROWS[:2], ("__idle__", "idle", "H100-80GB", None, "0", "3600", "5")])
    summary = roll_up_month(config(), warehouse, "2026-11")
    assert summary.closed and summary.exports == []
    assert export_month(config(), warehouse, "2026-11", "all") == []
    assert _digests(out) == before
    assert periods.verify_closed(warehouse, "2026-11") == []
    assert checks.invoice_matches_daily_costs(warehouse, config(), "2026-11").passed


def test_late_data_is_billed_in_the_next_open_month_as_adjustments_r16(warehouse: Warehouse) -> None:
    _close(warehouse, NOV)
    # Late samples for Nov 30: ml-training held one more GPU-hour (pool +4.00, idle unchanged), and half an
    # hour moves from serving to __unallocated__ (a changed holder: pool unchanged).
    _store(
        warehouse,
        D_NOV,
        [
            ("ml-training", "reserved", "H100-80GB", None, "7200", "7200", "8"),
            ("serving", "reserved", "H100-80GB", None, "900", "900", "1"),
            ("__unallocated__", "reserved", "H100-80GB", None, "900", "900", "1"),
            ("__idle__", "idle", "H100-80GB", None, "0", "3600", "4"),
        ],
    )
    summary = roll_up_month(config(), warehouse, "2026-12")
    adjustments = {
        (r["tenant"], r["corrects_charge_type"]): (r["device_hours"], r["amount"])
        for r in _lines(warehouse, DECEMBER)
        if r["charge_type"] == "adjustment"
    }
    assert adjustments == {
        ("ml-training", "reserved"): (Decimal(1), Decimal("4.00")),
        ("serving", "reserved"): (Decimal("-0.25"), Decimal("-1.00")),
        ("__unallocated__", "reserved"): (Decimal("0.25"), Decimal("1.00")),
    }
    assert {
        r["corrects_period"] for r in _lines(warehouse, DECEMBER) if r["charge_type"] == "adjustment"
    } == {"2026-11"}
    # R13 for December: its own pool cost (4.00) + the change in November's pool cost (+4.00).
    assert summary.reconciliation.pool_cost == Decimal("8.00")
    assert summary.reconciliation.ok
    assert checks.invoice_matches_daily_costs(warehouse, config(), "2026-12").passed
    export_month(config(), warehouse, "2026-12", "all")
    assert checks.invoice_csv_reconciles(warehouse, "2026-12", 2).passed
    assert checks.focus_billed_cost_total(warehouse, "2026-12").passed
    csv_rows = (periods.exports_dir(warehouse, "2026-12") / "invoice_lines_2026-12_all.csv").read_text()
    assert ",adjustment,H100-80GB,,1,1,4,4.00,USD,2026-11,reserved" in csv_rows
    html = (periods.exports_dir(warehouse, "2026-12") / "tenant_invoice_2026-12_ml-training.html").read_text()
    assert "DRAFT" in html and "Adjustments to closed periods" in html and "<td>2026-11</td>" in html


def test_an_adjustment_is_never_billed_twice_r16(warehouse: Warehouse) -> None:
    _close(warehouse, NOV)
    _store(
        warehouse, D_NOV, [("ml-training", "reserved", "H100-80GB", None, "7200", "7200", "8"), *NOV_ROWS[1:]]
    )
    _close(warehouse, DECEMBER)  # carries +4.00 for November
    _store(warehouse, date(2027, 1, 4), DEC_ROWS)
    roll_up_month(config(), warehouse, "2027-01")
    assert [r for r in _lines(warehouse, JAN) if r["charge_type"] == "adjustment"] == []
    # More late data for November: January carries only the new difference (+2.00).
    _store(
        warehouse,
        D_NOV,
        [("ml-training", "reserved", "H100-80GB", None, "9000", "9000", "10"), *NOV_ROWS[1:]],
    )
    roll_up_month(config(), warehouse, "2027-01")
    adjustments = [r for r in _lines(warehouse, JAN) if r["charge_type"] == "adjustment"]
    assert [(r["tenant"], r["corrects_period"], r["amount"]) for r in adjustments] == [
        ("ml-training", "2026-11", Decimal("2.00"))
    ]
    assert checks.invoice_matches_daily_costs(warehouse, config(), "2027-01").passed


def test_reopen_needs_a_reason_and_everything_is_audited(warehouse: Warehouse) -> None:
    manifest = _close(warehouse, NOV, reason="month end")
    with pytest.raises(periods.PeriodError, match="already closed"):
        periods.close_period(config(), warehouse, NOV)
    with pytest.raises(periods.PeriodError, match="needs a reason"):
        periods.reopen_period(warehouse, NOV, reason="  ")
    event = periods.reopen_period(warehouse, NOV, reason="price correction INC-42", by="controller")
    assert not periods.is_closed(warehouse, "2026-11")
    kept = sorted(p.name for p in periods.period_dir(warehouse, "2026-11").iterdir())
    assert any(name.endswith(".manifest.json") for name in kept)  # nothing recorded is lost
    assert roll_up_month(config(), warehouse, "2026-11").closed is False
    _close(warehouse, NOV, reason="again")
    log = [json.loads(line) for line in audit.audit_log_path(warehouse).read_text().splitlines()]
    assert [(e["event"], e["period"], e["reason"]) for e in log] == [
        ("close", "2026-11", "month end"),
        ("reopen", "2026-11", "price correction INC-42"),
        ("close", "2026-11", "again"),
    ]
    assert log[1]["by"] == "controller" and log[1]["content_hash"] == manifest["content_hash"]
    assert event["at"] == log[1]["at"]


def test_reopen_is_refused_while_a_later_closed_month_corrects_it(warehouse: Warehouse) -> None:
    _close(warehouse, NOV)
    _store(
        warehouse, D_NOV, [("ml-training", "reserved", "H100-80GB", None, "7200", "7200", "8"), *NOV_ROWS[1:]]
    )
    _close(warehouse, DECEMBER)
    with pytest.raises(
        periods.PeriodError, match="2026-12 carries adjustments for 2026-11; reopen 2026-12 first"
    ):
        periods.reopen_period(warehouse, NOV, reason="x")
    assert periods.is_closed(warehouse, "2026-11")


def test_close_without_lines_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(periods.PeriodError, match="gpumeter invoices --period 2026-11"):
        periods.close_period(config(), Warehouse.at(tmp_path), NOV)


# --- end to end: real Dagster runs on a simulated day -------------------------------------------------


@pytest.mark.slow
def test_close_then_late_samples_end_to_end(tmp_path: Path) -> None:
    import gpumeter_sim as simulator
    from gpumeter.cli.demo import write_demo_config
    from gpumeter.cli.main import main
    from gpumeter.config import load_config
    from gpumeter.pipelines.launch import invoice_month, meter_days

    spec = simulator.FactorySpec(**{**simulator.demo_spec().__dict__, "days": 1, "start": D_NOV})
    simulator.write_parquet(spec, tmp_path / "source")
    config_path = write_demo_config(tmp_path)
    meter_days(str(config_path), [D_NOV])
    assert main(["close", "--config", str(config_path), "--period", "2026-11", "--reason", "month end"]) == 0
    wh = Warehouse.at(load_config(config_path).warehouse.path)
    closed = _digests(periods.exports_dir(wh, "2026-11"))
    closed_lines = periods.closed_lines_path(wh, "2026-11").read_bytes()

    # Late samples: one more hour of an H100 (4.10/GPU-hour in the demo rate card) held in `training`.
    raw = tmp_path / "source" / "raw_dcgm_samples" / "cluster=demo" / f"day={D_NOV}" / "data.parquet"
    table = pq.read_table(raw)
    start_ms = 1796000400000  # 2026-11-30T01:00:00Z
    late = [
        {
            **dict.fromkeys(table.column_names),
            "cluster": "demo",
            "ts_ms": start_ms + i * 30_000,
            "metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "value": 0.5,
            "hostname": "gpu-h100-01",
            "uuid": "GPU-LATE-0001",
            "gpu": "7",
            "model_name": "NVIDIA H100 80GB HBM3",
            "namespace": "training",
            "pod": "late-job",
            "container": "main",
        }
        for i in range(120)
    ]
    pq.write_table(pa.concat_tables([table, pa.Table.from_pylist(late, schema=table.schema)]), raw)
    meter_days(str(config_path), [D_NOV])  # R15: the day is replaced
    outcome = invoice_month(str(config_path), "2026-11")
    assert outcome.failed_checks == []
    assert _digests(periods.exports_dir(wh, "2026-11")) == closed  # byte-identical (R16)
    assert periods.closed_lines_path(wh, "2026-11").read_bytes() == closed_lines

    outcome = invoice_month(str(config_path), "2026-12")
    assert outcome.failed_checks == []  # R13 for December, FOCUS total, lines = daily costs + adjustments
    december = _lines(wh, DECEMBER)
    assert [(r["tenant"], r["corrects_charge_type"], r["gpu_hours"], r["amount"]) for r in december] == [
        ("ml-training", "reserved", Decimal(1), Decimal("4.10"))
    ]
    assert december[0]["corrects_period"] == "2026-11"


def test_cli_close_reopen_and_invoices(
    warehouse: Warehouse, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_invoices import CONFIG

    from gpumeter.cli.main import main

    config_path = tmp_path / "config.yaml"
    config_path.write_text(
        CONFIG.format(currency="USD") + f"warehouse: {{path: {json.dumps(str(warehouse.root))}}}\n"
    )
    args = ["--config", str(config_path), "--period", "2026-11"]
    out = tmp_path / "out"
    assert main(["invoices", *args, "--out", str(out)]) == 0  # the invoice_month Dagster job
    assert sorted(p.name for p in out.iterdir()) == [
        "invoice_lines_2026-11_all.csv",
        "invoice_lines_2026-11_all.focus.csv",
        "invoice_lines_2026-11_ml-training.csv",
        "invoice_lines_2026-11_serving.csv",
        "tenant_invoice_2026-11_ml-training.html",
        "tenant_invoice_2026-11_ml-training.pdf",
        "tenant_invoice_2026-11_serving.html",
        "tenant_invoice_2026-11_serving.pdf",
    ]
    assert "draft" in capsys.readouterr().out
    assert main(["close", *args, "--by", "cfo", "--reason", "month end"]) == 0
    printed = capsys.readouterr().out
    assert "INV-2026-11-SERVING" in printed and "closed" in printed
    assert main(["close", *args]) == 2
    assert "already closed" in capsys.readouterr().err
    assert main(["reopen", *args, "--reason", " "]) == 2
    assert "needs a reason" in capsys.readouterr().err
    assert main(["reopen", *args, "--reason", "wrong rate card"]) == 0
    assert [e["event"] for e in audit.read_audit(warehouse)] == ["close", "reopen"]


# --- property: late data over several rounds is billed exactly once (R16, R13) ---------------------------


_cents = st.integers(min_value=0, max_value=10**14).map(lambda n: Decimal(n).scaleb(-12))


@st.composite
def _versions(draw: st.DrawFn) -> list[list[tuple]]:
    """Successive versions of Nov 30 as late data arrives: reserved amounts per tenant, idle = the rest."""
    out = []
    for _ in range(draw(st.integers(min_value=2, max_value=4))):
        training, serving, idle = draw(_cents), draw(_cents), draw(_cents)
        out.append(
            [
                ("ml-training", "reserved", "H100-80GB", None, "3600", "3600", str(training)),
                ("serving", "reserved", "H100-80GB", "1g.10gb", "3600", "514.285714285714", str(serving)),
                ("__idle__", "idle", "H100-80GB", None, "0", "1800", str(idle)),
            ]
        )
    return out


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(versions=_versions())
def test_late_data_in_rounds_is_billed_exactly_once(versions: list[list[tuple]]) -> None:
    """However many rounds of late data, each line of November is billed in total what its last version rounds
    to (R12), its hours exactly, and every month reconciles (R13)."""
    import tempfile

    with tempfile.TemporaryDirectory() as root:
        wh = Warehouse.at(root)
        _store(wh, D_NOV, versions[0])
        _close(wh, NOV)
        month = NOV
        for version in versions[1:]:  # each round: new data for Nov, the next month closes with it
            _store(wh, D_NOV, version)
            month = Period.of(month.end)
            summary = roll_up_month(config(), wh, str(month))
            assert summary.reconciliation.exact  # Σ adjustments = Δ pool cost of November, less unbilled
            assert summary.reconciliation.within_rounding
            for line in _adjustments(wh, month):
                assert line["amount"] or line["device_hours"] or line["gpu_hours"]  # no empty lines
            periods.close_period(config(), wh, month)
        billed: dict[tuple, Decimal] = {}
        for key in periods.closed_periods(wh):
            for row in periods.stored_lines(wh, key).to_pylist():
                if key == "2026-11" or row["corrects_period"] == "2026-11":
                    charge = row["corrects_charge_type"] or row["charge_type"]
                    k = (row["tenant"], charge, row["mig_profile"])
                    billed[k] = billed.get(k, Decimal(0)) + row["amount"]
        final = {(r[0], r[1], r[3] or ""): round_money(Decimal(r[6]), 2) for r in versions[-1]}
        assert {k: v for k, v in billed.items() if v} == {k: v for k, v in final.items() if v}


# --- adjustments are the corrected line rounded minus what was billed (R12), by hand ------------------------

# One H100 line of ml-training at 4.00 per GPU-hour: 10.004 = 2.501 h (9003.6 s), billed 10.00.
IDLE_2 = ("__idle__", "idle", "H100-80GB", None, "0", "1800", "2")


def _training(seconds: str, amount: str, profile: str | None = None) -> tuple:
    return ("ml-training", "reserved", "H100-80GB", profile, seconds, seconds, amount)


def _adjustments(wh: Warehouse, period: Period) -> list[dict]:
    return [r for r in _lines(wh, period) if r["charge_type"] == "adjustment"]


def _adjusted(wh: Warehouse, period: Period) -> list[tuple]:
    """(tenant, corrected charge type, MIG profile, device-hours, billed amount, exact change) per line."""
    return [
        (
            r["tenant"],
            r["corrects_charge_type"],
            r["mig_profile"],
            r["device_hours"],
            r["amount"],
            r["amount_unrounded"],
        )
        for r in _adjustments(wh, period)
    ]


def _billed_for_november(wh: Warehouse, tenant: str) -> Decimal:
    total = Decimal(0)
    for key in periods.closed_periods(wh):
        for row in periods.stored_lines(wh, key).to_pylist():
            if row["tenant"] == tenant and (key == "2026-11" or row["corrects_period"] == "2026-11"):
                total += row["amount"]
    return total


@pytest.fixture
def nov_10_004(tmp_path: Path) -> Warehouse:
    """November closed with ml-training's line at 10.004, billed 10.00; December has one line of its own."""
    wh = Warehouse.at(tmp_path / "wh")
    _store(wh, D_NOV, [_training("9003.6", "10.004"), IDLE_2])
    _store(wh, D_DEC, DEC_ROWS)
    _close(wh, NOV)
    assert [(r["tenant"], r["amount"]) for r in _lines(wh, NOV)] == [
        ("ml-training", Decimal("10.00")),
        ("__idle__", Decimal("2.00")),
    ]
    return wh


def test_a_correction_that_rounds_up_is_billed_r12(nov_10_004: Warehouse) -> None:
    """10.004 (billed 10.00) becomes 10.006: the line now rounds to 10.01, so +0.01 — not round(+0.002) = 0."""
    wh = nov_10_004
    _store(wh, D_NOV, [_training("9005.4", "10.006"), IDLE_2])
    summary = roll_up_month(config(), wh, "2026-12")
    assert _adjusted(wh, DECEMBER) == [
        ("ml-training", "reserved", "", Decimal("0.0005"), Decimal("0.01"), Decimal("0.002"))
    ]
    # R13 for December: 4.00 of its own + Nov's pool change 0.002, exact; 4.01 rounded, within 3 roundings.
    rec = summary.reconciliation
    assert (rec.pool_cost, rec.lines_unrounded, rec.lines_rounded) == (
        Decimal("4.002"),
        Decimal("4.002"),
        Decimal("4.01"),
    )
    assert rec.tolerance == Decimal("0.015") and rec.ok
    assert checks.invoice_matches_daily_costs(wh, config(), "2026-12").passed
    export_month(config(), wh, "2026-12", "all")
    assert checks.invoice_csv_reconciles(wh, "2026-12", 2).passed
    assert checks.focus_billed_cost_total(wh, "2026-12").passed
    out = periods.exports_dir(wh, "2026-12")
    csv_text = (out / "invoice_lines_2026-12_all.csv").read_text()
    assert ",adjustment,H100-80GB,,0.0005,0.0005,4,0.01,USD,2026-11,reserved" in csv_text
    focus_text = (out / paths.focus_csv_name("2026-12")).read_text()
    assert validate_focus_csv(focus_text) == []
    [row] = [r for r in csv.DictReader(io.StringIO(focus_text)) if r["ChargeClass"] == "Correction"]
    assert (row["BilledCost"], row["ListCost"], row["x_AmountUnrounded"]) == ("0.01", "0.01", "0.002")
    # Its cost is derived from other charges (R12), not unit price × quantity: no unit price.
    assert (row["ListUnitPrice"], row["ContractedUnitPrice"], row["PricingQuantity"]) == ("", "", "0.0005")
    periods.close_period(config(), wh, DECEMBER)
    assert _billed_for_november(wh, "ml-training") == Decimal("10.01")  # = round(10.006)
    assert periods.verify_closed(wh, "2026-11") == []  # November's files are untouched (R16)


def test_a_line_that_changes_and_changes_back(nov_10_004: Warehouse) -> None:
    wh = nov_10_004
    # Within one open month: the late data is itself corrected before December closes — nothing to bill.
    _store(wh, D_NOV, [_training("9005.4", "10.006"), IDLE_2])
    roll_up_month(config(), wh, "2026-12")
    _store(wh, D_NOV, [_training("9003.6", "10.004"), IDLE_2])
    assert roll_up_month(config(), wh, "2026-12").adjustment_count == 0
    assert _adjustments(wh, DECEMBER) == []
    # Across a close: December bills +0.01 and closes; then November is back at 10.004, so January takes
    # the 0.01 back (10.00 − 10.01) and the hours with it.
    _store(wh, D_NOV, [_training("9005.4", "10.006"), IDLE_2])
    _close(wh, DECEMBER)
    _store(wh, D_NOV, [_training("9003.6", "10.004"), IDLE_2])
    summary = roll_up_month(config(), wh, "2027-01")
    assert _adjusted(wh, JAN) == [
        ("ml-training", "reserved", "", Decimal("-0.0005"), Decimal("-0.01"), Decimal("-0.002"))
    ]
    assert summary.reconciliation.ok
    assert checks.invoice_matches_daily_costs(wh, config(), "2027-01").passed
    periods.close_period(config(), wh, JAN)
    assert _billed_for_november(wh, "ml-training") == Decimal("10.00")  # = round(10.004), as at the close


def test_a_line_that_disappears_and_one_that_appears_only_late(nov_10_004: Warehouse) -> None:
    """The late data says ml-training's pod was someone else's (__unallocated__), and serving held a MIG
    instance nobody had seen: ml-training's line goes, two lines come."""
    wh = nov_10_004
    _store(
        wh,
        D_NOV,
        [
            ("__unallocated__", "reserved", "H100-80GB", None, "9003.6", "9003.6", "10.004"),
            ("serving", "reserved", "H100-80GB", "3g.40gb", "3600", "1542.857142857143", "1.714285714286"),
            IDLE_2,
        ],
    )
    summary = roll_up_month(config(), wh, "2026-12")
    assert _adjusted(wh, DECEMBER) == [
        # Gone: minus what was billed (10.00), not minus the exact 10.004.
        ("ml-training", "reserved", "", Decimal("-2.501"), Decimal("-10.00"), Decimal("-10.004")),
        # New: the line rounded, as if it had been there at the close.
        ("serving", "reserved", "3g.40gb", Decimal(1), Decimal("1.71"), Decimal("1.714285714286")),
        ("__unallocated__", "reserved", "", Decimal("2.501"), Decimal("10.00"), Decimal("10.004")),
    ]
    assert summary.reconciliation.ok  # Nov's pool +1.714285714286: 4 + 1.714285714286 exact, 5.71 rounded
    assert summary.reconciliation.lines_rounded == Decimal("5.71")
    assert checks.invoice_matches_daily_costs(wh, config(), "2026-12").passed


def test_a_second_correction_after_a_first_adjustment(nov_10_004: Warehouse) -> None:
    wh = nov_10_004
    _store(wh, D_NOV, [_training("9005.4", "10.006"), IDLE_2])
    _close(wh, DECEMBER)  # +0.01: billed for November so far 10.00 + 0.01
    # More late data: 10.016 (2.504 h) rounds to 10.02, so January bills 10.02 − 10.01 = +0.01.
    _store(wh, D_NOV, [_training("9014.4", "10.016"), IDLE_2])
    _store(wh, date(2027, 1, 4), DEC_ROWS)
    summary = roll_up_month(config(), wh, "2027-01")
    assert _adjusted(wh, JAN) == [
        ("ml-training", "reserved", "", Decimal("0.0025"), Decimal("0.01"), Decimal("0.010"))
    ]
    assert summary.reconciliation.ok
    assert checks.invoice_matches_daily_costs(wh, config(), "2027-01").passed
    periods.close_period(config(), wh, JAN)
    assert _billed_for_november(wh, "ml-training") == Decimal("10.02")  # = round(10.016)
    # December, closed with its adjustment, is untouched by January's.
    assert periods.verify_closed(wh, "2026-12") == []


def test_what_moves_hours_is_a_line_what_rounds_to_nothing_is_not(nov_10_004: Warehouse) -> None:
    """No line with zero hours and a zero amount: an exact change that moves no hours and leaves the line's
    rounding as billed (a price restated from 10.004 to 10.003 for the same hours) bills nothing. A change
    of hours is shown even when the amount stays (10.0044: still 10.00)."""
    wh = nov_10_004
    _store(wh, D_NOV, [_training("9003.6", "10.003"), IDLE_2])
    summary = roll_up_month(config(), wh, "2026-12")
    assert _adjustments(wh, DECEMBER) == []
    [found] = adjustments.corrections(config(), wh, DECEMBER, lambda t, d: wh.read_days(MARTS, t, d))
    assert found.unbilled == Decimal("-0.001") and found.pool_delta == Decimal(0) and found.billed_delta == 0
    assert summary.reconciliation.ok  # December against its own 4.00: nothing of November is billed
    # The invoice check sees the same: no line bills anything, and the exact change under half a cent has
    # no line because it rounds to nothing on a line whose hours did not move.
    assert checks.invoice_matches_daily_costs(wh, config(), "2026-12").passed
    _store(wh, D_NOV, [_training("9003.96", "10.0044"), IDLE_2])
    roll_up_month(config(), wh, "2026-12")
    assert _adjusted(wh, DECEMBER) == [
        ("ml-training", "reserved", "", Decimal("0.0001"), Decimal("0.00"), Decimal("0.0004"))
    ]
