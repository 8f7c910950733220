"""A month that does not reconcile, or a day half written, is never invoiced or closed.

Real Parquet warehouses built with the hand-made daily marts of tests/test_periods.py; `gpumeter invoices`
and `gpumeter close` through the CLI's main (the real invoice_month Dagster job), and the job itself for the
blocking check. Amounts are worked out by hand: each stored day of NOV_ROWS charges ml-training 4.00, serving
2.00 and __idle__ 4.00, a pool cost of 10.00."""

import json
import re
from datetime import date
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_invoices import CONFIG, DEC, config
from test_periods import D_DEC, D_NOV, DEC_ROWS, NOV_ROWS, _store

from gpumeter.billing import periods
from gpumeter.billing.month import check_month, roll_up_month
from gpumeter.billing.refusals import MonthRefused, half_written_days
from gpumeter.cli.main import main
from gpumeter.pipelines import checks
from gpumeter.storage import audit
from gpumeter.storage.paths import MARTS
from gpumeter.storage.warehouse import Warehouse

D_29 = date(2026, 11, 29)
PERIOD = "2026-11"


@pytest.fixture
def month(tmp_path: Path) -> tuple[Warehouse, Path]:
    """November with two whole days (29th and 30th, 10.00 each: 20.00), and its config file."""
    wh = Warehouse.at(tmp_path / "wh")
    _store(wh, D_29, NOV_ROWS)
    _store(wh, D_NOV, NOV_ROWS)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(
        CONFIG.format(currency="USD") + f"warehouse: {{path: {json.dumps(str(wh.root))}}}\n"
    )
    return wh, config_path


def _invoices(config_path: Path, out: Path, period: str = PERIOD) -> int:
    return main(["invoices", "--config", str(config_path), "--period", period, "--out", str(out)])


def _close(config_path: Path, period: str = PERIOD) -> int:
    return main(["close", "--config", str(config_path), "--period", period, "--by", "cfo"])


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line the command printed, without the path of its full log, which it names last."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    assert err.startswith("error: ")
    return re.sub(r" \(the full log: [^)]*\)$", "", err.strip())


def _nothing_written(wh: Warehouse, out: Path, period: str = PERIOD) -> None:
    """No export file (in the warehouse or copied out), no invoice lines, no closed period, no audit line."""
    assert not periods.exports_dir(wh, period).exists()
    assert not out.exists() or not any(out.iterdir())
    assert not periods.invoice_lines_path(wh, period).exists()
    assert not periods.manifest_path(wh, period).exists()
    assert not periods.closed_lines_path(wh, period).exists()
    assert audit.read_audit(wh) == []


def _set_pool_cost(wh: Warehouse, day: date, amount: str) -> None:
    """Overwrite the stored pool cost of a day (as a stale or damaged file would read)."""
    path = wh.day_path(MARTS, "pool_daily_cost", "c1", day)
    pq.write_table(
        pa.table({"day": pa.array([day], pa.date32()), "pool_cost": pa.array([Decimal(amount)], DEC)}), path
    )


# --- (a) a day half written ------------------------------------------------------------------------


def test_a_day_without_its_tenants_charges_is_neither_invoiced_nor_closed(
    month: tuple[Warehouse, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wh, config_path = month
    # The disk filled after the 29th's pool cost was written and before its tenants' charges were.
    wh.day_path(MARTS, "tenant_daily_cost", "c1", D_29).unlink()
    out = tmp_path / "out"

    assert _invoices(config_path, out) == 2
    line = _error_line(capsys)
    assert line == (
        "error: 2026-11 cannot be invoiced: day 2026-11-29 of cluster c1 is half written, its pool cost is "
        "stored but not its tenants' charges; meter it again with "
        f"`gpumeter run --config {config_path} --start 2026-11-29 --end 2026-11-29 --cluster c1`, then run "
        "this again"
    )
    _nothing_written(wh, out)

    assert _close(config_path) == 2
    line = _error_line(capsys)
    assert line.startswith("error: 2026-11 cannot be closed: day 2026-11-29 of cluster c1 is half written")
    assert "tenants' charges" in line and "--start 2026-11-29 --end 2026-11-29 --cluster c1" in line
    _nothing_written(wh, out)


def test_a_day_without_its_pool_cost_is_refused_too(
    month: tuple[Warehouse, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wh, config_path = month
    wh.day_path(MARTS, "pool_daily_cost", "c1", D_NOV).unlink()
    out = tmp_path / "out"
    for command in (lambda: _invoices(config_path, out), lambda: _close(config_path)):
        assert command() == 2
        line = _error_line(capsys)
        assert (
            "day 2026-11-30 of cluster c1 is half written, its tenants' charges are stored but not its pool cost"
            in line
        )
        _nothing_written(wh, out)


def test_a_day_with_other_figures_but_neither_pool_cost_nor_charges_is_half_written(
    month: tuple[Warehouse, Path],
) -> None:
    wh, _ = month
    # The day's first table was written (here, its data quality), then nothing: the disk was full.
    d = date(2026, 11, 28)
    wh.write_day(MARTS, "data_quality", "c1", d, pa.table({"day": pa.array([d], pa.date32())}))
    assert [(h.cluster, h.day, h.describe()) for h in half_written_days(wh, [d, D_29, D_NOV])] == [
        ("c1", d, "neither its pool cost nor its tenants' charges are stored (other figures of the day are)")
    ]
    with pytest.raises(MonthRefused, match="day 2026-11-28 of cluster c1 is half written"):
        roll_up_month(config(), wh, PERIOD)
    assert not periods.invoice_lines_path(wh, PERIOD).exists()


def test_a_half_written_day_of_a_closed_month_refuses_the_month_that_corrects_it(
    month: tuple[Warehouse, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """December carries November's adjustments, recomputed from November's stored days: a half-written
    day there would bill every tenant's November charges of that day back."""
    wh, config_path = month
    _store(wh, D_DEC, DEC_ROWS)
    assert _close(config_path) == 0
    capsys.readouterr()
    wh.day_path(MARTS, "tenant_daily_cost", "c1", D_NOV).unlink()
    out = tmp_path / "out"
    assert _invoices(config_path, out, "2026-12") == 2
    line = _error_line(capsys)
    assert line.startswith(
        "error: 2026-12 cannot be invoiced: day 2026-11-30 of cluster c1 (in the closed month 2026-11, "
        "which it corrects) is half written"
    )
    assert not periods.exports_dir(wh, "2026-12").exists()
    assert not periods.invoice_lines_path(wh, "2026-12").exists()


# --- (b) a month that does not reconcile -----------------------------------------------------------


def test_a_month_that_does_not_reconcile_is_neither_invoiced_nor_closed(
    month: tuple[Warehouse, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wh, config_path = month
    # The 30th's pool cost reads 12.50 while its tenants' charges add up to 10.00: the month's invoices total
    # 8.00 + 4.00 + 8.00 = 20.00 against a pool cost of 10.00 + 12.50 = 22.50, 2.50 short; rounding allows
    # half a cent on each of its 3 lines, 0.015.
    _set_pool_cost(wh, D_NOV, "12.50")
    out = tmp_path / "out"

    assert _invoices(config_path, out) == 2
    line = _error_line(capsys)
    assert line == (
        "error: 2026-11 cannot be invoiced: it does not reconcile, the invoices total 20.00 USD against a "
        "pool cost of 22.50 USD, a difference of -2.50 USD (rounding allows 0.015 USD); on day 2026-11-30 of "
        "cluster c1 the tenants' charges are 10.00 USD against a pool cost of 12.50 USD: meter it again with "
        f"`gpumeter run --config {config_path} --start 2026-11-30 --end 2026-11-30 --cluster c1`, then run "
        "this again"
    )
    _nothing_written(wh, out)

    assert _close(config_path) == 2
    line = _error_line(capsys)
    assert line.startswith(
        "error: 2026-11 cannot be closed: it does not reconcile, the invoices total 20.00 USD against a pool "
        "cost of 22.50 USD, a difference of -2.50 USD"
    )
    _nothing_written(wh, out)


def test_a_draft_that_no_longer_reconciles_is_not_closed(
    month: tuple[Warehouse, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Invoiced as a draft while it reconciled; a pool cost restated since (7.75 for the 29th: 17.75 in all,
    2.25 less than the 20.00 invoiced) keeps it from closing, and the draft's files stay as they were."""
    wh, config_path = month
    out = tmp_path / "out"
    assert _invoices(config_path, out) == 0
    drafts = {p.name: p.read_bytes() for p in periods.exports_dir(wh, PERIOD).iterdir()}
    capsys.readouterr()
    _set_pool_cost(wh, D_29, "7.75")
    assert _close(config_path) == 2
    line = _error_line(capsys)
    assert "the invoices total 20.00 USD against a pool cost of 17.75 USD, a difference of +2.25 USD" in line
    assert (
        "on day 2026-11-29 of cluster c1 the tenants' charges are 10.00 USD against a pool cost of 7.75 USD"
        in line
    )
    assert not periods.manifest_path(wh, PERIOD).exists() and audit.read_audit(wh) == []
    assert {p.name: p.read_bytes() for p in periods.exports_dir(wh, PERIOD).iterdir()} == drafts


def test_an_exact_difference_that_rounding_hides_is_named_before_rounding(
    month: tuple[Warehouse, Path],
) -> None:
    """A pool cost 0.000000000001 above the charges rounds to the same 20.00: the totals after rounding agree,
    the exact ones do not, and the month is still refused, naming the exact difference."""
    wh, _ = month
    _set_pool_cost(wh, D_NOV, "10.000000000001")
    with pytest.raises(MonthRefused) as refused:
        check_month(config(), wh, PERIOD, config_path="config.yaml")
    assert (
        "the invoices total 20.00 USD against a pool cost of 20.000000000001 USD, a difference of "
        "-0.000000000001 USD before rounding"
    ) in str(refused.value)
    assert refused.value.figures["difference"] == "-1E-12"


# --- (c) a clean month ---------------------------------------------------------------------------------


def test_a_clean_month_is_invoiced_and_closed(
    month: tuple[Warehouse, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wh, config_path = month
    rec = check_month(config(), wh, PERIOD)
    assert rec is not None and rec.ok
    assert (rec.lines_rounded, rec.pool_cost) == (Decimal("20.00"), Decimal("20"))
    out = tmp_path / "out"
    assert _invoices(config_path, out) == 0
    assert (out / "invoice_lines_2026-11_all.csv").exists()
    assert _close(config_path) == 0
    manifest = periods.read_manifest(wh, PERIOD)
    assert manifest is not None and manifest["total"] == "20.00"
    # Closed, it is never rolled up again: nothing to refuse, and invoices copy the closed files.
    assert check_month(config(), wh, PERIOD) is None
    assert _invoices(config_path, tmp_path / "again") == 0
    assert capsys.readouterr().err == ""


# --- the Dagster side: the month's check blocks every export -------------------------------------------


def _run_invoice_month(config_path: Path, period: str = PERIOD):
    from gpumeter.pipelines.definitions import INVOICE_MONTH_JOB, build_definitions
    from gpumeter.pipelines.launch import QUIET

    job = build_definitions(config_path).resolve_job_def(INVOICE_MONTH_JOB)
    return job.execute_in_process(partition_key=f"{period}-01", run_config=QUIET, raise_on_error=False)


def _materialized(result) -> set[str]:
    return {
        e.step_materialization_data.materialization.asset_key.to_user_string()
        for e in result.get_asset_materialization_events()
    }


def test_the_month_check_is_blocking_and_no_export_runs_when_it_fails(month: tuple[Warehouse, Path]) -> None:
    wh, config_path = month
    assert checks.MONTH_RECONCILES_CHECK.blocking and checks.INVOICE_CSV_CHECK.blocking
    assert checks.INVOICE_LINES_CHECK.blocking
    _set_pool_cost(wh, D_NOV, "12.50")
    result = _run_invoice_month(config_path)
    assert not result.success
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    failed = evaluations["month_reconciles_r13"]
    assert not failed.passed
    figures = {k: getattr(v, "value", v) for k, v in failed.metadata.items()}
    assert figures["reason"] == "does not reconcile"
    assert Decimal(figures["invoiced_rounded"]) == Decimal("20.00")
    assert Decimal(figures["pool_cost_with_adjustments"]) == Decimal("22.50")
    assert Decimal(figures["difference"]) == Decimal("-2.50")
    assert "2026-11 cannot be invoiced: it does not reconcile" in figures["refused"]
    assert _materialized(result) == set()  # not the lines, nor the CSVs, FOCUS or invoices
    assert not periods.exports_dir(wh, PERIOD).exists()
    assert not periods.invoice_lines_path(wh, PERIOD).exists()

    _set_pool_cost(wh, D_NOV, "10.00")
    result = _run_invoice_month(config_path)
    assert result.success
    assert {e.check_name: e.passed for e in result.get_asset_check_evaluations()}["month_reconciles_r13"]
    assert _materialized(result) == {"invoice_lines", "invoice_csv", "invoice_focus", "invoice_documents"}


def test_a_csv_that_does_not_reconcile_blocks_the_focus_file(
    month: tuple[Warehouse, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CSV's own reconciliation is blocking too: no FOCUS file is written from a CSV that fails it."""
    from dagster import AssetCheckResult, AssetCheckSeverity

    wh, config_path = month

    def fails(*_: object) -> AssetCheckResult:
        spec = checks.INVOICE_CSV_CHECK
        return AssetCheckResult(
            check_name=spec.name, asset_key=spec.asset_key, passed=False, severity=AssetCheckSeverity.ERROR
        )

    monkeypatch.setattr(checks, "invoice_csv_reconciles", fails)
    result = _run_invoice_month(config_path)
    assert not result.success
    assert "invoice_focus" not in _materialized(result)
    assert not (periods.exports_dir(wh, PERIOD) / "invoice_lines_2026-11_all.focus.csv").exists()
