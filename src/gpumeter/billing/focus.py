"""FOCUS 1.2 (or 1.3) export of invoice lines (output contract; docs/billing.md has the column mapping).

One FOCUS row per invoice line. Costs are the rounded line amounts (R12), so that the FOCUS file sums to
the invoices; no discounts exist, so Billed = Effective = List = Contracted cost. Adjustment lines (R16)
are ChargeCategory `Adjustment`, ChargeClass `Correction`, with the charge period of the period they correct.
An adjustment's cost is computed from other charges (the corrected line rounded minus what was billed, R12),
not as a unit price × quantity: its unit prices are null, as FOCUS has it for such charges.

InvoiceId is the tenant's invoice id once the month is closed (its invoices are issued, R16) and null while
it is a draft: FOCUS 1.2 wants it null on a charge associated neither with an issued invoice nor with a
pre-generated provisional one, and a draft invoice is a preview whose figures change with every metered day.

FOCUS 1.3 (config `focus_version: "1.3"`) keeps the grain and the costs, and adds ServiceProviderName and
HostProviderName (ProviderName and PublisherName stay: deprecated in 1.3 but still mandatory) and the split
cost allocation columns. gpumeter splits what a device class costs among its holders (R6, R9): the origin
charge is a device class's (ResourceId) charge of one type (SkuMeter) in one charge period, the sum of its
lines; each line is an allocated charge of it, with its share of the origin in AllocatedMethodDetails. The
recipient, AllocatedResourceId, is the tenant; a bucket line (`__unallocated__`, or `__idle__`'s energy) is
the unallocated portion, with AllocatedResourceId null. `idle` lines (no holder, nothing split) and
adjustments (a difference, not a share) carry no Allocated* value. docs/billing.md has the reading.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pyarrow as pa

from gpumeter.billing.invoices import ADJUSTMENT, ENERGY, Period, charge_words, csv_text, iso_utc, neutralize
from gpumeter.config import IDLE, UNALLOCATED, Config

FOCUS_VERSION = "1.2"  # the default; config `focus_version` picks 1.2 or 1.3
FOCUS_VERSIONS = ("1.2", "1.3")
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

# FOCUS 1.3: the same columns, plus the split cost allocation columns and the two provider columns that
# replace ProviderName/PublisherName (which 1.3 deprecates but still requires: both stay).
FOCUS_13_COLUMNS = (
    "AllocatedMethodDetails",
    "AllocatedMethodId",
    "AllocatedResourceId",
    "AllocatedResourceName",
    "AllocatedTags",
    *FOCUS_COLUMNS[: FOCUS_COLUMNS.index("InvoiceId")],
    "HostProviderName",
    *FOCUS_COLUMNS[FOCUS_COLUMNS.index("InvoiceId") : FOCUS_COLUMNS.index("ServiceSubcategory")],
    "ServiceProviderName",
    *FOCUS_COLUMNS[FOCUS_COLUMNS.index("ServiceSubcategory") :],
)
IDLE_CHARGE = "idle"  # the `__idle__` bucket's GPU-time line (R9): charged to nobody, split by no rule
RATIO_QUANTUM = Decimal("1e-9")  # AllocatedRatio's decimals; the remainder goes to the largest share

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


def _number(value: Decimal) -> str:
    return format(value.normalize(), "f") if value else "0"


def _device(row: dict) -> str:
    model = row["gpu_model"] or "unknown model"
    return f"{model} MIG {row['mig_profile']}" if row["mig_profile"] else f"{model} whole GPU"


def _sku(row: dict) -> str:
    charge = row["corrects_charge_type"] if row["charge_type"] == ADJUSTMENT else row["charge_type"]
    parts = [charge, row["gpu_model"] or "unknown", row["mig_profile"] or "whole"]
    return "/".join(parts)


def focus_columns(version: str) -> tuple[str, ...]:
    """The columns of a FOCUS file of that version, in file order."""
    if version not in FOCUS_VERSIONS:
        raise ValueError(f"FOCUS version {version!r} is not one of {', '.join(FOCUS_VERSIONS)}")
    return FOCUS_13_COLUMNS if version == "1.3" else FOCUS_COLUMNS


def allocation_method(charge: str, config: Config) -> str | None:
    """AllocatedMethodId of a usage line of that charge type: the rule that split its origin charge, in
    words (docs/billing.md lists them); None for `idle` (nothing split) and adjustments (a difference, not a share)."""
    if charge in (ADJUSTMENT, IDLE_CHARGE):
        return None
    if charge == "idle_share":
        return "idle-pro-rata"  # the idle capacity of a GPU model, pro rata to its holders' charges
    return f"{config.share}-share"  # reserved, usage, energy: each device sample split among its holders


def _ratios(weights: list[Decimal]) -> list[Decimal]:
    """Each weight's share of their sum, to RATIO_QUANTUM, summing to exactly 1 (the rounding remainder on
    the first largest share). All zero: equal shares."""
    total = sum(weights, Decimal(0))
    if total == 0:
        weights, total = [Decimal(1)] * len(weights), Decimal(len(weights))
    ratios = [(w / total).quantize(RATIO_QUANTUM) for w in weights]
    largest = max(range(len(ratios)), key=lambda i: ratios[i])
    ratios[largest] += 1 - sum(ratios, Decimal(0))
    return ratios


def _method_details(ratio: Decimal, unit: str | None, quantity: Decimal | None) -> str:
    """AllocatedMethodDetails: {"Elements": [{AllocatedRatio, UsageQuantity, UsageUnit}]}, numbers exact."""
    element = f'"AllocatedRatio":{_number(ratio)}'
    if unit is not None and quantity is not None:
        element += f',"UsageQuantity":{_number(quantity)},"UsageUnit":{json.dumps(unit)}'
    return '{"Elements":[{' + element + "}]}"


def _allocate(rows: list[dict[str, object]], charges: list[str]) -> None:
    """Fill AllocatedMethodDetails: each origin charge (ResourceId, SkuMeter, charge period) is the sum of
    its lines, and each line's AllocatedRatio is its BilledCost's share of it (by PricingQuantity if the
    origin cost nothing)."""
    origins: dict[tuple, list[int]] = {}
    for i, row in enumerate(rows):
        if row["AllocatedMethodId"] is not None:
            key = (row["ResourceId"], row["SkuMeter"], row["ChargePeriodStart"], row["ChargePeriodEnd"])
            origins.setdefault(key, []).append(i)
    for members in origins.values():
        costs = [rows[i]["BilledCost"] for i in members]
        weights = costs if any(costs) else [rows[i]["PricingQuantity"] for i in members]
        for i, ratio in zip(members, _ratios(weights), strict=True):
            row = rows[i]
            by_quantity = charges[i] != "idle_share"  # idle shares follow charges, not hours (R9)
            row["AllocatedMethodDetails"] = _method_details(
                ratio,
                row["PricingUnit"] if by_quantity else None,
                row["PricingQuantity"] if by_quantity else None,
            )


def focus_rows(
    lines: pa.Table, config: Config, period: Period, *, closed: bool = False
) -> list[dict[str, object]]:
    """One FOCUS row per line, with the columns of config `focus_version`."""
    minor = config.minor_unit
    version = config.focus_version
    rows: list[dict[str, object]] = []
    charges: list[str] = []
    for line in lines.to_pylist():
        adjustment = line["charge_type"] == ADJUSTMENT
        charge = line["corrects_charge_type"] if adjustment else line["charge_type"]
        charge_period = Period.parse(line["corrects_period"]) if adjustment else period
        cost = line["amount"].quantize(Decimal(1).scaleb(-minor))
        what = f"{charge_words(charge)}, {_device(line)}"
        description = f"Correction of {line['corrects_period']}: {what}" if adjustment else what
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
        method = allocation_method(line["charge_type"], config) if version == "1.3" else None
        # The recipient of an allocated charge is its tenant; a bucket's line is the unallocated portion.
        recipient = line["tenant"] if method and line["tenant"] not in (IDLE, UNALLOCATED) else None
        allocated_tags = None
        if recipient and "cost_center" in tags:  # the tenant's tag, not the shared device's: FOCUS 1.3
            allocated_tags = {"cost_center": tags.pop("cost_center")}  # wants it in AllocatedTags only
        charges.append(line["charge_type"])
        row: dict[str, object] = {
            "AllocatedMethodDetails": None,  # set by _allocate, once every line of the origin is known
            "AllocatedMethodId": method,
            "AllocatedResourceId": recipient,
            "AllocatedResourceName": recipient,
            "AllocatedTags": json.dumps(allocated_tags, sort_keys=True, ensure_ascii=False)
            if allocated_tags
            else None,
            "HostProviderName": config.pool,  # FOCUS 1.3: MAY equal ServiceProviderName without visibility
            "ServiceProviderName": config.pool,  # into the hosting: gpumeter does not know whose hardware
        }
        rows.append(
            row
            | {
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
    if version == "1.3":
        _allocate(rows, charges)
    columns = focus_columns(version)
    return [{c: row[c] for c in columns} for row in rows]


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
    """The FOCUS file (config `focus_version`) of a period's lines; `closed`: the period is closed (its
    invoices issued)."""
    columns = focus_columns(config.focus_version)
    return csv_text(
        columns,
        (
            [_cell(c, row[c], config.minor_unit) for c in columns]
            for row in focus_rows(lines, config, period, closed=closed)
        ),
    )
