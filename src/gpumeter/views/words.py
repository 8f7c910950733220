"""The glossary: what each figure and bucket gpumeter shows means, in finance's and ops' words. The dashboard's
help and docs/glossary.md are both made from it (`python -m gpumeter.views.words > docs/glossary.md`)."""

from __future__ import annotations

from dataclasses import dataclass

from gpumeter.billing.invoices import CHARGE_WORDS
from gpumeter.config import IDLE, UNALLOCATED

# The buckets as a page and the printed summary name them; the invoice files keep the names.
HOLDER_WORDS = {IDLE: "Idle capacity (not billed to a tenant)", UNALLOCATED: "Unmapped workloads"}
# Where capacity went: every R11 category (the mart's values, the one list of them), as a page and the
# printed summary name it.
CATEGORY_WORDS = {
    "allocated_active": "Held and busy",
    "allocated_idle": "Held but idle",
    "free": "Free (no holder)",
    "mig_unpartitioned": "MIG space not partitioned",
    "unschedulable": "Free on a cordoned or full node",
    "unhealthy": "Unhealthy",
}
# A page's cells in words, by column: what `in_words` of the dashboard replaces.
VALUE_WORDS = {"tenant": HOLDER_WORDS, "category": CATEGORY_WORDS, "charge_type": CHARGE_WORDS}


@dataclass(frozen=True)
class Term:
    shown_as: str  # how it appears on a page, an invoice or a file
    words: str  # what finance calls it
    meaning: str  # one or two sentences


GLOSSARY: tuple[Term, ...] = (
    Term(
        IDLE,
        HOLDER_WORDS[IDLE],
        "The part of the pool cost no holder pays: mostly GPU time nobody held (and what a usage tariff or a "
        "price other than the pool's leaves over). It is on no tenant's invoice; with the tenants' charges and "
        "Unmapped workloads it adds up to the pool cost.",
    ),
    Term(
        UNALLOCATED,
        HOLDER_WORDS[UNALLOCATED],
        "GPU time held by pods whose namespace or labels match no tenant rule: billed to no tenant until the "
        "config maps them; Data quality lists the namespaces.",
    ),
    Term(
        "free",
        CATEGORY_WORDS["free"],
        "Under Where capacity went: GPU time of healthy, schedulable GPUs and MIG instances nobody held (named "
        "unallocated before). Its cost is part of Idle capacity; it is not Unmapped workloads, which were held.",
    ),
    Term(
        "Total in scope",
        "Total in scope",
        "Everything the filters select: the tenants' charges, Unmapped workloads and Idle capacity; for the whole "
        "pool it is the pool cost, give or take the rounding of each invoice line.",
    ),
    Term(
        "Billed to tenants",
        "Billed to tenants",
        "What the tenants' invoices say: Total in scope less Unmapped workloads and Idle capacity.",
    ),
    Term(
        "GPU-hours",
        "GPU-equivalent hours",
        "Hours of whole GPUs: a MIG slice counts as its share of a GPU (a 3g.40gb instance for an hour is 3/7 of "
        "a GPU-hour) and a GPU shared by several pods is split among them.",
    ),
    Term(
        "device-hours",
        "Device-hours",
        "Hours a device was held, whatever its size: a whole GPU or a MIG instance counts one per hour.",
    ),
    Term(
        "stranded",
        "Stranded capacity",
        "GPU time that did no work: held but idle, free, unpartitioned MIG slices, cordoned or unhealthy GPUs.",
    ),
    Term(
        "coverage",
        "Coverage",
        "The GPU time the exporters reported against the time the nodes' GPUs existed; what was not reported "
        "is never billed.",
    ),
    Term(
        "provisional",
        "Today so far",
        "Today metered up to the last full hour: shown apart, on no invoice, replaced by the complete day after "
        "midnight.",
    ),
)


# A table's column headers in words; any other column reads as its name in a sentence (_GPU_ as GPU).
COLUMN_WORDS = {
    "cost_center": "Cost center",
    "invoice_id": "Invoice number",
    "charge_type": "Charge",
    "gpu_hours": "GPU-hours held",
    "capacity_gpu_hours": "GPU-hours",
    "used_gpu_hours": "GPU-hours used",
    "device_hours": "Device-hours",
    "efficiency": "Efficiency (used ÷ held)",
    "amount": "Amount",
    "complete_days_amount": "Complete days",
    "provisional_amount": "Today so far",
    "of_which_today_provisional": "Of which today so far",
    "burn_ratio": "Budget spent",
    "forecast_over": "Forecast over budget",
    "days_elapsed": "Days metered",
    "days_in_period": "Days in the month",
    "is_stranded": "Stranded",
    "gpu_model": "GPU model",
    "mig_profile": "MIG profile",
    "gpu_i_id": "MIG instance",
    "uuid": "GPU",
    "coverage": "Coverage",
    "missing_day": "Day not metered",
    "observed_gpu_hours": "Observed GPU-hours",
    "expected_gpu_hours": "Expected GPU-hours",
    "unobserved_gpu_hours": "Unobserved GPU-hours (not billed)",
    "idle_cost": "Cost of idle time",
    "monthly_saving": "Saving per month",
}
# Columns that hold a ratio (shown as a percentage).
RATIO_COLUMNS = frozenset({"efficiency", "coverage", "burn_ratio", "share", "busy", "allocated"})


def column_words(name: str) -> str:
    """A column's header in words."""
    if name in COLUMN_WORDS:
        return COLUMN_WORDS[name]
    text = name.replace("_", " ")
    acronyms = {"gpu": "GPU", "gpus": "GPUs", "mig": "MIG", "dcgm": "DCGM", "kwh": "kWh"}
    text = " ".join(acronyms.get(w, w) for w in text.split())
    return text[:1].upper() + text[1:]


def meaning(shown_as: str) -> str:
    """The glossary's sentence for a term as it is shown (for a page's help)."""
    return next(t.meaning for t in GLOSSARY if t.shown_as == shown_as)


def glossary_markdown() -> str:
    rows = "\n".join(f"| `{t.shown_as}` | {t.words} | {t.meaning} |" for t in GLOSSARY)
    return (
        "# Glossary\n\n"
        "What each figure and bucket gpumeter shows means. The dashboard's help says the same "
        "(`src/gpumeter/views/words.py`, from which this page is made).\n\n"
        "| shown as | in words | what it means |\n|---|---|---|\n" + rows + "\n"
    )


if __name__ == "__main__":
    print(glossary_markdown(), end="")
