"""int_mig_instance_samples (R1, R3), the MIG layout of each MIG sample (R3), the pods of a shared device sample
(R5, R6) and the vgpu copies that disagree (R1, R6), from a range's series samples and its GPU samples."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import polars as pl
import pyarrow as pa

from gpumeter.models.sample_pass.gpu_samples import (
    UNHEALTHY,
    GpuFindings,
    GpuSamples,
    busy,
    holders_of,
)
from gpumeter.models.sample_pass.inputs import NONE, Classes, Series
from gpumeter.models.sample_pass.runs import least, mixed, most, run_of_row, starts
from gpumeter.models.sample_pass.series_samples import SeriesSamples
from gpumeter.models.sample_pass.tables import Columns, nullable


@dataclass(frozen=True)
class InstanceReadings:
    """The series samples of one MIG instance at a stored MIG sample of its GPU, together (vgpu copies of it
    collapse: the largest value, R6). `rows` and the arrays of a row are indexed by series sample in (GPU
    sample, device) order; the others by reading."""

    rows: np.ndarray  # the series samples (SeriesSamples), read in this order
    device: np.ndarray  # each row's instance
    series_holder: np.ndarray  # each row's series' holder (NONE: none)
    start: np.ndarray  # each reading's first row
    gpu_sample: np.ndarray  # its GPU sample (GpuSamples)
    model: np.ndarray
    profile: np.ndarray
    gr: np.ndarray
    util: np.ndarray
    fb: np.ndarray
    first_holder: np.ndarray
    last_holder: np.ndarray


def instance_readings(
    samples: SeriesSamples, series: Series, gpu_sample: np.ndarray, mig_sample: np.ndarray
) -> InstanceReadings | None:
    """R1, R3: the series samples of one instance at a stored MIG sample of its GPU (`gpu_sample`: each series
    sample's stored GPU sample, NONE: none; `mig_sample`: by GPU sample, whether stored and MIG). None: no
    instance sample."""
    rows = np.flatnonzero(samples.in_day & samples.observed & samples.instance & (gpu_sample != NONE))
    rows = rows[mig_sample[gpu_sample[rows]]]
    if not rows.size:
        return None
    device = series.device[samples.place[rows]]
    key = gpu_sample[rows] * series.device_keys + device  # a (GPU sample, device) pair as one integer key
    if np.any(key[1:] < key[:-1]):
        order = np.argsort(key, kind="stable")
        rows, key, device = rows[order], key[order], device[order]
    at = starts(key)
    series_holder = series.holder[samples.place[rows]]
    gr, util, fb = (np.fmax.reduceat(column[rows], at) for column in (samples.gr, samples.util, samples.fb))
    return InstanceReadings(
        rows=rows,
        device=device,
        series_holder=series_holder,
        start=at,
        gpu_sample=gpu_sample[rows[at]],
        model=least(series.model[samples.place[rows]], at),
        profile=least(series.profile[samples.place[rows]], at),
        gr=gr,
        util=util,
        fb=fb,
        first_holder=least(series_holder, at),
        last_holder=most(series_holder, at),
    )


@dataclass(frozen=True)
class InstanceSamples:
    """The instance readings of a class (R3: a profile the catalog weighs), each array indexed by sample in
    (GPU sample, device) order."""

    reading: np.ndarray  # the sample's reading (InstanceReadings)
    gpu_sample: np.ndarray  # its GPU sample (GpuSamples)
    device: np.ndarray
    ts: np.ndarray
    model: np.ndarray
    profile: np.ndarray
    weight: np.ndarray  # R3: the instance's share of its GPU
    own_units: np.ndarray  # R8: the profile's own price units (nan: none)


def classed_instances(
    instances: InstanceReadings, samples: SeriesSamples, classes: Classes
) -> InstanceSamples:
    """R3: an instance sample is one of a class: its weight, and its profile's own price (R8)."""
    weight, own_units = classes.instance_class(instances.model, instances.profile)
    keep = np.flatnonzero(~np.isnan(weight))
    return InstanceSamples(
        reading=keep,
        gpu_sample=instances.gpu_sample[keep],
        device=instances.device[instances.start][keep],
        ts=samples.ts[instances.rows[instances.start]][keep],
        model=instances.model[keep],
        profile=instances.profile[keep],
        weight=weight[keep],
        own_units=own_units[keep],
    )


class MigLayouts(NamedTuple):
    """R3: the layout of each stored MIG sample with an instance sample."""

    first: np.ndarray  # its first instance sample (InstanceSamples)
    gpu_sample: np.ndarray  # the MIG sample (GpuSamples)
    key: np.ndarray  # uint64: its layout's key


def mig_layouts(kept: InstanceSamples) -> MigLayouts:
    """R3: a MIG sample's layout, keyed by its instances (device, profile and model: a layout is one set of
    classes), in any order. The same key is the same instances, so the marts sum a layout's samples by its key
    and weigh it once (int_mig_layout_instances), never joining instances to their samples."""
    first = starts(kept.gpu_sample)
    key = (
        np.bitwise_xor.reduceat(mixed(kept.device, kept.profile, kept.model), first)
        if kept.gpu_sample.size
        else np.zeros(0, np.uint64)
    )
    return MigLayouts(first, kept.gpu_sample[first], key)


def layout_column(layouts: MigLayouts | None, at: np.ndarray, gpu_samples: int) -> pa.Array:
    """int_gpu_samples.mig_layout_key of the stored GPU samples `at` (null: no instance sample)."""
    layout, has_layout = np.zeros(gpu_samples, np.uint64), np.zeros(gpu_samples, dtype=bool)
    if layouts is not None:
        layout[layouts.gpu_sample] = layouts.key
        has_layout[layouts.gpu_sample] = True
    return nullable(layout[at], has_layout[at], pa.uint64())


def instance_sample_columns(
    instances: InstanceReadings,
    kept: InstanceSamples,
    layouts: MigLayouts,
    gpus: GpuSamples,
    found: GpuFindings,
) -> Columns:
    """int_mig_instance_samples' rows: an instance sample's own readings, its GPU sample's node, health,
    energy (R10: its share by weight) and unschedulable node (R11); its profile's price, else its GPU's (R8);
    its frame buffer, else its share of the GPU's."""
    g, w, keep = kept.gpu_sample, kept.weight, kept.reading
    units = np.where(np.isnan(kept.own_units), found.prices.gpu_units[g], kept.own_units)
    gpu_fb_mig = np.where(gpus.shows_instances[g], gpus.fb[g], np.nan)
    fb_used = np.where(np.isnan(instances.fb[keep]), gpu_fb_mig * w, instances.fb[keep])
    holder = holders_of(instances.first_holder[keep], instances.last_holder[keep])
    return {
        "device_key": kept.device,
        "ts_ms": kept.ts,
        "gpu_key": gpus.gpu[g],
        "node_key": nullable(gpus.node[g], gpus.node[g] != NONE, pa.int32()),
        "model_key": kept.model,
        "profile_key": kept.profile,
        "weight": w,
        "price_units": nullable(np.nan_to_num(units).astype(np.int64), ~np.isnan(units), pa.int64()),
        "busy": busy(instances.gr[keep], instances.util[keep]),
        "fb_used_mib": nullable(fb_used, ~np.isnan(fb_used), pa.float64()),
        "unhealthy": gpus.flags[g] & UNHEALTHY != 0,
        "energy_joules": found.energy.mj[g] / 1000.0 * w,
        "energy_mj": found.energy.whole_mj[g].astype(np.int64),
        "unschedulable": found.unschedulable[g],
        "labelled": instances.first_holder[keep] != NONE,
        "holder_key": nullable(holder, holder != NONE, pa.int32()),
        "mig_layout_key": np.repeat(layouts.key, np.diff(np.r_[layouts.first, g.size])),
    }


# The pods that the series of a shared device sample name: (time, device key, holder key) per series sample.
HolderPairs = tuple[np.ndarray, np.ndarray, np.ndarray]


def whole_gpu_holders(
    samples: SeriesSamples,
    series: Series,
    gpus: GpuSamples,
    gpu_sample: np.ndarray,
    at: np.ndarray,
    is_mig: np.ndarray,
) -> HolderPairs:
    """R5, R6: the pods the series of a whole GPU's sample name, where they name more than one (`at`: the stored
    GPU samples; `gpu_sample`: each series sample's, NONE: none)."""
    first, last = gpus.first_holder[at], gpus.last_holder[at]
    shared = np.zeros(gpus.gpu.size, dtype=bool)
    shared[at] = ~is_mig[at] & (first != NONE) & (first != last)
    rows = np.flatnonzero(samples.observed & (samples.holder != NONE) & (gpu_sample != NONE))
    rows = rows[shared[gpu_sample[rows]]]
    return samples.ts[rows], series.device[samples.place[rows]], samples.holder[rows]


def instance_holders(
    instances: InstanceReadings, kept: InstanceSamples, samples: SeriesSamples
) -> HolderPairs:
    """R5, R6: the pods the series of an instance's sample name, where they name more than one."""
    shared = np.zeros(instances.start.size, dtype=bool)
    first, last = instances.first_holder[kept.reading], instances.last_holder[kept.reading]
    shared[kept.reading] = (first != NONE) & (first != last)
    named = shared[run_of_row(instances.start, instances.rows.size)] & (instances.series_holder != NONE)
    return samples.ts[instances.rows[named]], instances.device[named], instances.series_holder[named]


def shared_sample_holders(pairs: list[HolderPairs]) -> Columns | None:
    """R5, R6: each pod of a shared device sample once (int_shared_sample_series_holders). None: none."""
    ts, device, holder = (np.concatenate(parts) for parts in zip(*pairs, strict=True))
    if not ts.size:
        return None
    unique = pl.DataFrame({"ts_ms": ts, "device_key": device, "holder_key": holder}).unique()
    return {name: unique[name].to_numpy() for name in unique.columns}


def vgpu_copy_conflicts(
    samples: SeriesSamples, series: Series, reading_of_sample: np.ndarray
) -> Columns | None:
    """R1, R6: a device sample of the day whose vgpu copies disagree (reported, never resolved silently).
    `reading_of_sample`: each series sample's GPU reading. None: no vgpu copy."""
    rows = np.flatnonzero(samples.in_day & series.vgpu_copy[samples.place])
    if not rows.size:
        return None
    device = series.device[samples.place[rows]]
    key = reading_of_sample[rows] * series.device_keys + device
    if np.any(key[1:] < key[:-1]):
        order = np.argsort(key, kind="stable")
        rows, key, device = rows[order], key[order], device[order]
    at = starts(key)
    disagree = np.zeros(at.size, dtype=bool)
    for column in (samples.gr, samples.util):
        low, high = np.fmin.reduceat(column[rows], at), np.fmax.reduceat(column[rows], at)
        disagree |= low < high
    node = least(samples.node[rows], at)
    return {
        "device_key": device[at][disagree],
        "ts_ms": samples.ts[rows][at][disagree],
        "node_key": nullable(node[disagree], node[disagree] != NONE, pa.int32()),
    }
