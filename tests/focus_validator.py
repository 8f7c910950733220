"""A FOCUS 1.2 validator for CSV exports, written from the specification's column rules (test helper).

It checks what a FOCUS consumer relies on: the mandatory columns are present; every column is either a
FOCUS 1.2 column or a custom one prefixed `x_`; value formats (decimals, ISO 8601 UTC date-times ending in
`Z`, ISO 4217 currency codes, JSON object tags); the allowed values of ChargeCategory, ChargeClass,
ChargeFrequency, PricingCategory and ServiceCategory; and the cross-column rules used here (Correction rows,
PricingUnit with PricingQuantity, ConsumedUnit with ConsumedQuantity, periods that end after they start).
Returns a list of problems, empty when the file conforms."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import datetime
from decimal import Decimal, InvalidOperation

MANDATORY = (
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "ContractedCost",
    "EffectiveCost",
    "InvoiceIssuerName",
    "ListCost",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "ServiceCategory",
    "ServiceName",
)
# FOCUS 1.2 columns (a subset would be fine; anything else must be `x_`-prefixed).
KNOWN = frozenset(
    MANDATORY
    + (
        "AvailabilityZone",
        "BillingAccountType",
        "CapacityReservationId",
        "CapacityReservationStatus",
        "ChargeFrequency",
        "CommitmentDiscountCategory",
        "CommitmentDiscountId",
        "CommitmentDiscountName",
        "CommitmentDiscountQuantity",
        "CommitmentDiscountStatus",
        "CommitmentDiscountType",
        "CommitmentDiscountUnit",
        "ConsumedQuantity",
        "ConsumedUnit",
        "ContractedUnitPrice",
        "InvoiceId",
        "ListUnitPrice",
        "PricingCategory",
        "PricingCurrency",
        "PricingCurrencyContractedUnitPrice",
        "PricingCurrencyEffectiveCost",
        "PricingCurrencyListUnitPrice",
        "RegionId",
        "RegionName",
        "ResourceId",
        "ResourceName",
        "ResourceType",
        "ServiceSubcategory",
        "SkuId",
        "SkuMeter",
        "SkuPriceDetails",
        "SkuPriceId",
        "SubAccountId",
        "SubAccountName",
        "SubAccountType",
        "Tags",
    )
)
DECIMAL_COLUMNS = (
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "ContractedCost",
    "ListUnitPrice",
    "ContractedUnitPrice",
    "PricingQuantity",
    "ConsumedQuantity",
)
NOT_NULL_DECIMALS = ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost")
DATETIME_COLUMNS = ("BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd")
CHARGE_CATEGORIES = {"Usage", "Purchase", "Tax", "Credit", "Adjustment"}
CHARGE_FREQUENCIES = {"One-Time", "Recurring", "Usage-Based"}
PRICING_CATEGORIES = {"Standard", "Dynamic", "Committed", "Other"}
SERVICE_CATEGORIES = {
    "AI and Machine Learning",
    "Analytics",
    "Business Applications",
    "Compute",
    "Databases",
    "Developer Tools",
    "Multicloud",
    "Identity",
    "Integration",
    "Internet of Things",
    "Management and Governance",
    "Media",
    "Migration",
    "Mobile",
    "Networking",
    "Security",
    "Storage",
    "Web",
    "Other",
}
ISO_4217 = {"USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "SEK", "NOK", "DKK", "KRW", "CNY", "INR", "BHD"}
_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
_COLUMN_ID = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_CUSTOM = re.compile(r"^x_[A-Za-z0-9]+$")


def _decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def validate_focus_csv(text: str) -> list[str]:
    problems: list[str] = []
    reader = csv.DictReader(io.StringIO(text))
    columns = reader.fieldnames or []
    problems += [f"mandatory column {c} is missing" for c in MANDATORY if c not in columns]
    for column in columns:
        if column.startswith("x_"):
            if not _CUSTOM.match(column):
                problems.append(f"custom column {column!r} is not x_ + alphanumerics")
        elif column not in KNOWN or not _COLUMN_ID.match(column):
            problems.append(f"column {column!r} is neither FOCUS 1.2 nor prefixed x_")
    for n, row in enumerate(reader, start=2):
        where = f"line {n}"
        for column in DECIMAL_COLUMNS:
            value = row.get(column, "")
            if value == "":
                if column in NOT_NULL_DECIMALS:
                    problems.append(f"{where}: {column} is null")
            elif _decimal(value) is None:
                problems.append(f"{where}: {column} {value!r} is not a decimal")
        for column in DATETIME_COLUMNS:
            value = row.get(column, "")
            if not _UTC.match(value):
                problems.append(f"{where}: {column} {value!r} is not ISO 8601 UTC (…Z)")
        if all(_UTC.match(row.get(c, "")) for c in DATETIME_COLUMNS):
            for start, end in (
                ("BillingPeriodStart", "BillingPeriodEnd"),
                ("ChargePeriodStart", "ChargePeriodEnd"),
            ):
                if datetime.fromisoformat(row[end]) <= datetime.fromisoformat(row[start]):
                    problems.append(f"{where}: {end} is not after {start}")
        if row.get("BillingCurrency") not in ISO_4217:
            problems.append(f"{where}: BillingCurrency {row.get('BillingCurrency')!r} is not ISO 4217")
        category = row.get("ChargeCategory")
        if category not in CHARGE_CATEGORIES:
            problems.append(f"{where}: ChargeCategory {category!r} not allowed")
        charge_class = row.get("ChargeClass", "")
        if charge_class not in ("", "Correction"):
            problems.append(f"{where}: ChargeClass {charge_class!r} must be null or Correction")
        if charge_class == "Correction" and row.get("ChargePeriodStart", "") >= row.get(
            "BillingPeriodStart", ""
        ):
            problems.append(f"{where}: a Correction must correct an earlier, previously invoiced period")
        if "ChargeFrequency" in row and row["ChargeFrequency"] not in CHARGE_FREQUENCIES:
            problems.append(f"{where}: ChargeFrequency {row['ChargeFrequency']!r} not allowed")
        if row.get("PricingCategory") and row["PricingCategory"] not in PRICING_CATEGORIES:
            problems.append(f"{where}: PricingCategory {row['PricingCategory']!r} not allowed")
        if row.get("ServiceCategory") not in SERVICE_CATEGORIES:
            problems.append(f"{where}: ServiceCategory {row.get('ServiceCategory')!r} not allowed")
        if row.get("PricingQuantity") and not row.get("PricingUnit"):
            problems.append(f"{where}: PricingUnit is null while PricingQuantity is set")
        if row.get("ConsumedQuantity") and not row.get("ConsumedUnit"):
            problems.append(f"{where}: ConsumedUnit is null while ConsumedQuantity is set")
        if category != "Usage" and row.get("ConsumedQuantity"):
            problems.append(f"{where}: ConsumedQuantity must be null unless ChargeCategory is Usage")
        if not row.get("ChargeDescription"):
            problems.append(f"{where}: ChargeDescription is empty")
        tags = row.get("Tags", "")
        if tags:
            try:
                parsed = json.loads(tags)
            except ValueError:
                parsed = None
            if not isinstance(parsed, dict) or not all(isinstance(k, str) for k in parsed):
                problems.append(f"{where}: Tags is not a JSON object")
    return problems
