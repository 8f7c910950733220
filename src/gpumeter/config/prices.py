"""The rate card: GPU models' prices and their changes by date, the MIG catalog, energy prices, and the hybrid
tariff's mix (docs/tariffs.md)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from datetime import date
from typing import Annotated, Literal, TypeVar

from pydantic import AfterValidator, Field, field_validator

from gpumeter.config.base import MAX_PRICE, MAX_TEXT_CHARS, _invoice_text, _Model

Price = Annotated[float, Field(ge=0, le=MAX_PRICE)]
_MIG_PROFILE = re.compile(r"^(\d+)g\.(\d+)gb(\+me)?$")


def _mig_profile_key(profile: str) -> str:
    if not _MIG_PROFILE.match(profile):
        raise ValueError(f"MIG profile {profile!r} does not parse as <N>g.<M>gb")
    return profile


def _in_date_order(changes: Sequence[PriceChange | EnergyPriceChange]) -> None:
    for earlier, later in itertools.pairwise(changes):
        if later.effective_from <= earlier.effective_from:
            raise ValueError(
                f"effective_from {later.effective_from} follows {earlier.effective_from}: list price changes "
                "in date order, one per day"
            )


MigProfilePrices = dict[Annotated[str, AfterValidator(_mig_profile_key)], Price]


class PriceChange(_Model):
    """A model's prices from one UTC day on (R8): a day is metered at the prices in effect that day, so a day
    metered again after a price change keeps its own day's prices (docs/config.md, "Price changes")."""

    effective_from: date = Field(description="The first UTC day metered at these prices.")
    price_per_gpu_hour: float = Field(
        ge=0, le=MAX_PRICE, description="The model's price per GPU-hour from that day on."
    )
    mig_profiles: MigProfilePrices = Field(
        default_factory=dict,
        description="Its explicit prices per MIG instance-hour from that day on (a profile not named: weight × "
        "the GPU's price); the earlier ones do not carry over.",
    )


class GpuModelPrice(_Model):
    model: str = Field(
        min_length=1, max_length=MAX_TEXT_CHARS, description="Canonical model name, e.g. H100-80GB."
    )
    aliases: list[str] = Field(
        default_factory=list,
        description="modelName values (exact, or shell globs like 'NVIDIA H100*') that mean this model.",
    )
    price_per_gpu_hour: float | None = Field(None, ge=0, le=MAX_PRICE)
    mig_profiles: MigProfilePrices = Field(
        default_factory=dict,
        description="Explicit price per MIG instance-hour, by profile (else weight × the GPU's price).",
    )
    price_changes: list[PriceChange] = Field(
        default_factory=list,
        description="Later prices, each from a UTC day on, in date order; before the first, the prices above.",
    )

    @field_validator("model", mode="before")
    @classmethod
    def _model_text(cls, value: object) -> object:
        return _invoice_text(value, "model")

    @field_validator("price_changes")
    @classmethod
    def _in_date_order(cls, value: list[PriceChange]) -> list[PriceChange]:
        _in_date_order(value)
        return value

    def prices_on(self, day: date) -> tuple[float | None, dict[str, float]]:
        """The price per GPU-hour and the MIG profiles' prices in effect on a UTC day."""
        change = _in_effect(self.price_changes, day)
        if change is None:
            return self.price_per_gpu_hour, self.mig_profiles
        return change.price_per_gpu_hour, change.mig_profiles


class MigFamily(_Model):
    """Extends the built-in MIG catalog (R3): profiles as [compute slices of 7, memory slices of 8]."""

    family: str
    models: list[str] = Field(description="modelName globs of the GPUs in this family.")
    profiles: dict[str, tuple[int, int]]

    @field_validator("profiles")
    @classmethod
    def _slices(cls, value: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
        for profile, (compute, memory) in value.items():
            if not 1 <= compute <= 7 or not 1 <= memory <= 8:
                raise ValueError(f"{profile!r}: compute slices must be 1..7 and memory slices 1..8")
        return value


class EnergyPriceChange(_Model):
    """The energy price from one UTC day on, as PriceChange is a GPU model's (R8, R10)."""

    effective_from: date = Field(description="The first UTC day metered at this energy price.")
    price_per_kwh: float | None = Field(
        ge=0,
        le=MAX_PRICE,
        description="The price of one kWh from that day on; null: no energy lines from that day on.",
    )


_Change = TypeVar("_Change", PriceChange, EnergyPriceChange)


def _in_effect(changes: Sequence[_Change], day: date) -> _Change | None:
    """The last of the (date-ordered) changes in effect on a UTC day; None before the first."""
    return next((c for c in reversed(changes) if c.effective_from <= day), None)


class RateCard(_Model):
    price_source: Literal["rate_card", "opencost"] = "rate_card"
    mig_weight: Literal["compute", "memory"] = "compute"
    models: list[GpuModelPrice] = Field(default_factory=list)
    mig_catalog: list[MigFamily] = Field(default_factory=list)
    energy_price_per_kwh: float | None = Field(
        None,
        ge=0,
        le=MAX_PRICE,
        description="Price of one kWh of GPU energy; set, invoices get `energy` lines (docs/tariffs.md).",
    )
    energy_price_changes: list[EnergyPriceChange] = Field(
        default_factory=list,
        description="Later energy prices, each from a UTC day on, in date order; before the first, "
        "energy_price_per_kwh.",
    )

    @field_validator("energy_price_changes")
    @classmethod
    def _energy_in_date_order(cls, value: list[EnergyPriceChange]) -> list[EnergyPriceChange]:
        _in_date_order(value)
        return value

    def energy_price_on(self, day: date) -> float | None:
        """The price of one kWh in effect on a UTC day."""
        change = _in_effect(self.energy_price_changes, day)
        return self.energy_price_per_kwh if change is None else change.price_per_kwh


class Hybrid(_Model):
    """tariff: hybrid: a holder pays `reserved_fraction` of its reserved charge plus the rest of its usage
    charge (docs/tariffs.md)."""

    reserved_fraction: float = Field(
        ge=0, le=1, description="Share of the reserved charge; the rest is usage."
    )

    @field_validator("reserved_fraction")
    @classmethod
    def _six_decimals(cls, value: float) -> float:
        # The fraction enters the SQL as an exact DECIMAL(10, 9) (R13 stays exact): no float residue.
        if round(value, 6) != value:
            raise ValueError(
                f"reserved_fraction {value} has more than 6 decimals; write e.g. 0.4 or 0.333333"
            )
        return value
