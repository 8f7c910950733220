"""A re-run never replaces a stored (cluster, day) with less (docs/rules.md R15, "Nothing billed is replaced
by less").

A day is stored twice over: its raw samples (the pull) and its marts (the meter). Before either replaces a
stored day, the writer measures what the new day holds against what is stored (gpumeter.ingest.coverage for
the raw samples, gpumeter.models.day_figures for the marts). Where any measure fell by more than
SHRINK_TOLERANCE, the stored day stays and the run fails with one line saying what fell, what is kept and how
to accept it; an explicit acceptance (`--replace-with-less`, or the run tag REPLACE_WITH_LESS_TAG) replaces it
and is appended to the audit log, like a reopen.

Why a tolerance and not "most of the day": a re-run of the same data measures exactly what is stored, late
data only adds, so a loss of more than 1 % (a quarter of an hour of a day) is data the source no longer has, or
a config that no longer bills it, and finance wants that explained before a billed figure falls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from fractions import Fraction

import pyarrow as pa
import pyarrow.compute as pc

from gpumeter.config import RESERVED_BUCKETS
from gpumeter.storage import paths
from gpumeter.storage.audit import append_audit, now, who
from gpumeter.storage.files import WarehouseError
from gpumeter.storage.warehouse import Warehouse

SHRINK_TOLERANCE = Fraction(1, 100)
NO_ONES_BILL = frozenset(RESERVED_BUCKETS)  # the idle pool and GPU time no tenant claims

# Dagster run tags that carry an acceptance (the CLI sets them; a launchpad or a backfill may too).
REPLACE_WITH_LESS_TAG = "gpumeter/replace_with_less"
ACCEPTED_BY_TAG = "gpumeter/accepted_by"
AUDIT_EVENT = "replace_with_less"


@dataclass(frozen=True)
class Measure:
    """One figure of a day, as stored and as the re-run found it, in the unit it is shown in."""

    what: str  # in finance's and ops' words: "GPU-minutes the GPUs' exporter reported"
    stored: Fraction
    new: Fraction
    unit: str = ""

    @property
    def shrank(self) -> bool:
        return self.stored > 0 and self.new < self.stored * (1 - SHRINK_TOLERANCE)

    def says(self) -> str:
        share = f"{float(self.new / self.stored):.1%}" if self.stored else "-"
        unit = f" {self.unit}" if self.unit else ""
        return (
            f"{self.what}: {_figure(self.new)}{unit} where {_figure(self.stored)}{unit} are stored ({share})"
        )

    def as_json(self) -> dict[str, str]:
        return {"what": self.what, "stored": str(self.stored), "new": str(self.new), "unit": self.unit}


@dataclass(frozen=True)
class Acceptance:
    """Someone accepted that a day be replaced with less, and why (recorded in the audit log)."""

    reason: str
    by: str

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> Acceptance | None:
        reason = (tags.get(REPLACE_WITH_LESS_TAG) or "").strip()
        if not reason:
            return None
        return cls(reason, who((tags.get(ACCEPTED_BY_TAG) or "").strip() or None))

    def tags(self) -> dict[str, str]:
        return {REPLACE_WITH_LESS_TAG: self.reason, ACCEPTED_BY_TAG: self.by}


class LessThanStored(WarehouseError):
    """A re-run found less than the stored day holds, and nobody accepted it: the stored day stays."""


def tenants_bill(charges: pa.Table) -> Fraction:
    """What rows of the tenants' daily charges bill the tenants (the idle pool and unclaimed time are no one's
    bill), exactly, from their units of money (one currency's units per table)."""
    tenants = charges.filter(pc.invert(pc.is_in(charges.column("tenant"), pa.array(sorted(NO_ONES_BILL)))))
    if not tenants.num_rows:
        return Fraction(0)
    units = pc.sum(tenants.column("amount_units")).as_py()
    per = pc.max(tenants.column("units_per_currency")).as_py()
    return Fraction(int(units), int(per)) if units is not None and per else Fraction(0)


def billed_to_tenants(warehouse: Warehouse, cluster: str, day: date) -> Fraction | None:
    """The stored (cluster, day)'s tenants' bill; None when the day has no stored bill."""
    columns = ["tenant", "amount_units", "units_per_currency"]
    rows = warehouse.read_days(paths.MARTS, paths.TENANT_DAILY_COST, [day], cluster, columns)
    return None if rows is None else tenants_bill(rows)


def kept_bill(charges: Fraction | None, currency: str, minor_unit: int) -> str:
    """The stored bill in words, for a refusal: what stays."""
    if charges is None:
        return ""
    return f"{_decimal(charges, minor_unit):,} {currency} billed to tenants"


def _decimal(value: Fraction, places: int) -> Decimal:
    return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(Decimal(1).scaleb(-places))


def _figure(value: Fraction) -> str:
    return f"{_decimal(value, 2):,}" if value.denominator != 1 else f"{int(value):,}"


def guard(
    warehouse: Warehouse,
    cluster: str,
    day: date,
    what: str,
    measures: Sequence[Measure],
    acceptance: Acceptance | None,
    kept: str,
    lacks: str = "",
    log: Callable[[str], None] | None = None,
) -> None:
    """Refuse (LessThanStored) to replace the stored (cluster, day) whose `measures` shrank, unless accepted;
    an accepted replacement is appended to the audit log. `what` names the replacement ("its raw samples",
    "its bill"), `kept` what stays when refused, `lacks` what the source is missing, when known."""
    shrunk = [m for m in measures if m.shrank]
    if not shrunk:
        return
    found = "; ".join(m.says() for m in shrunk)
    if acceptance is None:
        because = f" {lacks}." if lacks else ""
        raise LessThanStored(
            f"cluster {cluster} day {day}: the re-run would replace {what} with less ({found}).{because} "
            f"The stored day stays{': ' + kept if kept else ''}. If the loss is meant (a source that lost the "
            'day for good, a tenant no longer billed), re-run with --replace-with-less "why" (recorded in '
            "the audit log)."
        )
    event = {
        "event": AUDIT_EVENT,
        "at": now(),
        "by": acceptance.by,
        "reason": acceptance.reason,
        "cluster": cluster,
        "day": day.isoformat(),
        "replaced": what,
        "measures": [m.as_json() for m in shrunk],
    }
    append_audit(warehouse, event)
    if log is not None:
        log(f"cluster {cluster} day {day}: {what} replaced with less, accepted by {acceptance.by} ({found})")
