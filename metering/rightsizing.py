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

from metering.catalog import CatalogError, _families, resolve_device_class
from metering.config import Config

_PROFILE_GB = re.compile(r"^(\d+)g\.(\d+)gb$")
MIB_PER_GB = 1000  # conservative: an instance's usable memory is below its nominal GB


@dataclass(frozen=True)
class HolderPeak:
    """One holder of one whole GPU over the window (metering/views.py `whole_gpu_holders`)."""

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


def smallest_fitting_profile(
    config: Config, model_name: str, peak_fb_used_mib: float, peak_busy: float
) -> tuple[str, int, int] | None:
    """(profile, compute slices, memory MiB) of the smallest profile that fits both peaks, smaller than the
    whole GPU; None when only the whole GPU fits or the model has no MIG family."""
    for family in _families(config):
        if not any(fnmatch.fnmatchcase(model_name, pattern) for pattern in family.models):
            continue
        fitting = []
        for profile, (compute, memory) in family.profiles.items():
            match = _PROFILE_GB.match(profile)
            if match is None or compute >= 7:
                continue
            memory_mib = int(match.group(2)) * MIB_PER_GB
            if memory_mib >= peak_fb_used_mib and compute / 7 >= peak_busy:
                fitting.append((compute, memory, profile, memory_mib))
        if not fitting:
            return None
        compute, _, profile, memory_mib = min(fitting)  # fewest compute, then memory slices
        return profile, compute, memory_mib
    return None


def advise(holders: list[HolderPeak], config: Config, metered_days: int, days_in_month: int) -> list[Advice]:
    """Advice per holder, largest monthly saving first. Holders without peaks, or on GPUs priced by OpenCost
    (no per-profile price to compare), get none."""
    if metered_days <= 0:
        return []
    scale = Decimal(days_in_month) / Decimal(metered_days)
    advice = []
    for holder in holders:
        if holder.peak_fb_used_mib is None or holder.peak_busy is None:
            continue
        fit = smallest_fitting_profile(config, holder.model_name, holder.peak_fb_used_mib, holder.peak_busy)
        if fit is None:
            continue
        profile, compute, memory_mib = fit
        try:
            whole = resolve_device_class(config, holder.model_name, None)
            part = resolve_device_class(config, holder.model_name, profile)
        except CatalogError:
            continue
        if whole.device_price_per_hour is None or part.device_price_per_hour is None:
            continue
        gpu_price = Decimal(str(whole.device_price_per_hour))
        profile_price = Decimal(str(part.device_price_per_hour))
        saving = (gpu_price - profile_price) * Decimal(holder.held_gpu_hours) * scale
        if saving > 0:
            advice.append(Advice(holder, profile, compute, memory_mib, gpu_price, profile_price, saving))
    return sorted(advice, key=lambda a: (-a.monthly_saving, a.holder.tenant, a.holder.pod))
