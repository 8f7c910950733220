"""FOCUS 1.2 export of invoice lines (output contract; docs/billing.md has the column mapping).

One FOCUS row per invoice line. Costs are the rounded line amounts (R12), so that the FOCUS file sums to
the invoices; no discounts exist, so Billed = Effective = List = Contracted cost. Adjustment lines (R16)
are ChargeCategory `Adjustment`, ChargeClass `Correction`, with the charge period of the period they correct.
An adjustment's cost is computed from other charges (the corrected line rounded minus what was billed, R12),
not as a unit price × quantity: its unit prices are null, as FOCUS has it for such charges.

InvoiceId is the tenant's invoice id once the month is closed (its invoices are issued, R16) and null while
it is a draft: FOCUS 1.2 wants it null on a charge associated neither with an issued invoice nor with a
pre-generated provisional one, and a draft invoice is a preview whose figures change with every metered day.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pyarrow as pa

from gpumeter.billing.invoices import ADJUSTMENT, ENERGY, Period, csv_text, iso_utc, neutralize
from gpumeter.config import IDLE, UNALLOCATED, Config

FOCUS_VERSION = "1.2"
PRICING_UNIT = "GPU-Hours"
ENERGY_UNIT = "kWh"  # `energy` lines are priced per kWh (R10, R14)
CONSUMED_UNIT = "Hours"  # hours of the billed device: a whole GPU or one MIG instance
SERVICE_CATEGORY = (
    "Compute"  # GPU capacity of a Kubernetes pool; the workloads are ML, the service is compute
)
SERVICE_SUBCATEGORY = "Containers"

FOCUS_COLUMNS = (
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

# Numeric columns are written as plain decimals; every other cell is text and is neutralized.
NUMERIC_COLUMNS = frozenset(
    {
        "BilledCost",
        "ConsumedQuantity",
        "ContractedCost",
        "ContractedUnitPrice",
        "EffectiveCost",
        "ListCost",
        "ListUnitPrice",
        "PricingQuantity",
        "x_GpuEfficiency",
        "x_AmountUnrounded",
    }
)

_CHARGE_WORDS = {
    "reserved": "reserved GPU time",
    "usage": "busy GPU time",
    "idle_share": "share of idle pool capacity",
    "idle": "idle pool capacity",
    "energy": "energy",
}


def _number(value: Decimal) -> str:
    return format(value.normalize(), "f") if value else "0"


def _device(row: dict) -> str:
    model = row["gpu_model"] or "unknown model"
    return f"{model} MIG {row['mig_profile']}" if row["mig_profile"] else f"{model} whole GPU"


def _sku(row: dict) -> str:
    charge = row["corrects_charge_type"] if row["charge_type"] == ADJUSTMENT else row["charge_type"]
    parts = [charge, row["gpu_model"] or "unknown", row["mig_profile"] or "whole"]
    return "/".join(parts)


def focus_rows(
    lines: pa.Table, config: Config, period: Period, *, closed: bool = False
) -> list[dict[str, object]]:
    minor = config.minor_unit
    rows = []
    for line in lines.to_pylist():
        adjustment = line["charge_type"] == ADJUSTMENT
        charge = line["corrects_charge_type"] if adjustment else line["charge_type"]
        charge_period = Period.parse(line["corrects_period"]) if adjustment else period
        cost = line["amount"].quantize(Decimal(1).scaleb(-minor))
        what = f"{_CHARGE_WORDS.get(charge, charge)}, {_device(line)}"
        description = f"Correction of {line['corrects_period']}: {what}" if adjustment else what.capitalize()
        gpu_hours = line["gpu_hours"]
        if charge == ENERGY:  # priced by the kWh, not by the GPU-hour
            quantity, unit = line["energy_kwh"] or Decimal(0), ENERGY_UNIT
            unit_price = (
                (line["amount_unrounded"] / quantity).quantize(Decimal("1e-9")) if quantity else Decimal(0)
            )
        else:
            quantity, unit, unit_price = gpu_hours, PRICING_UNIT, line["unit_price"]
        # FOCUS: ListCost = ListUnitPrice × PricingQuantity when both are set; a cost derived from other
        # charges has a null unit price instead. The SKU's price stays in SkuPriceId.
        listed_price = None if adjustment else unit_price
        efficiency = (
            (line["busy_gpu_hours"] / gpu_hours).quantize(Decimal("1e-6"))
            if charge == "reserved" and gpu_hours and line["busy_gpu_hours"] is not None and not adjustment
            else None
        )
        resource = "/".join(p for p in (config.pool, line["gpu_model"], line["mig_profile"]) if p)
        tags = {"charge_type": charge, "gpu_model": line["gpu_model"]}
        if line["cost_center"]:
            tags["cost_center"] = line["cost_center"]
        if line["mig_profile"]:
            tags["mig_profile"] = line["mig_profile"]
        if adjustment:
            tags["corrects_period"] = line["corrects_period"]
        if line["tenant"] in (IDLE, UNALLOCATED):
            tags["bucket"] = line["tenant"]
        rows.append(
            {
                "BilledCost": cost,
                "BillingAccountId": config.pool,
                "BillingAccountName": config.pool,
                "BillingCurrency": line["currency"],
                "BillingPeriodEnd": iso_utc(period.end),
                "BillingPeriodStart": iso_utc(period.start),
                "ChargeCategory": "Adjustment" if adjustment else "Usage",
                "ChargeClass": "Correction" if adjustment else None,
                "ChargeDescription": description,
                "ChargeFrequency": "Usage-Based",
                "ChargePeriodEnd": iso_utc(charge_period.end),
                "ChargePeriodStart": iso_utc(charge_period.start),
                # FOCUS: consumed quantity and unit only on Usage rows.
                "ConsumedQuantity": None if adjustment else line["device_hours"],
                "ConsumedUnit": None if adjustment else CONSUMED_UNIT,
                "ContractedCost": cost,
                "ContractedUnitPrice": listed_price,
                "EffectiveCost": cost,
                "InvoiceId": line["invoice_id"] if closed else None,  # issued only when the month closes
                "InvoiceIssuerName": config.pool,
                "ListCost": cost,
                "ListUnitPrice": listed_price,
                "PricingCategory": "Standard",
                "PricingQuantity": quantity,
                "PricingUnit": unit,
                "ProviderName": config.pool,
                "PublisherName": config.pool,
                "ResourceId": resource,
                "ResourceName": f"{config.pool} {_device(line)}",
                "ResourceType": "MIG instance" if line["mig_profile"] else "GPU",
                "ServiceCategory": SERVICE_CATEGORY,
                "ServiceName": f"{config.pool} GPU pool",
                "ServiceSubcategory": SERVICE_SUBCATEGORY,
                "SkuId": _sku(line),
                "SkuMeter": charge,
                "SkuPriceId": f"{_sku(line)}@{unit_price}",
                "SubAccountId": line["tenant"],
                "SubAccountName": line["tenant"],
                "Tags": json.dumps(tags, sort_keys=True, ensure_ascii=False),
                "x_ChargeType": line["charge_type"],
                "x_CorrectsPeriod": line["corrects_period"],
                "x_CostCenter": line["cost_center"] or None,
                "x_GpuEfficiency": efficiency,
                "x_GpuModel": line["gpu_model"],
                "x_MigProfile": line["mig_profile"] or None,
                "x_AmountUnrounded": line["amount_unrounded"],
            }
        )
    return rows


def _cell(column: str, value: object, minor_unit: int) -> str:
    if value is None:
        return ""  # FOCUS null
    if column in NUMERIC_COLUMNS:
        assert isinstance(value, Decimal)
        if column in ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost"):
            return f"{value:.{minor_unit}f}"
        return _number(value)
    return neutralize(str(value))  # spreadsheet formula injection


def focus_csv(lines: pa.Table, config: Config, period: Period, *, closed: bool = False) -> str:
    """The FOCUS file of a period's lines; `closed`: the period is closed (its invoices issued)."""
    return csv_text(
        FOCUS_COLUMNS,
        (
            [_cell(c, row[c], config.minor_unit) for c in FOCUS_COLUMNS]
            for row in focus_rows(lines, config, period, closed=closed)
        ),
    )
