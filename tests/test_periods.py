"""The invoice lifecycle (R16): close, immutability, adjustments in the next open period, reopen, audit log.

Fast tests write hand-made daily marts into a real warehouse; the end-to-end test runs the real Dagster
jobs on a simulated day, then lets late samples arrive for a closed month."""

import hashlib
import json
from datetime import date
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_invoices import DEC, config, daily

from metering import periods
from metering.invoices import Period
from metering.runner import export_month, roll_up_month
from metering.warehouse import MARTS, Warehouse
from pipelines import checks

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
    assert checks.invoice_matches_daily_costs(warehouse, "2026-11").passed


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
    assert checks.invoice_matches_daily_costs(warehouse, "2026-12").passed
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
    assert checks.invoice_matches_daily_costs(warehouse, "2027-01").passed


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
    log = [json.loads(line) for line in periods.audit_log_path(warehouse).read_text().splitlines()]
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
    from metering import simulator
    from metering.cli import main, write_demo_config
    from metering.config import load_config
    from pipelines.launch import invoice_month, meter_days

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

    from metering.cli import main

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
        "tenant_invoice_2026-11_serving.html",
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
    assert [e["event"] for e in periods.read_audit(warehouse)] == ["close", "reopen"]


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
            assert summary.reconciliation.exact  # R13: Σ adjustments = Δ pool cost of November
            periods.close_period(config(), wh, month)
        billed: dict[tuple, Decimal] = {}
        for key in periods.closed_periods(wh):
            for row in periods.stored_lines(wh, key).to_pylist():
                if key == "2026-11" or row["corrects_period"] == "2026-11":
                    charge = row["corrects_charge_type"] or row["charge_type"]
                    k = (row["tenant"], charge, row["mig_profile"])
                    billed[k] = billed.get(k, Decimal(0)) + row["amount_unrounded"]
        final = {(r[0], r[1], r[3] or ""): Decimal(r[6]) for r in versions[-1]}
        assert {k: v for k, v in billed.items() if v} == {k: v for k, v in final.items() if v}
