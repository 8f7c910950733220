"""Device weights (R3) and prices (R8): resolved once per distinct (model, profile), in Python, so that a
missing price or an unparseable profile stops the run with one message naming it."""

from __future__ import annotations

import fnmatch
import re
import warnings
from dataclasses import dataclass
from datetime import date

from gpumeter.config import Config, GpuModelPrice, MigFamily
from gpumeter.ingest.contract import utc_today

# Built-in MIG catalog (docs/telemetry.md): profile -> (compute slices of 7, memory slices of 8).
_A100_40 = {
    "1g.5gb": (1, 1),
    "1g.10gb": (1, 2),
    "2g.10gb": (2, 2),
    "3g.20gb": (3, 4),
    "4g.20gb": (4, 4),
    "7g.40gb": (7, 8),
}
_X_80 = {
    "1g.10gb": (1, 1),
    "1g.20gb": (1, 2),
    "2g.20gb": (2, 2),
    "3g.40gb": (3, 4),
    "4g.40gb": (4, 4),
    "7g.80gb": (7, 8),
}
_H200 = {
    "1g.18gb": (1, 1),
    "1g.35gb": (1, 2),
    "2g.35gb": (2, 2),
    "3g.71gb": (3, 4),
    "4g.71gb": (4, 4),
    "7g.141gb": (7, 8),
}

BUILTIN_MIG_CATALOG: tuple[MigFamily, ...] = (
    MigFamily(family="A100-40GB", models=["*A100*40GB*", "*A100-PCIE-40GB*"], profiles=_A100_40),
    MigFamily(family="A100-80GB", models=["*A100*80GB*"], profiles=_X_80),
    MigFamily(
        family="H100-80GB", models=["*H100*80GB*", "*H100 PCIe*", "*H100-SXM*", "*H100"], profiles=_X_80
    ),
    MigFamily(family="H200-141GB", models=["*H200*"], profiles=_H200),
)

_PROFILE = re.compile(r"^(\d+)g\.(\d+)gb$")


class CatalogError(ValueError):
    """A device that cannot be weighed or priced: names it and says what to configure."""


class CatalogWarning(UserWarning):
    pass


@dataclass(frozen=True)
class DeviceClass:
    """What the accounting needs to know of one (modelName, MIG profile)."""

    model_name: str
    gpu_model: str  # canonical rate-card name, shown on invoices
    mig_profile: str | None
    compute_slices: int | None
    memory_slices: int | None
    weight: float  # R3, GPU-equivalents
    gpu_price_per_hour: (
        float | None
    )  # the whole GPU's price (pool cost, R9); None under price_source: opencost
    device_price_per_hour: (
        float | None
    )  # this device's price per device-hour (weight × GPU price, or override)
    price_override: float | None = None  # a MIG profile's own price per instance-hour, when configured


def _families(config: Config) -> list[MigFamily]:
    # Configured families come first so that configuration can override the built-ins.
    return [*config.rate_card.mig_catalog, *BUILTIN_MIG_CATALOG]


def mig_slices(config: Config, model_name: str, profile: str) -> tuple[int, int, bool]:
    """(compute, memory, from_catalog) for a profile on a GPU model; R3 fallback for unknown ones."""
    base = profile.removesuffix("+me")  # media-engine variants weigh as their base profile
    for family in _families(config):
        if (
            any(fnmatch.fnmatchcase(model_name, pattern) for pattern in family.models)
            and base in family.profiles
        ):
            compute, memory = family.profiles[base]
            return compute, memory, True
    ambiguity = ""
    known_model = any(fnmatch.fnmatchcase(model_name, p) for f in _families(config) for p in f.models)
    if not known_model:  # model unknown to every family: the profile name alone, if the families agree on it
        slices = {family.profiles[base] for family in _families(config) if base in family.profiles}
        if len(slices) == 1:
            compute, memory = slices.pop()
            return compute, memory, True
        if len(slices) > 1:  # e.g. 1g.10gb: (1, 2) on A100-40GB, (1, 1) on A100-80GB/H100: do not guess
            ambiguity = (
                f" (the model is in no catalog family, and the families disagree on this profile's slices: "
                f"{sorted(slices)}; add the model under rate_card.mig_catalog)"
            )
    match = _PROFILE.match(base)
    if not match:
        raise CatalogError(
            f"MIG profile {profile!r} on {model_name!r} does not parse as <N>g.<M>gb and is not in the catalog; "
            "add it under rate_card.mig_catalog in the config."
        )
    compute = int(match.group(1))
    if not 1 <= compute <= 7:
        raise CatalogError(f"MIG profile {profile!r} on {model_name!r} claims {compute} of 7 compute slices")
    warnings.warn(
        f"MIG profile {profile!r} on {model_name!r} is not in the catalog{ambiguity}: weighing it {compute}/7 of "
        "the GPU by its compute slices; add it under rate_card.mig_catalog in the config to weigh it exactly",
        CatalogWarning,
        stacklevel=2,
    )
    # Memory slices are unknown: the compute share stands for both (R3 says N/7).
    return compute, round(compute * 8 / 7), False


def match_model(config: Config, model_name: str) -> GpuModelPrice | None:
    """R8: exact match on the canonical name, then aliases (exact, then globs) in file order."""
    models = config.rate_card.models
    for model in models:
        if model.model == model_name:
            return model
    for model in models:
        if model_name in model.aliases:
            return model
    for model in models:
        if any(fnmatch.fnmatchcase(model_name, alias) for alias in model.aliases):
            return model
    return None


def resolve_device_class(
    config: Config,
    model_name: str,
    mig_profile: str | None,
    node: str | None = None,
    day: date | None = None,
) -> DeviceClass:
    """The device class of a model (and MIG profile) at the rate card's prices in effect on `day` (a UTC day;
    today's without one): R3's weight, R8's prices."""
    rate = match_model(config, model_name)
    day = day or utc_today()
    rate_price, rate_profiles = rate.prices_on(day) if rate else (None, {})
    gpu_model = rate.model if rate else model_name
    opencost = config.rate_card.price_source == "opencost"
    where = f" on node {node!r}" if node else ""
    if rate is None and not opencost:
        raise CatalogError(
            f"GPU model {model_name!r}{where} has no price: add it (or an alias matching it) under "
            "rate_card.models in the config."
        )
    gpu_price = None if opencost or rate is None else rate_price
    if not opencost and gpu_price is None:
        before = ""
        if rate is not None and rate.price_changes:  # priced by its changes only: none before the first
            before = f" on {day} (its price_changes start {rate.price_changes[0].effective_from})"
        raise CatalogError(
            f"GPU model {model_name!r}{where} matches rate_card model {gpu_model!r}, which has no "
            f"price_per_gpu_hour{before}"
        )
    if mig_profile is None:
        return DeviceClass(model_name, gpu_model, None, None, None, 1.0, gpu_price, gpu_price)
    compute, memory, from_catalog = mig_slices(config, model_name, mig_profile)
    # R3: a profile outside the catalog weighs N/7 under either mig_weight (its memory slices are unknown).
    weight = compute / 7 if config.rate_card.mig_weight == "compute" or not from_catalog else memory / 8
    override = rate_profiles.get(mig_profile)
    if override is None:
        override = rate_profiles.get(mig_profile.removesuffix("+me"))
    device_price = override if override is not None else (None if gpu_price is None else weight * gpu_price)
    return DeviceClass(
        model_name, gpu_model, mig_profile, compute, memory, weight, gpu_price, device_price, override
    )
