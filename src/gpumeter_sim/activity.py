"""What the factory does on a day: which pod holds each lane slot at each sample and how busy it keeps its
device (utilization shapes), and what each GPU draws as a result: power, temperature, XID errors and its
energy counter. Vectorized: numpy per series (per device, per pod), never per sample, from generators
seeded from (seed, day, ...)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, timedelta

import numpy as np

from gpumeter_sim.catalog import MODELS, XID_CODE
from gpumeter_sim.layout import GpuInfo, Lane, Layout, MigInstance, factory_layout, lane_index
from gpumeter_sim.pods import Pod, day_pods
from gpumeter_sim.spec import DAY_S, FactorySpec, epoch


def _ceil_idx(t: int, d0: int, step: int, n: int) -> int:
    """Index of the first sample at or after epoch second t (samples at d0 + i*step)."""
    return min(max(-((d0 - t) // step), 0), n)


@dataclass
class DayContext:
    """One day of a spec: its pods, and per lane slot (lane id, slot) the pod holding it at each
    dcgm-exporter sample (an index into `pods`, -1 for none), how busy it keeps the device and how much of
    its memory it uses."""

    spec: FactorySpec
    layout: Layout
    day: date
    d0: int
    n: int
    step: int
    pods: list[Pod]
    hours: np.ndarray  # hour of day per sample
    slot_holder: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    slot_busy: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    slot_mem: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    # kube-state-metrics / OpenCost / Kueue scrapes are at d0 + phase + k * step (ksm_offset_s before the
    # dcgm-exporter grid: phase = step - offset), all within the day (R2).
    phase: int = 0

    def idx(self, t: int) -> int:
        """Index of the first dcgm-exporter sample at or after epoch second t."""
        return _ceil_idx(t, self.d0, self.step, self.n)

    def kidx(self, t: int) -> int:
        """Index of the first kube scrape at or after epoch second t."""
        return _ceil_idx(t - self.phase, self.d0, self.step, self.n)


def _shape(shape: str, level: float, noise: np.ndarray, u: np.ndarray, hours: np.ndarray) -> np.ndarray:
    if shape == "train":
        b = level + 0.03 * noise
        b = np.where(u < 0.02, b * 0.3, b)  # checkpoint / input stalls
    elif shape == "diurnal":
        b = level * (0.65 + 0.35 * np.sin(2 * np.pi * (hours - 8.0) / 24.0)) + 0.04 * noise
    elif shape == "bursty":
        b = np.where(u < 0.35, level + 0.1 * noise, 0.01 + 0.005 * np.abs(noise))
    elif shape == "reserve":  # holds the GPU for others, runs nothing
        return np.zeros_like(noise)
    else:  # idle: held, 0-3 %
        return np.clip(level + 0.004 * noise, 0.0, 0.03)
    return np.clip(b, 0.0, 1.0)


def build_day(spec: FactorySpec, day: date) -> DayContext:
    """The day's pods and who holds each lane slot when, how busy. Depends only on (spec, day)."""
    if day < spec.start:
        raise ValueError(f"day {day} is before the spec's start {spec.start}")
    layout = factory_layout(spec)
    step = spec.scrape_interval_s
    n = DAY_S // step
    ctx = DayContext(
        spec, layout, day, epoch(day), n, step, day_pods(spec, day), (np.arange(n) * step) / 3600.0
    )
    ctx.phase = (step - spec.ksm_offset_s) % step
    # dcgm-exporter names a pod at a sample exactly when the latest kube scrape before it shows the pod
    # Running: that scrape is ksm_offset_s earlier.
    off = spec.ksm_offset_s
    by_slot: dict[tuple[int, int], list[int]] = {}
    for i, pod in enumerate(ctx.pods):
        by_slot.setdefault((pod.lane, pod.slot), []).append(i)
    for lane in layout.lanes:
        for slot in range(len(lane.slot_kinds)):
            rng = np.random.default_rng([spec.seed, day.toordinal(), 3, lane.lid, slot])
            noise = rng.normal(0.0, 1.0, n)
            u = rng.random(n)
            holder = np.full(n, -1, dtype=np.int32)
            busy = np.zeros(n)
            mem = np.zeros(n)
            for i in by_slot.get((lane.lid, slot), []):
                pod = ctx.pods[i]
                r0, r1 = ctx.idx(pod.running + off), ctx.idx(pod.finished + off)
                if r1 <= r0:
                    continue
                holder[r0:r1] = i
                busy[r0:r1] = _shape(pod.shape, pod.busy, noise[r0:r1], u[r0:r1], ctx.hours[r0:r1])
                if pod.shape == "train" and pod.running >= ctx.d0:  # warm-up: the first minutes
                    warm = min(r1, r0 + max(1, 180 // step))
                    busy[r0:warm] *= 0.2
                mem[r0:r1] = pod.mem
            ctx.slot_holder[(lane.lid, slot)] = holder
            ctx.slot_busy[(lane.lid, slot)] = busy
            ctx.slot_mem[(lane.lid, slot)] = mem
    return ctx


# --- a GPU's day ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """A stretch [i0, i1) of a day's samples in which a GPU has one layout: whole (`instances` None) or MIG
    with these instances (possibly none: between two layouts the GPU-level series go on)."""

    i0: int
    i1: int
    instances: tuple[MigInstance, ...] | None


@dataclass
class Device:
    """One billable device of a GPU for the day: the whole GPU (`inst` None) or a MIG instance, with its
    lane slots' holders, busy and memory per sample (zero, -1 outside its segment)."""

    segment: Segment
    inst: MigInstance | None
    holders: list[np.ndarray]
    busy: np.ndarray
    mem: np.ndarray


@dataclass
class GpuDay:
    """One GPU's values for the day, its layout segments and their devices."""

    power: np.ndarray
    temp: np.ndarray
    xid: np.ndarray
    energy_inc: np.ndarray  # int64 mJ accumulated over each sample's interval
    segments: list[Segment]
    devices: list[Device]


def _segments(ctx: DayContext, gpu: GpuInfo) -> list[Segment]:
    """The GPU's layouts over the day (R3: a GPU's mode is per sample). A re-partition on the events day:
    the old layout until its start, then no instances until its end (a whole GPU going MIG is reset by the
    MIG manager: no series at all), then the new layout; the new layout on every later day."""
    n = ctx.n
    before = gpu.mig or None
    rw = ctx.layout.repartition
    if gpu.mig_after is None or rw is None or ctx.day < rw.day:
        return [Segment(0, n, before)]
    if ctx.day > rw.day:
        return [Segment(0, n, gpu.mig_after)]
    i0, i1 = ctx.idx(ctx.d0 + rw.start_s), ctx.idx(ctx.d0 + rw.end_s)
    out = [Segment(0, i0, before)]
    if before is not None:
        out.append(Segment(i0, i1, ()))
    out.append(Segment(i1, n, gpu.mig_after))
    return out


def gpu_day(ctx: DayContext, gpu: GpuInfo, lanes: dict[tuple[int, int | None], Lane]) -> GpuDay:
    """A GPU's day: its devices' holders and load, and the power, temperature, XID and energy that follow."""
    spec, n = ctx.spec, ctx.n
    model = MODELS[gpu.model]
    rng = np.random.default_rng([spec.seed, ctx.day.toordinal(), 2, gpu.gidx])
    noise = rng.normal(0.0, 1.0, (3, n))
    xid = np.zeros(n)
    xw = ctx.layout.xid
    if xw is not None and ctx.layout.xid_gpu == gpu.gidx and xw.day == ctx.day:
        xid[xw.start_s // ctx.step : xw.end_s // ctx.step] = XID_CODE
    stalled = xid > 0
    devices: list[Device] = []
    load = np.zeros(n)
    held_any = np.zeros(n, dtype=bool)
    segments = _segments(ctx, gpu)
    for seg in segments:
        whole_day = seg.i0 == 0 and seg.i1 == n
        insts: tuple[MigInstance | None, ...] = (None,) if seg.instances is None else seg.instances
        for inst in insts:
            lane = lanes.get((gpu.gidx, None if inst is None else inst.gi_id))
            if lane is None:  # cordoned node: free
                holders = [np.full(n, -1, dtype=np.int32)]
                busy, mem = np.zeros(n), np.zeros(n)
            else:
                slots = range(len(lane.slot_kinds))
                holders = [ctx.slot_holder[(lane.lid, s)] for s in slots]
                if not whole_day:  # a device of part of the day: nobody holds it outside
                    inside = np.zeros(n, dtype=bool)
                    inside[seg.i0 : seg.i1] = True
                    holders = [np.where(inside, h, -1).astype(np.int32) for h in holders]
                busy = np.clip(sum(ctx.slot_busy[(lane.lid, s)] for s in slots), 0.0, 1.0)
                mem = np.clip(sum(ctx.slot_mem[(lane.lid, s)] for s in slots), 0.0, 0.95)
                held = np.any(np.stack(holders) >= 0, axis=0)
                busy = np.where(held, np.clip(busy * (1.0 + 0.02 * noise[0]), 0.0, 1.0), 0.0)
                mem = np.where(held, mem, 0.0)
                held_any |= held
            busy = np.where(stalled, 0.0, busy)
            weight = inst.compute / 7 if inst is not None else 1.0
            load += busy * weight
            devices.append(Device(seg, inst, holders, busy, mem))
    power = model.idle_w + (model.tdp_w - model.idle_w) * np.clip(load, 0, 1) ** 0.85 + 12.0 * held_any
    power = np.round(np.clip(power + 3.0 * noise[1], model.idle_w * 0.9, model.tdp_w), 3)
    k = max(1, 300 // ctx.step)
    smooth = np.convolve(np.clip(load, 0, 1), np.ones(k) / k, mode="full")[:n]
    temp = np.rint(30.0 + 45.0 * smooth + 0.6 * noise[2])
    energy_inc = np.rint(power * ctx.step * 1000.0).astype(np.int64)
    return GpuDay(power, temp, xid, energy_inc, segments, devices)


# --- energy counters ----------------------------------------------------------------------------
# The only state carried across days: a counter's value at a midnight is the sum of the earlier days'
# increments, computed (and cached) from the same functions, so days can still be produced in any order.


@dataclass(frozen=True)
class _EnergySummary:
    total: np.ndarray  # int64 per gidx: the day's increments
    reset_end: int | None  # the reset GPU's counter at the end of its reset day


_ENERGY_CACHE: dict[tuple[FactorySpec, date], _EnergySummary] = {}
_ENERGY_CACHE_MAX = 4096


def _remember(spec: FactorySpec, day: date, summary: _EnergySummary) -> None:
    if len(_ENERGY_CACHE) >= _ENERGY_CACHE_MAX:
        _ENERGY_CACHE.pop(next(iter(_ENERGY_CACHE)))
    _ENERGY_CACHE[(spec, day)] = summary


def _reset_index(ctx: DayContext) -> int | None:
    rw = ctx.layout.reset
    if rw is None or rw.day != ctx.day:
        return None
    return ctx.idx(ctx.d0 + rw.start_s)


def _summarize(ctx: DayContext, incs: dict[int, np.ndarray]) -> _EnergySummary:
    total = np.zeros(len(ctx.layout.gpus), dtype=np.int64)
    for gidx, inc in incs.items():
        total[gidx] = int(inc.sum())
    reset_end: int | None = None
    ri = _reset_index(ctx)
    if ri is not None and ctx.layout.reset_gpu is not None:
        reset_end = int(incs[ctx.layout.reset_gpu][ri:].sum())
    return _EnergySummary(total, reset_end)


def _energy_summary(spec: FactorySpec, day: date) -> _EnergySummary:
    cached = _ENERGY_CACHE.get((spec, day))
    if cached is not None:
        return cached
    ctx = build_day(spec, day)
    lanes = lane_index(ctx.layout)
    summary = _summarize(ctx, {g.gidx: gpu_day(ctx, g, lanes).energy_inc for g in ctx.layout.gpus})
    _remember(spec, day, summary)
    return summary


def energy_base(spec: FactorySpec, day: date) -> np.ndarray:
    """Every GPU's energy counter (mJ) at midnight starting `day`."""
    layout = factory_layout(spec)
    rng = np.random.default_rng([spec.seed, 0, 5])
    base = rng.integers(200_000_000_000, 3_000_000_000_000, len(layout.gpus), dtype=np.int64)
    d = spec.start
    while d < day:
        summary = _energy_summary(spec, d)
        base = base + summary.total
        if summary.reset_end is not None and layout.reset_gpu is not None:
            base[layout.reset_gpu] = summary.reset_end
        d += timedelta(days=1)
    return base


def energy_counter(ctx: DayContext, gidx: int, energy_inc: np.ndarray, base: np.ndarray) -> np.ndarray:
    """A GPU's energy counter (mJ) at each sample of the day: its value at midnight (`base`, from
    `energy_base`) plus what accumulated before the sample; the reset GPU's restarts from zero."""
    before = np.concatenate(([0], np.cumsum(energy_inc)[:-1]))  # accumulated before each sample
    energy = base[gidx] + before
    ri = _reset_index(ctx)
    if ri is not None and gidx == ctx.layout.reset_gpu:
        energy[ri:] = before[ri:] - before[ri]
    return energy


def record_energy(ctx: DayContext, incs: dict[int, np.ndarray]) -> None:
    """Keep the day's energy increments (per gidx), so that later days need not compute this one again."""
    _remember(ctx.spec, ctx.day, _summarize(ctx, incs))


def clear_caches() -> None:
    """Forget cached layouts and energy summaries (results do not change; tests use it)."""
    _ENERGY_CACHE.clear()
    factory_layout.cache_clear()
