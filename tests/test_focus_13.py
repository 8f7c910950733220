"""FOCUS 1.3 export (config `focus_version: "1.3"`): its columns, the split cost allocation columns line by
line, costs that still sum to the invoices, and 1.2 unchanged without the field. Expected values are
worked out by hand from the lines below (docs/billing.md, "FOCUS 1.3")."""

import csv
import io
import json
from datetime import date
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from focus_validator import validate_focus_csv
from test_focus import _december_with_correction, _rows
from test_invoices import config, daily
from test_periods import NOV_ROWS, _store

from gpumeter.billing import invoice_checks as checks
from gpumeter.billing import periods
from gpumeter.billing.focus import FOCUS_COLUMNS, focus_csv
from gpumeter.billing.invoices import Period, build_invoice_lines
from gpumeter.billing.month import roll_up_month
from gpumeter.config import parse_config
from gpumeter.storage import paths
from gpumeter.storage.warehouse import Warehouse

NOV, DEC = Period.parse("2026-11"), Period.parse("2026-12")
D = date(2026, 12, 1)
# (tenant, charge type, model, MIG profile, device-s, GPU-s, amount, energy J)
ROWS = [
    # Whole H100s, held 1.5 + 0.5 + 0.25 GPU-hours at 4.00: 6 + 2 + 1 = 9.
    ("ml-training", "reserved", "H100-80GB", None, "5400", "5400", "6", "0"),
    ("serving", "reserved", "H100-80GB", None, "1800", "1800", "2", "0"),
    ("__unallocated__", "reserved", "H100-80GB", None, "900", "900", "1", "0"),
    # One 3g.40gb instance for an hour: 3/7 GPU-hour, held by serving alone.
    ("serving", "reserved", "H100-80GB", "3g.40gb", "3600", "1542.857142857143", "1.714285714286", "0"),
    # Idle capacity: nobody held it, nothing is split.
    ("__idle__", "idle", "H100-80GB", None, "0", "3600", "3", "0"),
    # A100s: three equal thirds, which do not add up to 1 at nine decimals.
    ("ml-training", "reserved", "A100-80GB", None, "3600", "3600", "1", "0"),
    ("serving", "reserved", "A100-80GB", None, "3600", "3600", "1", "0"),
    ("__unallocated__", "reserved", "A100-80GB", None, "3600", "3600", "1", "0"),
    # Energy: 1.2 kWh drawn by ml-training's pods, 0.4 kWh by nobody (__idle__'s), at 0.30 per kWh.
    ("ml-training", "energy", "H100-80GB", None, "0", "0", "0.36", "4320000"),
    ("__idle__", "energy", "H100-80GB", None, "0", "0", "0.12", "1440000"),
]

FOCUS_13_HEADER = (
    "AllocatedMethodDetails",
    "AllocatedMethodId",
    "AllocatedResourceId",
    "AllocatedResourceName",
    "AllocatedTags",
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "HostProviderName",
    "InvoiceId",
    "InvoiceIssuerName",
    "ListCost",
    "ListUnitPrice",
    "PricingCategory",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "ServiceProviderName",
    "ServiceSubcategory",
    "SkuId",
    "SkuMeter",
    "SkuPriceId",
    "SubAccountId",
    "SubAccountName",
    "Tags",
    "x_ChargeType",
    "x_CorrectsPeriod",
    "x_CostCenter",
    "x_GpuEfficiency",
    "x_GpuModel",
    "x_MigProfile",
    "x_AmountUnrounded",
)
ALLOCATED = FOCUS_13_HEADER[:5]


def config_13(**update: object):
    return config().model_copy(update={"focus_version": "1.3", **update})


def _lines() -> pa.Table:
    table = daily([(D, *r[:7]) for r in ROWS])
    table = table.append_column(
        "energy_joules", pa.array([Decimal(r[7]) for r in ROWS], pa.decimal128(38, 12))
    )
    return _december_with_correction(table)  # with R16's late GPU-hour of November for ml-training


def _by_line(text: str) -> dict[tuple[str, str, str], dict[str, str]]:
    """Rows by (tenant, charge type, SKU's model/profile)."""
    return {(r["SubAccountId"], r["x_ChargeType"], r["ResourceId"]): r for r in _rows(text)}


def _details(elements: str) -> str:
    return '{"Elements":[{' + elements + "}]}"


def test_a_13_export_has_the_specifications_columns() -> None:
    text = focus_csv(_lines(), config_13(), DEC)
    assert tuple(_rows(text)[0]) == FOCUS_13_HEADER
    assert validate_focus_csv(text, "1.3") == []
    for row in _rows(text):
        # FOCUS 1.3: the replacements, and the deprecated columns, still mandatory and not null.
        assert row["ServiceProviderName"] == row["HostProviderName"] == "gpu-pool"
        assert row["ProviderName"] == row["PublisherName"] == "gpu-pool"


def test_without_the_field_the_export_is_focus_12_as_before() -> None:
    assert config().focus_version == "1.2"
    text = focus_csv(_lines(), config(), DEC)
    header = next(csv.reader(io.StringIO(text)))
    assert tuple(header) == FOCUS_COLUMNS
    assert not {"ServiceProviderName", "HostProviderName", *ALLOCATED} & set(header)
    assert focus_csv(_lines(), config().model_copy(update={"focus_version": "1.2"}), DEC) == text
    assert validate_focus_csv(text) == []
    # Tags keep the tenant's cost center in 1.2.
    ml = _by_line(text)[("ml-training", "reserved", "gpu-pool/H100-80GB")]
    assert json.loads(ml["Tags"]) == {
        "charge_type": "reserved",
        "gpu_model": "H100-80GB",
        "cost_center": "CC-1",
    }


def test_split_cost_allocation_columns_line_by_line() -> None:
    rows = _by_line(focus_csv(_lines(), config_13(), DEC))
    alloc = {key: tuple(row[c] for c in ALLOCATED) for key, row in rows.items()}
    h100, mig, a100 = "gpu-pool/H100-80GB", "gpu-pool/H100-80GB/3g.40gb", "gpu-pool/A100-80GB"
    gpu_hours = ',"UsageUnit":"GPU-Hours"'
    cc1, cc2 = '{"cost_center": "CC-1"}', '{"cost_center": "CC-2"}'
    assert alloc == {
        # 6/9, 2/9, 1/9 of the whole H100s' reserved charge: 0.666666667 + 0.222222222 + 0.111111111 = 1.
        ("ml-training", "reserved", h100): (
            _details('"AllocatedRatio":0.666666667,"UsageQuantity":1.5' + gpu_hours),
            "equal-share",
            "ml-training",
            "ml-training",
            cc1,
        ),
        ("serving", "reserved", h100): (
            _details('"AllocatedRatio":0.222222222,"UsageQuantity":0.5' + gpu_hours),
            "equal-share",
            "serving",
            "serving",
            cc2,
        ),
        # Unmapped workloads: the unallocated portion of the split; no recipient, no recipient's tags.
        ("__unallocated__", "reserved", h100): (
            _details('"AllocatedRatio":0.111111111,"UsageQuantity":0.25' + gpu_hours),
            "equal-share",
            "",
            "",
            "",
        ),
        # One holder: the whole origin charge.
        ("serving", "reserved", mig): (
            _details('"AllocatedRatio":1,"UsageQuantity":0.428571429' + gpu_hours),
            "equal-share",
            "serving",
            "serving",
            cc2,
        ),
        # Thirds: 0.333333333 × 3 = 0.999999999; the first largest (ml-training, first in line order)
        # takes the remaining 0.000000001.
        ("ml-training", "reserved", a100): (
            _details('"AllocatedRatio":0.333333334,"UsageQuantity":1' + gpu_hours),
            "equal-share",
            "ml-training",
            "ml-training",
            cc1,
        ),
        ("serving", "reserved", a100): (
            _details('"AllocatedRatio":0.333333333,"UsageQuantity":1' + gpu_hours),
            "equal-share",
            "serving",
            "serving",
            cc2,
        ),
        ("__unallocated__", "reserved", a100): (
            _details('"AllocatedRatio":0.333333333,"UsageQuantity":1' + gpu_hours),
            "equal-share",
            "",
            "",
            "",
        ),
        # Energy: 0.36 and 0.12 of 0.48, by the kWh each drew.
        ("ml-training", "energy", h100): (
            _details('"AllocatedRatio":0.75,"UsageQuantity":1.2,"UsageUnit":"kWh"'),
            "equal-share",
            "ml-training",
            "ml-training",
            cc1,
        ),
        ("__idle__", "energy", h100): (
            _details('"AllocatedRatio":0.25,"UsageQuantity":0.4,"UsageUnit":"kWh"'),
            "equal-share",
            "",
            "",
            "",
        ),
        # Idle capacity and the correction: no split cost allocation, every Allocated* null.
        ("__idle__", "idle", h100): ("", "", "", "", ""),
        ("ml-training", "adjustment", h100): ("", "", "", "", ""),
    }
    # The tenant's cost center moves from Tags to AllocatedTags (FOCUS 1.3: AllocatedTags repeats no Tags
    # key); the correction, not an allocated charge, keeps it in Tags.
    assert json.loads(rows[("ml-training", "reserved", h100)]["Tags"]) == {
        "charge_type": "reserved",
        "gpu_model": "H100-80GB",
    }
    assert json.loads(rows[("ml-training", "adjustment", h100)]["Tags"])["cost_center"] == "CC-1"
    assert rows[("ml-training", "reserved", h100)]["x_CostCenter"] == "CC-1"


def test_the_method_id_names_the_share_rule_in_force() -> None:
    rows = _rows(focus_csv(_lines(), config_13(share="requested"), DEC))
    assert {r["AllocatedMethodId"] for r in rows} == {"requested-share", ""}


def test_idle_shares_are_split_by_charges_r9() -> None:
    """idle_policy: proportional spreads a model's idle over its holders by their charges (R9): the ratio
    is the share of the idle, with no usage unit (hours did not decide it)."""
    rows = [
        ("ml-training", "idle_share", "H100-80GB", None, "0", "2700", "1.5"),
        ("serving", "idle_share", "H100-80GB", None, "0", "900", "0.5"),
    ]
    cfg = config_13(idle_policy="proportional")
    text = focus_csv(build_invoice_lines(daily([(D, *r) for r in rows]), cfg, DEC), cfg, DEC)
    assert validate_focus_csv(text, "1.3") == []
    assert [
        (r["SubAccountId"], r["AllocatedMethodId"], r["AllocatedMethodDetails"]) for r in _rows(text)
    ] == [
        ("ml-training", "idle-pro-rata", _details('"AllocatedRatio":0.75')),
        ("serving", "idle-pro-rata", _details('"AllocatedRatio":0.25')),
    ]


def test_an_origin_that_cost_nothing_is_split_by_quantity() -> None:
    rows = [
        ("ml-training", "reserved", "H100-80GB", None, "900", "900", "0"),
        ("serving", "reserved", "H100-80GB", None, "2700", "2700", "0"),
    ]
    text = focus_csv(build_invoice_lines(daily([(D, *r) for r in rows]), config(), DEC), config_13(), DEC)
    assert validate_focus_csv(text, "1.3") == []
    assert [
        json.loads(r["AllocatedMethodDetails"])["Elements"][0]["AllocatedRatio"] for r in _rows(text)
    ] == [
        0.25,
        0.75,
    ]


def test_costs_still_sum_to_the_invoice_lines_to_the_cent() -> None:
    lines = _lines()
    rows = _rows(focus_csv(lines, config_13(), DEC))
    # By hand: 6 + 2 + 1 + 1.71 (1.714285714286) + 3 + 1 + 1 + 1 + 0.36 + 0.12, and the 4.00 correction.
    assert sum(lines.column("amount").to_pylist(), Decimal(0)) == Decimal("21.19")
    for column in ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost"):
        assert sum(Decimal(r[column]) for r in rows) == Decimal("21.19")
    # Tenant by tenant too: each invoice's lines and their FOCUS rows.
    by_tenant: dict[str, Decimal] = {}
    for r in rows:
        by_tenant[r["SubAccountId"]] = by_tenant.get(r["SubAccountId"], Decimal(0)) + Decimal(r["BilledCost"])
    assert by_tenant == {
        "ml-training": Decimal("11.36"),  # 6 + 1 + 0.36 + 4
        "serving": Decimal("4.71"),  # 2 + 1.71 + 1
        "__unallocated__": Decimal("2.00"),
        "__idle__": Decimal("3.12"),
    }


def test_13_and_12_differ_only_in_the_13_columns_and_the_moved_cost_center() -> None:
    old, new = _rows(focus_csv(_lines(), config(), DEC)), _rows(focus_csv(_lines(), config_13(), DEC))
    for a, b in zip(old, new, strict=True):
        assert {c for c in FOCUS_COLUMNS if a[c] != b[c]} <= {"Tags"}
        tags_12, tags_13 = json.loads(a["Tags"]), json.loads(b["Tags"])
        moved = json.loads(b["AllocatedTags"]) if b["AllocatedTags"] else {}
        assert tags_12 == tags_13 | moved


def _tamper(text: str, change) -> str:
    rows = _rows(text)
    change(rows)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=FOCUS_13_HEADER, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def test_the_validator_catches_broken_13_files() -> None:
    good = focus_csv(_lines(), config_13(), DEC)
    header, *rest = good.splitlines()
    problems = validate_focus_csv(
        "\n".join([header.replace("ServiceProviderName", "ServiceProvider"), *rest]), "1.3"
    )
    assert "mandatory column ServiceProviderName is missing" in problems
    assert "column 'ServiceProvider' is neither FOCUS 1.3 nor prefixed x_" in problems

    def breaks(rows: list[dict[str, str]]) -> None:
        line = {(r["SubAccountId"], r["x_ChargeType"], r["ResourceId"]): r for r in rows}
        h100 = "gpu-pool/H100-80GB"
        ml = line[("ml-training", "reserved", h100)]
        ml["AllocatedMethodDetails"] = ml["AllocatedMethodDetails"].replace("0.666666667", "0.6")
        line[("serving", "reserved", h100)].update(AllocatedTags='{"charge_type": "x"}', HostProviderName="")
        line[("__unallocated__", "reserved", h100)]["AllocatedResourceName"] = "someone"
        line[("__idle__", "idle", h100)]["AllocatedResourceId"] = "nobody"
        line[("ml-training", "adjustment", h100)].update(
            AllocatedMethodId="equal-share",
            AllocatedMethodDetails='{"Elements":[{"AllocatedRatio":1,"UsageQuantity":1}]}',
        )
        line[("ml-training", "energy", h100)]["AllocatedMethodDetails"] = '{"Elements": "all"}'

    problems = validate_focus_csv(_tamper(good, breaks), "1.3")
    assert (
        "origin charge gpu-pool/H100-80GB/reserved/2026-12-01T00:00:00Z/2027-01-01T00:00:00Z: AllocatedRatio sums to 0.933333333, not 1"
        in problems
    )
    assert any("AllocatedTags repeats Tags key 'charge_type'" in p for p in problems)
    assert any("HostProviderName is null" in p for p in problems)
    assert any(
        "AllocatedResourceName must be null exactly when AllocatedResourceId is" in p for p in problems
    )
    assert any("AllocatedResourceId is set on a charge of no split cost allocation" in p for p in problems)
    assert any("UsageQuantity without a UsageUnit" in p for p in problems)
    assert any("AllocatedMethodDetails has no Elements array" in p for p in problems)
    # The eighth: the energy origin's ratios sum to 0.25 once ml-training's is unreadable. The correction's
    # made-up ratio is its own origin (November's), which sums to 1.
    assert len(problems) == 8, problems
    bad_json = _tamper(good, lambda rows: rows[0].update(AllocatedTags="{cost_center: CC-1}"))
    assert _rows(bad_json)[0]["AllocatedMethodId"] == "equal-share"  # an allocated charge
    assert any(
        "AllocatedTags is not a key-value JSON object" in p for p in validate_focus_csv(bad_json, "1.3")
    )


def test_the_month_export_follows_the_config(tmp_path: Path) -> None:
    """The monthly job writes FOCUS 1.3 when the config says so; its BilledCost still matches the CSV."""
    cfg = parse_config(
        "clusters: [{name: c1, source: {kind: parquet, path: /nonexistent}}]\n"
        "rate_card: {models: [{model: H100-80GB, price_per_gpu_hour: 4.0}]}\n"
        "tenants:\n"
        "  - {name: ml-training, cost_center: CC-1, namespaces: [training]}\n"
        "  - {name: serving, cost_center: CC-2, namespaces: [inference]}\n"
        "focus_version: 1.3\n"
    )
    wh = Warehouse.at(tmp_path / "wh")
    _store(wh, date(2026, 11, 30), NOV_ROWS)
    roll_up_month(cfg, wh, "2026-11")
    text = (periods.exports_dir(wh, "2026-11") / paths.focus_csv_name("2026-11")).read_text()
    assert tuple(_rows(text)[0]) == FOCUS_13_HEADER
    assert validate_focus_csv(text, "1.3") == []
    assert checks.focus_billed_cost_total(wh, "2026-11").passed
    # NOV_ROWS: ml-training 4 and serving 2 of the whole H100s' held time (2/3, 1/3); idle 4, not split.
    assert [(r["SubAccountId"], r["AllocatedMethodDetails"]) for r in _rows(text)] == [
        ("ml-training", _details('"AllocatedRatio":0.666666667,"UsageQuantity":1,"UsageUnit":"GPU-Hours"')),
        ("serving", _details('"AllocatedRatio":0.333333333,"UsageQuantity":0.5,"UsageUnit":"GPU-Hours"')),
        ("__idle__", ""),
    ]


@pytest.mark.parametrize("bad", ["1.4", '"1.30"', "2", "focus"])
def test_a_bad_focus_version_is_a_config_error_naming_the_field(bad: str) -> None:
    from test_config import MINIMAL, problems_of

    [(place, message)] = problems_of(f"{MINIMAL}focus_version: {bad}\n")
    assert place == "focus_version (line 4)"
    assert "'1.2' or '1.3'" in message
