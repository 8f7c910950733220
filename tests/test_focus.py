"""FOCUS 1.2 export (output contract): every column against FOCUS rules, sums, corrections (R16)."""

import csv
import io
import json
from datetime import date
from decimal import Decimal

import pyarrow as pa
from focus_validator import validate_focus_csv
from test_invoices import config, daily

from gpumeter.billing.focus import FOCUS_COLUMNS, focus_csv
from gpumeter.billing.invoices import LineSums, Period, build_invoice_lines, lines_table, make_lines

NOV, DEC = Period.parse("2026-11"), Period.parse("2026-12")
ROWS = [
    (date(2026, 12, 1), "ml-training", "reserved", "H100-80GB", None, "7200", "7200", "8"),
    (
        date(2026, 12, 1),
        "serving",
        "reserved",
        "H100-80GB",
        "3g.40gb",
        "3600",
        "1542.857142857143",
        "1.714285714286",
    ),
    (date(2026, 12, 1), "__unallocated__", "reserved", "H100-80GB", None, "900", "900", "1"),
    (date(2026, 12, 1), "__idle__", "idle", "H100-80GB", None, "0", "1800", "2.005"),
]


def _december_with_correction(daily_rows: pa.Table | None = None) -> pa.Table:
    """December's lines (ROWS, or `daily_rows`) and one adjustment line for November."""
    usage = build_invoice_lines(daily(ROWS) if daily_rows is None else daily_rows, config(), DEC).to_pylist()
    # R16: one more GPU-hour of November for ml-training, at 4.0 per GPU-hour.
    late = {
        ("ml-training", "reserved", "H100-80GB", ""): LineSums(
            device_hours=Decimal(1), gpu_hours=Decimal(1), amount=Decimal(4)
        )
    }
    return lines_table(usage + make_lines(late, config(), DEC, corrects=NOV))


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_export_passes_the_focus_validator() -> None:
    text = focus_csv(_december_with_correction(), config(), DEC)
    assert validate_focus_csv(text) == []
    assert tuple(_rows(text)[0]) == FOCUS_COLUMNS


def test_validator_catches_broken_files() -> None:
    good = focus_csv(_december_with_correction(), config(), DEC)
    header, first, *rest = good.splitlines()
    bad_header = header.replace("PricingUnit", "PricingUnits").replace("x_GpuModel", "GpuModel")
    problems = validate_focus_csv("\n".join([bad_header, first, *rest]))
    assert "mandatory column PricingUnit is missing" in problems
    assert "column 'GpuModel' is neither FOCUS 1.2 nor prefixed x_" in problems
    row = _rows(good)[0]
    row.update(BillingPeriodStart="2026-12-01 00:00:00", ChargeClass="Refund", BillingCurrency="usd")
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=FOCUS_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerow(row)
    problems = validate_focus_csv(out.getvalue())
    assert any("BillingPeriodStart" in p and "ISO 8601" in p for p in problems)
    assert any("ChargeClass 'Refund'" in p for p in problems)
    assert any("BillingCurrency 'usd'" in p for p in problems)
    closed = _rows(focus_csv(_december_with_correction(), config(), DEC, closed=True))
    closed[1]["InvoiceId"] = ""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=FOCUS_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(closed)
    assert validate_focus_csv(out.getvalue()) == ["line 3: InvoiceId is null while other lines carry one"]


def test_costs_sum_to_the_invoice_lines_r12() -> None:
    lines = _december_with_correction()
    rows = _rows(focus_csv(lines, config(), DEC))
    invoiced = sum(lines.column("amount").to_pylist(), Decimal(0))
    # Hand-computed: 8.00 + 1.71 + 1.00 + 2.00 (2.005 half-even) + 4.00 correction.
    assert invoiced == Decimal("16.71")
    for column in ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost"):
        assert sum(Decimal(r[column]) for r in rows) == Decimal("16.71")
    serving = next(r for r in rows if r["SubAccountId"] == "serving")
    assert serving["PricingQuantity"] == "0.428571429"  # 3/7 GPU-hour (R3), GPU-equivalents
    assert serving["PricingUnit"] == "GPU-Hours"
    assert serving["ConsumedQuantity"] == "1" and serving["ConsumedUnit"] == "Hours"  # one MIG instance-hour
    assert serving["x_MigProfile"] == "3g.40gb" and serving["ResourceType"] == "MIG instance"


def test_correction_rows_name_the_period_they_correct_r16() -> None:
    rows = _rows(focus_csv(_december_with_correction(), config(), DEC))
    correction = [r for r in rows if r["ChargeClass"]]
    assert len(correction) == 1
    row = correction[0]
    assert row["ChargeCategory"] == "Adjustment" and row["ChargeClass"] == "Correction"
    assert (row["ChargePeriodStart"], row["ChargePeriodEnd"]) == (
        "2026-11-01T00:00:00Z",
        "2026-12-01T00:00:00Z",
    )
    assert (row["BillingPeriodStart"], row["BillingPeriodEnd"]) == (
        "2026-12-01T00:00:00Z",
        "2027-01-01T00:00:00Z",
    )
    assert row["ChargeDescription"].startswith("Correction of 2026-11")
    assert row["x_CorrectsPeriod"] == "2026-11" and row["BilledCost"] == "4.00"
    assert row["ConsumedQuantity"] == "" and row["InvoiceId"] == ""  # December is a draft: not invoiced
    assert json.loads(row["Tags"])["corrects_period"] == "2026-11"
    usage = [r for r in rows if not r["ChargeClass"]]
    assert {r["ChargeCategory"] for r in usage} == {"Usage"}


def test_invoice_id_only_once_the_month_is_closed() -> None:
    """FOCUS 1.2 InvoiceId: null on a charge associated with no issued (or provisional) invoice, not null on
    one that is. A draft month's invoices are not issued; closing the month issues them (R16)."""
    lines = _december_with_correction()
    draft = focus_csv(lines, config(), DEC)
    closed = focus_csv(lines, config(), DEC, closed=True)
    assert {r["InvoiceId"] for r in _rows(draft)} == {""}
    # Each line on its tenant's invoice of the billing period; November's correction on December's.
    assert sorted((r["SubAccountId"], r["ChargeClass"], r["InvoiceId"]) for r in _rows(closed)) == [
        ("__idle__", "", "INV-2026-12-__IDLE__"),
        ("__unallocated__", "", "INV-2026-12-__UNALLOCATED__"),
        ("ml-training", "", "INV-2026-12-ML-TRAINING"),
        ("ml-training", "Correction", "INV-2026-12-ML-TRAINING"),
        ("serving", "", "INV-2026-12-SERVING"),
    ]
    assert validate_focus_csv(draft) == [] and validate_focus_csv(closed) == []
    # Only the InvoiceId column differs.
    for a, b in zip(_rows(draft), _rows(closed), strict=True):
        assert {k for k in a if a[k] != b[k]} == {"InvoiceId"}


def test_efficiency_and_tenant_columns() -> None:
    rows = [(date(2026, 12, 1), "ml-training", "reserved", "H100-80GB", None, "7200", "7200", "8")]
    table = daily(rows).append_column("busy_gpu_seconds", daily(rows).column("gpu_seconds"))
    table = table.set_column(
        table.schema.get_field_index("busy_gpu_seconds"),
        "busy_gpu_seconds",
        daily([(*rows[0][:6], "1800", "0")]).column("gpu_seconds"),
    )
    out = _rows(focus_csv(build_invoice_lines(table, config(), DEC), config(), DEC))[0]
    assert out["x_GpuEfficiency"] == "0.25"  # 0.5 busy GPU-hours of 2 held (R10)
    assert out["SubAccountId"] == out["SubAccountName"] == "ml-training"
    assert out["x_CostCenter"] == "CC-1" and out["ServiceCategory"] == "Compute"


def test_formula_injection_in_focus_cells() -> None:
    cfg = config().model_copy(update={"pool": '=HYPERLINK("http://x")'})
    lines = build_invoice_lines(daily(ROWS), cfg, DEC)
    text = focus_csv(lines, cfg, DEC)
    for row in _rows(text):
        for column, value in row.items():
            if column not in ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost"):
                assert not value.startswith(("=", "+", "@", "\t", "\r")), (column, value)
        assert row["BillingAccountId"] == '\'=HYPERLINK("http://x")'


def test_energy_lines_are_priced_per_kwh() -> None:
    import pyarrow as pa

    rows = [(date(2026, 12, 1), "ml-training", "energy", "H100-80GB", None, "0", "0", "0.36")]
    table = daily(rows)
    table = table.append_column("energy_joules", pa.array([Decimal(4_320_000)], pa.decimal128(38, 12)))
    out = _rows(focus_csv(build_invoice_lines(table, config(), DEC), config(), DEC))
    assert validate_focus_csv(focus_csv(build_invoice_lines(table, config(), DEC), config(), DEC)) == []
    # 4.32 MJ = 1.2 kWh; 0.36 / 1.2 = 0.3 per kWh (hand-computed).
    assert (out[0]["PricingQuantity"], out[0]["PricingUnit"], out[0]["ListUnitPrice"]) == (
        "1.2",
        "kWh",
        "0.3",
    )
    assert out[0]["BilledCost"] == "0.36" and out[0]["x_GpuEfficiency"] == ""
