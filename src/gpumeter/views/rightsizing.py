"""MIG right-sizing advice: a whole GPU whose holder never needed all of it → the smallest MIG profile of that
GPU's catalog family (R3) that fits the holder's observed peaks, priced with the rate card (R8).

A profile fits when its compute slices / 7 ≥ the peak busy fraction (R10) and its memory ≥ the peak
framebuffer used. A profile's memory is the `<M>gb` of its name taken as M × 1000 MiB: a little under the
nominal size, as NVIDIA's usable memory of an instance is (docs/dashboard.md). Only profiles smaller than the
whole GPU are advice. The monthly saving is the price difference per hour × the hours held, scaled from the
metered days to the whole month (the same holding pattern, every day of the month).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from decimal import Decimal

import polars as pl

from gpumeter.config import Config
from gpumeter.models.device_classes import CatalogError, _families, resolve_device_class

_PROFILE_GB = re.compile(r"^(\d+)g\.(\d+)gb$")
MIB_PER_GB = 1000  # conservative: an instance's usable memory is below its nominal GB


@dataclass(frozen=True)
class HolderPeak:
    """One holder of one whole GPU over the window (gpumeter/views/capacity.py `whole_gpu_holders`)."""

    cluster: str
    node: str
    uuid: str
    model_name: str
    gpu_model: str
    tenant: str
    namespace: str
    pod: str
    held_gpu_hours: Decimal
    peak_fb_used_mib: float | None
    peak_busy: float | None


@dataclass(frozen=True)
class Advice:
    holder: HolderPeak
    profile: str
    compute_slices: int
    profile_memory_mib: int
    gpu_price_per_hour: Decimal
    profile_price_per_hour: Decimal
    monthly_saving: Decimal


def profile_ladder(config: Config, model_name: str) -> list[tuple[int, int, str, int]]:
    """The MIG profiles of the model's catalog family (R3) smaller than the whole GPU, as (compute slices,
    memory slices, profile, memory MiB), smallest first; empty when the model has no MIG family."""
    for family in _families(config):
        if not any(fnmatch.fnmatchcase(model_name, pattern) for pattern in family.models):
            continue
        ladder = []
        for profile, (compute, memory) in family.profiles.items():
            match = _PROFILE_GB.match(profile)
            if match is not None and compute < 7:
                ladder.append((compute, memory, profile, int(match.group(2)) * MIB_PER_GB))
        return sorted(ladder)  # fewest compute, then memory slices
    return []


def _first_fit(
    ladder: list[tuple[int, int, str, int]], peak_fb_used_mib: float, peak_busy: float
) -> tuple[str, int, int] | None:
    for compute, _, profile, memory_mib in ladder:
        if memory_mib >= peak_fb_used_mib and compute / 7 >= peak_busy:
            return profile, compute, memory_mib
    return None


def smallest_fitting_profile(
    config: Config, model_name: str, peak_fb_used_mib: float, peak_busy: float
) -> tuple[str, int, int] | None:
    """(profile, compute slices, memory MiB) of the smallest profile that fits both peaks, smaller than the
    whole GPU; None when only the whole GPU fits or the model has no MIG family."""
    return _first_fit(profile_ladder(config, model_name), peak_fb_used_mib, peak_busy)


def holder_peaks(frame: pl.DataFrame) -> list[HolderPeak]:
    """The rows of `Views.whole_gpu_holders` as HolderPeaks, read column-wise (a month of a 10,000-GPU fleet
    is ~50,000 holder rows: 0.8 s read row by row, 0.35 s column-wise; bench/README.md)."""
    if frame.is_empty():
        return []
    names = ("cluster", "node", "uuid", "model_name", "gpu_model", "tenant", "namespace", "pod")
    columns = [frame.get_column(name).to_list() for name in names]
    hours = [
        h if isinstance(h, Decimal) else Decimal(str(h)) for h in frame.get_column("held_gpu_hours").to_list()
    ]
    peaks = (frame.get_column("peak_fb_used_mib").to_list(), frame.get_column("peak_busy").to_list())
    return [HolderPeak(*row) for row in zip(*columns, hours, *peaks, strict=True)]  # HolderPeak's field order


def advise(holders: list[HolderPeak], config: Config, metered_days: int, days_in_month: int) -> list[Advice]:
    """Advice per holder, largest monthly saving first, at the rate card's prices of today (a saving is made
    from now on). Holders without peaks, or on GPUs priced by OpenCost (no per-profile price to compare), get
    none."""
    if metered_days <= 0:
        return []
    scale = Decimal(days_in_month) / Decimal(metered_days)
    # A fleet has a handful of models and profiles and tens of thousands of holders: ladders and prices are
    # looked up once per model and profile, not per holder.
    ladders: dict[str, list[tuple[int, int, str, int]]] = {}
    prices: dict[tuple[str, str | None], Decimal | None] = {}

    def price(model_name: str, profile: str | None) -> Decimal | None:
        if (model_name, profile) not in prices:
            try:
                found = resolve_device_class(config, model_name, profile).device_price_per_hour
            except CatalogError:
                found = None
            prices[model_name, profile] = None if found is None else Decimal(str(found))
        return prices[model_name, profile]

    advice = []
    for holder in holders:
        if holder.peak_fb_used_mib is None or holder.peak_busy is None:
            continue
        if holder.model_name not in ladders:
            ladders[holder.model_name] = profile_ladder(config, holder.model_name)
        fit = _first_fit(ladders[holder.model_name], holder.peak_fb_used_mib, holder.peak_busy)
        if fit is None:
            continue
        profile, compute, memory_mib = fit
        gpu_price, profile_price = price(holder.model_name, None), price(holder.model_name, profile)
        if gpu_price is None or profile_price is None:
            continue
        saving = (gpu_price - profile_price) * Decimal(holder.held_gpu_hours) * scale
        if saving > 0:
            advice.append(Advice(holder, profile, compute, memory_mib, gpu_price, profile_price, saving))
    return sorted(advice, key=lambda a: (-a.monthly_saving, a.holder.tenant, a.holder.pod))
