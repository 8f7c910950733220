"""int_gpu_samples: each GPU's observed samples (R4), their mode (R3), energy steps (R10), price (R8), holder
(R5, R6) and repeated scrapes (R1), from a range's series samples."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from gpumeter.models.sample_pass.inputs import LEAST_NONE, NONE, Classes, Day, NodeSpans, Series
from gpumeter.models.sample_pass.runs import least, most, previous_valid, run_of_row, sql_round, starts
from gpumeter.models.sample_pass.series_samples import SeriesSamples
from gpumeter.models.sample_pass.tables import LONGEST_GAP_S, Columns, nullable

# What the series samples of a GPU sample show, a bit each (GpuReadings.flags): R11 an XID other than 0 on any
# series; R3 an observed series of a MIG instance; R3 an observed GPU-level series with GPU_UTIL or a pod, which
# only a whole GPU shows; R4 an observed series; R5 an observed series whose pod labels could not be told from
# the scrape target's.
UNHEALTHY, SHOWS_INSTANCE, SHOWS_WHOLE, OBSERVED, UNVERIFIED = (np.uint8(1 << bit) for bit in range(5))


@dataclass(frozen=True)
class GpuReadings:
    """The series samples of one GPU and time, together: each array indexed by reading, in GPU and time
    order. The node, model and holders are those of the series observed (R4); the readings the largest."""

    start: np.ndarray  # the reading's first series sample
    gpu: np.ndarray
    ts: np.ndarray
    node: np.ndarray  # the least node key of the series observed (NONE: none)
    model: np.ndarray
    first_holder: np.ndarray  # the least and most holder key the series observed name (NONE: none)
    last_holder: np.ndarray
    flags: np.ndarray  # UNHEALTHY | SHOWS_INSTANCE | SHOWS_WHOLE | OBSERVED | UNVERIFIED
    energy: np.ndarray  # the GPU's energy counter, mJ (nan: no reading)
    fb: np.ndarray  # the GPU-level series' frame buffer used, MiB
    gr: np.ndarray
    util: np.ndarray


def _bit(where: np.ndarray, flag: np.uint8) -> np.ndarray:
    return where.astype(np.uint8) * flag


def gpu_readings(samples: SeriesSamples, series: Series) -> GpuReadings:
    """R4: the series samples of each GPU and time, together: the node, model and holders of the series
    observed; an XID on any series tells the GPU's health (R11: unhealthy)."""
    observed, instance = samples.observed, samples.instance
    at = starts(samples.gpu, samples.ts)
    flags = (
        _bit(np.nan_to_num(samples.xid) != 0, UNHEALTHY)
        | _bit(observed & instance, SHOWS_INSTANCE)
        | _bit(observed & ~instance & (~np.isnan(samples.util) | series.has_pod[samples.place]), SHOWS_WHOLE)
        | _bit(observed, OBSERVED)
    )
    if series.any_unverified:
        flags |= _bit(observed & series.holder_unverified[samples.place], UNVERIFIED)
    return GpuReadings(
        start=at,
        gpu=samples.gpu[at],
        ts=samples.ts[at],
        node=least(np.where(observed, samples.node, NONE), at),
        model=least(np.where(observed, series.model[samples.place], NONE), at),
        first_holder=least(samples.holder, at),
        last_holder=most(samples.holder, at),
        flags=np.bitwise_or.reduceat(flags, at),
        energy=gpu_energy(samples, at),
        fb=np.fmax.reduceat(np.where(instance, np.nan, samples.fb), at),
        gr=np.fmax.reduceat(samples.gr, at),
        util=np.fmax.reduceat(samples.util, at),
    )


def gpu_energy(samples: SeriesSamples, at: np.ndarray) -> np.ndarray:
    """R10: energy is a GPU-level counter. dcgm-exporter's default (flex) device mode watches a MIG GPU only
    through its instances, each repeating the GPU's reading: taken where the GPU's own series has none."""
    energy = np.fmax.reduceat(np.where(samples.instance, np.nan, samples.energy), at)
    if np.isnan(energy).any():
        energy = np.where(
            np.isnan(energy), np.fmax.reduceat(np.where(samples.instance, samples.energy, np.nan), at), energy
        )
    return energy


def uuids_on_several_nodes(samples: SeriesSamples, readings: GpuReadings) -> Columns | None:
    """R4: one UUID reported by two nodes at one sample, billed at the first node by name; the other's rows are
    set aside (int_dcgm_quarantine). None where there is none."""
    # A missing node label counts as one node, the least.
    node = np.maximum(samples.node, 0)
    first = np.minimum.reduceat(np.where(samples.observed, node, LEAST_NONE), readings.start)
    last = np.maximum.reduceat(np.where(samples.observed, node, NONE), readings.start)
    several = (readings.flags & OBSERVED != 0) & (first != last)
    if not several.any():
        return None
    return {
        "gpu_key": readings.gpu[several],
        "ts_ms": readings.ts[several],
        "billed_node_key": readings.node[several],
    }


@dataclass(frozen=True)
class GpuSamples:
    """Each GPU's observed samples over time, the lookback too (the readings with a series observed): each
    array indexed by sample, in GPU and time order."""

    reading: np.ndarray  # the sample's reading (GpuReadings)
    gpu: np.ndarray
    ts: np.ndarray
    node: np.ndarray
    model: np.ndarray
    first_holder: np.ndarray
    last_holder: np.ndarray
    flags: np.ndarray
    energy: np.ndarray
    fb: np.ndarray
    gr: np.ndarray
    util: np.ndarray
    new_gpu: np.ndarray  # the GPU's first sample
    has_prev: np.ndarray  # not the GPU's first sample
    gpu_start: np.ndarray  # the GPU's first sample's index
    prev_ts: np.ndarray  # the time of the sample before (0 at a GPU's first)
    shows_instances: np.ndarray  # whether the GPU ever shows a MIG instance (the day's series)


def observed_samples(readings: GpuReadings, series: Series) -> GpuSamples:
    """R4: a GPU is observed at a time when a series of it is."""
    kept = np.flatnonzero(readings.flags & OBSERVED)
    gpu, ts = readings.gpu[kept], readings.ts[kept]
    n = gpu.size
    new_gpu = np.r_[True, gpu[1:] != gpu[:-1]] if n else np.zeros(0, dtype=bool)
    return GpuSamples(
        reading=kept,
        gpu=gpu,
        ts=ts,
        node=readings.node[kept],
        model=readings.model[kept],
        first_holder=readings.first_holder[kept],
        last_holder=readings.last_holder[kept],
        flags=readings.flags[kept],
        energy=readings.energy[kept],
        fb=readings.fb[kept],
        gr=readings.gr[kept],
        util=readings.util[kept],
        new_gpu=new_gpu,
        has_prev=~new_gpu,
        gpu_start=np.maximum.accumulate(np.where(new_gpu, np.arange(n), 0)) if n else np.zeros(0, np.int64),
        prev_ts=np.r_[0, ts[:-1]] if n else ts,
        shows_instances=series.shows_instances[gpu],
    )


class EnergySteps(NamedTuple):
    """R10: each sample's energy since the GPU's previous reading, mJ, and that rounded to a whole mJ."""

    mj: np.ndarray
    whole_mj: np.ndarray


def energy_steps(gpus: GpuSamples) -> EnergySteps:
    """R10: energy since the GPU's previous reading; a counter that went down was reset and its new value is
    what accrued since; no reading, or none before it: 0."""
    prev_energy_at = previous_valid(~np.isnan(gpus.energy), gpus.gpu_start)
    prev_energy = np.where(prev_energy_at >= 0, gpus.energy[np.maximum(prev_energy_at, 0)], np.nan)
    step = gpus.energy - prev_energy
    mj = np.where(np.isnan(step), 0.0, np.where(step >= 0, step, gpus.energy))
    return EnergySteps(mj, sql_round(mj))


def mig_mode(gpus: GpuSamples, day: Day) -> np.ndarray:
    """R3: MIG where a series of the GPU carries an instance, whole where its GPU-level series show what only a
    whole GPU shows; else the mode last shown in the run of samples no more than two scrapes apart (a run
    starts whole). Only a GPU that ever shows an instance can be MIG."""
    n = gpus.gpu.size
    run_start = gpus.new_gpu | (gpus.ts - gpus.prev_ts > 2 * day.scrape_s * 1000)
    run_begin = np.maximum.accumulate(np.where(run_start, np.arange(n), 0)) if n else gpus.gpu_start
    shows = np.where(gpus.flags & SHOWS_INSTANCE != 0, 1, np.where(gpus.flags & SHOWS_WHOLE != 0, 0, -1))
    decided = np.maximum.accumulate(np.where(shows >= 0, np.arange(n), -1)) if n else gpus.gpu_start
    return gpus.shows_instances & (decided >= run_begin) & (shows[np.maximum(decided, 0)] == 1)


def repeated_scrapes(gpus: GpuSamples, day: Day) -> np.ndarray:
    """R1: a sample at most Δ/2 after the GPU's previous one repeats a scrape (billed, and reported)."""
    return gpus.has_prev & (gpus.ts - gpus.prev_ts <= day.scrape_s * 500)


def sample_gaps(gpus: GpuSamples, in_day: np.ndarray) -> Columns | None:
    """R1: how many gaps of each length (whole seconds, at most LONGEST_GAP_S) lie between a GPU's consecutive
    samples of the day, per node (the interval dcgm-exporter is scraped at, which Δ must be). None: no gap."""
    gapped = gpus.has_prev & in_day
    if not gapped.any():
        return None
    node, gap_ms = gpus.node[gapped], gpus.ts[gapped] - gpus.prev_ts[gapped]
    seconds = np.minimum((gap_ms + 500) // 1000, LONGEST_GAP_S)
    lowest = int(node.min())
    counts = np.bincount((node.astype(np.int64) - lowest) * (LONGEST_GAP_S + 1) + seconds)
    found = np.flatnonzero(counts)
    nodes = (found // (LONGEST_GAP_S + 1) + lowest).astype(np.int32)
    return {
        "node_key": nullable(nodes, nodes != NONE, pa.int32()),
        "gap_s": (found % (LONGEST_GAP_S + 1)).astype(np.int32),
        "gaps": counts[found],
    }


@dataclass(frozen=True)
class DevicePrices:
    """R8, R3: each GPU sample's class and price (nan: none)."""

    classed: np.ndarray  # the model has a whole-GPU class: a sample of the day's
    weight: np.ndarray
    gpu_price: np.ndarray  # per GPU-hour
    gpu_units: np.ndarray  # the same in 1e-8 of the currency (R12)
    price_units: np.ndarray  # the whole GPU's own price, else the GPU's


def device_prices(gpus: GpuSamples, classes: Classes, prices: NodeSpans) -> DevicePrices:
    """R8: the rate card's price of the model's whole-GPU class, else the node's OpenCost price then. A sample
    of a model with no class is not one of the day's."""
    n = gpus.gpu.size
    classed = np.zeros(n, dtype=bool)
    weight = np.full(n, np.nan)
    class_units = np.full(n, np.nan)
    class_price = np.full(n, np.nan)
    own_units = np.full(n, np.nan)
    for model in np.unique(gpus.model).tolist():
        found = classes.whole.get(model)
        if found is None:
            continue
        here = gpus.model == model
        classed |= here
        weight[here] = found[0]
        class_units[here] = np.nan if found[1] is None else found[1]
        class_price[here] = np.nan if found[2] is None else found[2]
        own_units[here] = np.nan if found[3] is None else found[3]
    _, span_price = prices.at(gpus.node, gpus.ts)
    gpu_units = np.where(np.isnan(class_units), sql_round(span_price * 100000000), class_units)
    return DevicePrices(
        classed=classed,
        weight=weight,
        gpu_price=np.where(np.isnan(class_price), span_price, class_price),
        gpu_units=gpu_units,
        price_units=np.where(np.isnan(own_units), gpu_units, own_units),
    )


def unschedulable_samples(gpus: GpuSamples, spans: NodeSpans) -> np.ndarray:
    """R11: whether each sample's node is unschedulable then (int_node_unschedulable_spans)."""
    held, _ = spans.at(gpus.node, gpus.ts)
    return held


def holders_of(first_holder: np.ndarray, last_holder: np.ndarray) -> np.ndarray:
    """R5, R6: a device sample's holder where its series name one pod (NONE: none, or several, which
    int_shared_sample_series_holders lists)."""
    return np.where(first_holder == last_holder, first_holder, NONE)


def busy(gr_engine_active: np.ndarray, gpu_util_pct: np.ndarray) -> np.ndarray:
    """R10: GR_ENGINE_ACTIVE where present, else GPU_UTIL / 100, clamped to [0, 1]; neither: 0 (SQL's greatest
    and least skip a null)."""
    found = np.where(np.isnan(gr_engine_active), gpu_util_pct / 100.0, gr_engine_active)
    return np.clip(np.nan_to_num(found, nan=0.0), 0.0, 1.0)


@dataclass(frozen=True)
class GpuFindings:
    """What the steps found of each observed GPU sample, beyond its readings."""

    is_mig: np.ndarray  # R3
    energy: EnergySteps  # R10
    prices: DevicePrices  # R8
    unschedulable: np.ndarray  # R11: its node unschedulable then
    repeats_scrape: np.ndarray  # R1


def gpu_sample_columns(gpus: GpuSamples, at: np.ndarray, found: GpuFindings, series: Series) -> Columns:
    """int_gpu_samples' rows, but its MIG layout: the observed samples `at` (those of the day, of a class)."""
    node, fb = gpus.node[at], gpus.fb[at]
    gpu_price, gpu_units = found.prices.gpu_price[at], found.prices.gpu_units[at]
    price_units = found.prices.price_units[at]
    holder = holders_of(gpus.first_holder[at], gpus.last_holder[at])
    device = series.whole_device[gpus.gpu[at]]
    return {
        "gpu_key": gpus.gpu[at],
        "ts_ms": gpus.ts[at],
        "node_key": nullable(node, node != NONE, pa.int32()),
        "model_key": gpus.model[at],
        "is_mig": found.is_mig[at],
        "unhealthy": gpus.flags[at] & UNHEALTHY != 0,
        "gpu_price_per_hour": nullable(gpu_price, ~np.isnan(gpu_price), pa.float64()),
        "gpu_price_units": nullable(
            np.nan_to_num(gpu_units).astype(np.int64), ~np.isnan(gpu_units), pa.int64()
        ),
        "gpu_fb_used_mib": nullable(fb, gpus.shows_instances[at] & ~np.isnan(fb), pa.float64()),
        "energy_joules": found.energy.mj[at] / 1000.0,
        "energy_mj": found.energy.whole_mj[at].astype(np.int64),
        "device_key": nullable(device, device != NONE, pa.int32()),
        "weight": found.prices.weight[at],
        "price_units": nullable(
            np.nan_to_num(price_units).astype(np.int64), ~np.isnan(price_units), pa.int64()
        ),
        "busy": busy(gpus.gr[at], gpus.util[at]),
        "fb_used_mib": nullable(fb, ~np.isnan(fb), pa.float64()),
        "unschedulable": found.unschedulable[at],
        "labelled": gpus.first_holder[at] != NONE,
        "holder_key": nullable(holder, holder != NONE, pa.int32()),
        "repeats_scrape": found.repeats_scrape[at],
        "holder_unverified": gpus.flags[at] & UNVERIFIED != 0,
    }


class SampleLinks(NamedTuple):
    """Each series sample's GPU reading, and its stored GPU sample (NONE: not a stored sample of the day)."""

    reading: np.ndarray
    gpu_sample: np.ndarray


def sample_links(
    samples: SeriesSamples, readings: GpuReadings, gpus: GpuSamples, at: np.ndarray
) -> SampleLinks:
    """The GPU reading and stored GPU sample (`at`: the observed samples stored) each series sample is part of."""
    reading = run_of_row(readings.start, samples.ts.size)
    stored_at = np.full(readings.start.size, NONE, np.int64)
    stored_at[gpus.reading[at]] = at
    return SampleLinks(reading, stored_at[reading])
