"""A FOCUS 1.2 and 1.3 validator for CSV exports, written from the specification's column rules (test helper).

It checks what a FOCUS consumer relies on: the mandatory columns are present; every column is either a
FOCUS 1.2 column or a custom one prefixed `x_`; value formats (decimals, ISO 8601 UTC date-times ending in
`Z`, ISO 4217 currency codes, JSON object tags); the allowed values of ChargeCategory, ChargeClass,
ChargeFrequency, PricingCategory and ServiceCategory; and the cross-column rules used here (Correction rows,
PricingUnit with PricingQuantity, ConsumedUnit with ConsumedQuantity, periods that end after they start,
InvoiceId on every line or on none). Returns a list of problems, empty when the file conforms.

FOCUS 1.3 (`version="1.3"`; FOCUS_Spec specification/datasets/cost_and_usage/columns/*.md, the columns
introduced in 1.3): ServiceProviderName and HostProviderName are mandatory and not null, ProviderName and
PublisherName are deprecated but still mandatory and not null; the split cost allocation columns:
AllocatedMethodId set on every charge of a split (MUST NOT be null) and the other Allocated* columns null
without it (MUST be null when the charge is not related to a split); AllocatedResourceName null exactly when
AllocatedResourceId is; AllocatedMethodDetails a JSON object whose `Elements` array holds objects with a
numeric AllocatedRatio, a numeric UsageQuantity only with a UsageUnit string, other keys `x_`-prefixed, and
whose ratios sum to 1 over the allocated charges of one origin charge (gpumeter's origin key, ORIGIN_KEY);
AllocatedTags a key-value JSON object (values number, string, boolean or null) repeating no key of Tags.

`run_official_validator` runs the FinOps Foundation's own validator (focus-validator, FOCUS 1.2 rule set,
offline; 2.2.1 bundles no 1.3 rule set) from the virtualenv `make focus-validator` builds (.venv-focus, Python 3.12). As a script:
`.venv/bin/python tests/focus_validator.py FILE.focus.csv ...` prints its counts and failed rules."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path

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
# FOCUS 1.3: two mandatory columns more (ProviderName and PublisherName are deprecated, still mandatory).
MANDATORY_13 = MANDATORY + ("HostProviderName", "ServiceProviderName")
ALLOCATION_COLUMNS = (
    "AllocatedMethodDetails",
    "AllocatedMethodId",
    "AllocatedResourceId",
    "AllocatedResourceName",
    "AllocatedTags",
)
KNOWN_13 = KNOWN | frozenset(MANDATORY_13 + ALLOCATION_COLUMNS + ("ContractApplied",))
NOT_NULL_TEXT = ("ProviderName", "PublisherName")
NOT_NULL_TEXT_13 = NOT_NULL_TEXT + ("HostProviderName", "ServiceProviderName")
# The origin charge an allocated charge is part of. FOCUS leaves it to the data generator's documented
# method; gpumeter's (docs/billing.md): a device class's charge of one type in one charge period.
ORIGIN_KEY = ("ResourceId", "SkuMeter", "ChargePeriodStart", "ChargePeriodEnd")
_ELEMENT_KEYS = {"AllocatedRatio", "UsageUnit", "UsageQuantity"}
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


def _is_number(value: object) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _json_object(text: str) -> dict | None:
    try:
        parsed = json.loads(text, parse_float=Decimal)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _method_details_problems(text: str) -> tuple[list[str], Decimal | None]:
    """FOCUS 1.3 AllocatedMethodDetails: problems, and the sum of its AllocatedRatio values."""
    details = _json_object(text)
    if details is None:
        return ["AllocatedMethodDetails is not a JSON object"], None
    elements = details.get("Elements")
    if not isinstance(elements, list) or not elements:
        return ["AllocatedMethodDetails has no Elements array"], None
    problems = [
        f"AllocatedMethodDetails key {k!r} is neither Elements nor x_-prefixed"
        for k in details
        if k != "Elements" and not k.startswith("x_")
    ]
    ratio = Decimal(0)
    for element in elements:
        if not isinstance(element, dict):
            problems.append("AllocatedMethodDetails.Elements holds a non-object")
            continue
        if not _is_number(element.get("AllocatedRatio")):
            problems.append("AllocatedMethodDetails element without a numeric AllocatedRatio")
        else:
            ratio += Decimal(str(element["AllocatedRatio"]))
        if "UsageQuantity" in element and not _is_number(element["UsageQuantity"]):
            problems.append("AllocatedMethodDetails UsageQuantity is not numeric")
        if "UsageQuantity" in element and not isinstance(element.get("UsageUnit"), str):
            problems.append("AllocatedMethodDetails UsageQuantity without a UsageUnit")
        if "UsageUnit" in element and not isinstance(element["UsageUnit"], str):
            problems.append("AllocatedMethodDetails UsageUnit is not a string")
        problems += [
            f"AllocatedMethodDetails element key {k!r} is neither FOCUS-defined nor x_-prefixed"
            for k in element
            if k not in _ELEMENT_KEYS and not k.startswith("x_")
        ]
    return problems, ratio


def _allocation_problems(row: dict[str, str], where: str) -> tuple[list[str], Decimal | None]:
    """FOCUS 1.3 split cost allocation columns of one row: problems, and the row's AllocatedRatio sum."""
    problems: list[str] = []
    if not row.get("AllocatedMethodId"):
        problems += [
            f"{where}: {c} is set on a charge of no split cost allocation (AllocatedMethodId null)"
            for c in ALLOCATION_COLUMNS
            if row.get(c)
        ]
        return problems, None
    if bool(row.get("AllocatedResourceId")) != bool(row.get("AllocatedResourceName")):
        problems.append(f"{where}: AllocatedResourceName must be null exactly when AllocatedResourceId is")
    ratio = None
    if row.get("AllocatedMethodDetails"):
        found, ratio = _method_details_problems(row["AllocatedMethodDetails"])
        problems += [f"{where}: {p}" for p in found]
    if row.get("AllocatedTags"):
        tags = _json_object(row["AllocatedTags"])
        if tags is None or any(isinstance(v, dict | list) for v in tags.values()):
            problems.append(f"{where}: AllocatedTags is not a key-value JSON object")
        else:
            resource_tags = _json_object(row.get("Tags") or "{}") or {}
            problems += [f"{where}: AllocatedTags repeats Tags key {k!r}" for k in tags if k in resource_tags]
    return problems, ratio


def validate_focus_csv(text: str, version: str = "1.2") -> list[str]:
    """Problems of a FOCUS `version` ("1.2" or "1.3") CSV; empty when it conforms."""
    if version not in ("1.2", "1.3"):
        raise ValueError(f"no FOCUS {version} rules here")
    mandatory, known = (MANDATORY_13, KNOWN_13) if version == "1.3" else (MANDATORY, KNOWN)
    not_null_text = NOT_NULL_TEXT_13 if version == "1.3" else NOT_NULL_TEXT
    problems: list[str] = []
    reader = csv.DictReader(io.StringIO(text))
    columns = reader.fieldnames or []
    problems += [f"mandatory column {c} is missing" for c in mandatory if c not in columns]
    for column in columns:
        if column.startswith("x_"):
            if not _CUSTOM.match(column):
                problems.append(f"custom column {column!r} is not x_ + alphanumerics")
        elif column not in known or not _COLUMN_ID.match(column):
            problems.append(f"column {column!r} is neither FOCUS {version} nor prefixed x_")
    rows = list(reader)
    ratios: dict[tuple[str, ...], Decimal] = {}
    # InvoiceId: null on charges of no issued invoice, set on those of one; a file is one period's lines, all
    # invoiced or none, so a file that mixes them holds neither.
    invoiced = any(row.get("InvoiceId") for row in rows)
    for n, row in enumerate(rows, start=2):
        where = f"line {n}"
        if invoiced and not row.get("InvoiceId"):
            problems.append(f"{where}: InvoiceId is null while other lines carry one")
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
        problems += [f"{where}: {c} is null" for c in not_null_text if c in row and not row[c]]
        if version == "1.3":
            found, ratio = _allocation_problems(row, where)
            problems += found
            if ratio is not None:
                key = tuple(row.get(c, "") for c in ORIGIN_KEY)
                ratios[key] = ratios.get(key, Decimal(0)) + ratio
        tags = row.get("Tags", "")
        if tags:
            try:
                parsed = json.loads(tags)
            except ValueError:
                parsed = None
            if not isinstance(parsed, dict) or not all(isinstance(k, str) for k in parsed):
                problems.append(f"{where}: Tags is not a JSON object")
    problems += [
        f"origin charge {'/'.join(key)}: AllocatedRatio sums to {total}, not 1"
        for key, total in ratios.items()
        if total != 1
    ]
    return problems


# --- the FinOps Foundation's validator -------------------------------------------------------------

OFFICIAL_VENV = Path(__file__).resolve().parent.parent / ".venv-focus"
OFFICIAL_VERSION = "1.2"
BUILD_HINT = "build it with `make focus-validator` (needs Python 3.12: pyenv's, python3.12, or FOCUS_PYTHON)"


@dataclass
class OfficialResult:
    """The validator's verdict on one file, rule by rule.

    `failed` are the rules the file breaks. `not_taken` are failed branches of an OR rule that passed: the
    validator checks each branch of a conditional rule on every row, as it cannot know the condition (for
    InvoiceId-C-003-C: null when not invoiced (C-004-C), not null when invoiced (C-005-C)), so the branch
    that does not apply is reported failed while the OR rule, which is the requirement, passes."""

    passed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    errored: list[str] = field(default_factory=list)
    not_taken: list[str] = field(default_factory=list)
    messages: dict[str, str] = field(default_factory=dict)

    def counts(self) -> str:
        return (
            f"{len(self.passed)} passed, {len(self.skipped)} skipped, {len(self.failed)} failed, "
            f"{len(self.errored)} errored, {len(self.not_taken)} untaken branches of passed OR rules "
            f"({', '.join(self.not_taken) or 'none'})"
        )


def official_package() -> Path | None:
    """The validator's package folder in .venv-focus, or None when it is not built."""
    found = sorted(OFFICIAL_VENV.glob("lib/python3.*/site-packages/focus_validator/rules"))
    return found[-1].parent if found and (OFFICIAL_VENV / "bin" / "focus-validator").exists() else None


def _or_branches(package: Path) -> dict[str, list[str]]:
    """OR rules of the bundled rule set -> the rules they are made of."""
    [model] = sorted((package / "rules").glob(f"model-{OFFICIAL_VERSION}*.json"))[-1:]
    rules = json.loads(model.read_text(encoding="utf-8"))["ModelRules"]
    branches = {}
    for rule_id, rule in rules.items():
        requirement = rule.get("ValidationCriteria", {}).get("Requirement", {})
        if requirement.get("CheckFunction") == "OR":
            items = requirement.get("Items", [])
            branches[rule_id] = [
                i["ModelRuleId"] for i in items if i.get("CheckFunction") == "CheckModelRule"
            ]
    return branches


def run_official_validator(csv_path: Path, timeout: float = 300) -> OfficialResult:
    """Run focus-validator on a FOCUS CSV (rule set bundled: no download) and read its JUnit report."""
    package = official_package()
    if package is None:
        raise FileNotFoundError(f"the FOCUS validator is not in {OFFICIAL_VENV}: {BUILD_HINT}")
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.xml"
        # Run from the folder that holds the package: it opens focus_validator/rules/currency_codes.csv
        # relative to the working directory.
        done = subprocess.run(
            [
                str(OFFICIAL_VENV / "bin" / "focus-validator"),
                "--data-file",
                str(Path(csv_path).resolve()),
                "--validate-version",
                OFFICIAL_VERSION,
                "--block-download",
                "--output-type",
                "unittest",
                "--output-destination",
                str(report),
            ],
            cwd=package.parent,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0 or not report.exists():
            raise RuntimeError(
                f"focus-validator exited {done.returncode} on {csv_path}:\n{done.stderr[-3000:]}"
            )
        root = ET.parse(report).getroot()
    result = OfficialResult()
    for case in root.iter("testcase"):
        rule_id = case.get("name", "").split(" :: ")[0]
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            result.passed.append(rule_id)
            continue
        result.messages[rule_id] = outcome.get("message", "")
        {"failure": result.failed, "error": result.errored, "skipped": result.skipped}[outcome.tag].append(
            rule_id
        )
    for rule_id, branches in _or_branches(package).items():
        if rule_id in result.passed:
            for branch in branches:
                if branch in result.failed:
                    result.failed.remove(branch)
                    result.not_taken.append(branch)
    for ids in (result.passed, result.skipped, result.failed, result.errored, result.not_taken):
        ids.sort()
    return result


if __name__ == "__main__":
    worst = 0
    for name in sys.argv[1:]:
        verdict = run_official_validator(Path(name))
        print(f"{name}: {verdict.counts()}")
        for rule_id in verdict.failed + verdict.errored:
            print(f"  {rule_id}: {verdict.messages.get(rule_id, '')}")
        worst = max(worst, 1 if verdict.failed or verdict.errored else 0)
    sys.exit(worst)
