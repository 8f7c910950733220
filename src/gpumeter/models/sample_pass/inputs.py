"""What the sample pass reads besides a range's rows: the day's bounds, its series, its device classes and the
nodes' spans (prices, unschedulable), each as arrays looked up for every sample of a range at once. The session
queries them (gpumeter.models.sample_pass); here they are held."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gpumeter.ingest.schema import (
    DCGM_ENERGY,
    DCGM_FB_USED,
    DCGM_GPU_UTIL,
    DCGM_GR_ENGINE_ACTIVE,
    DCGM_XID,
)

# The metrics a sample reads, in name order (the raw zone's order of rows within a series' sample).
READ_METRICS = tuple(sorted((DCGM_GR_ENGINE_ACTIVE, DCGM_GPU_UTIL, DCGM_FB_USED, DCGM_ENERGY, DCGM_XID)))
GR, UTIL, FB, ENERGY, XID = (
    READ_METRICS.index(m) for m in (DCGM_GR_ENGINE_ACTIVE, DCGM_GPU_UTIL, DCGM_FB_USED, DCGM_ENERGY, DCGM_XID)
)
# R4 (our reading): a row of one of these makes its series observed at its time, whatever its value.
# By metric code (its place in READ_METRICS), looked up per row: cheaper than testing each row against a list.
OBSERVES = np.isin(
    np.arange(len(READ_METRICS)),
    [READ_METRICS.index(m) for m in (DCGM_GR_ENGINE_ACTIVE, DCGM_GPU_UTIL, DCGM_FB_USED, DCGM_ENERGY)],
)
NONE = -1  # a null key
LEAST_NONE = np.iinfo(np.int32).max  # a null skipped by a min


@dataclass(frozen=True)
class Day:
    """The session's variables the pass reads (gpumeter.models.runner sets them)."""

    window_start_ms: int
    day_start_ms: int
    day_end_ms: int
    scrape_s: float

    def holds(self, ts: np.ndarray) -> np.ndarray:
        """R2: whether each time is one of the day's (its start included, its end excluded), not its lookback."""
        return (ts >= self.day_start_ms) & (ts < self.day_end_ms)


@dataclass(frozen=True)
class Rows:
    """A range's judged rows: each row's series place, time, metric (its place in READ_METRICS) and value."""

    place: np.ndarray
    ts: np.ndarray
    metric: np.ndarray
    value: np.ndarray


@dataclass(frozen=True)
class Series:
    """The day's series (stg_dcgm_series) in the order the raw zone stores their rows: by GPU (its UUID), then
    series key. Each array is indexed by a series' place in that order."""

    key: np.ndarray  # uint64
    gpu: np.ndarray
    device: np.ndarray
    node: np.ndarray  # NONE: no node label
    model: np.ndarray
    profile: np.ndarray
    holder: np.ndarray
    instance: np.ndarray  # bool: a MIG instance's series
    has_pod: np.ndarray
    holder_unverified: np.ndarray  # bool: pod labels that could not be told from the scrape target's (R5)
    any_unverified: bool
    vgpu_copy: np.ndarray
    uuid: list[str]  # by GPU key - 1
    whole_device: np.ndarray  # by GPU key: the GPU's device as a whole GPU (NONE: no GPU-level series)
    shows_instances: np.ndarray  # by GPU key: whether the GPU ever shows a MIG instance
    device_keys: int  # above every device key: a (sample, device) pair as one integer key

    @classmethod
    def of(cls, table: pa.Table) -> Series:
        """From the series' rows in GPU and series key order, each key a null's NONE."""
        columns = {name: table[name].to_numpy() for name in table.column_names if name != "uuid"}
        gpu = columns["gpu_key"].astype(np.int32)
        gpus = int(gpu.max()) if gpu.size else 0
        uuid = [""] * gpus
        whole_device = np.full(gpus + 1, NONE, np.int32)
        instance = columns["instance"].astype(bool)
        device = columns["device_key"].astype(np.int32)
        whole_device[gpu[~instance]] = device[~instance]
        shows_instances = np.zeros(gpus + 1, dtype=bool)
        shows_instances[gpu] = columns["gpu_shows_instances"].astype(bool)
        for g, name in zip(gpu.tolist(), table["uuid"].to_pylist(), strict=True):
            uuid[g - 1] = name
        return cls(
            key=columns["series_key"].astype(np.uint64),
            gpu=gpu,
            device=device,
            node=columns["node_key"].astype(np.int32),
            model=columns["model_key"].astype(np.int32),
            profile=columns["profile_key"].astype(np.int32),
            holder=columns["holder_key"].astype(np.int32),
            instance=instance,
            has_pod=columns["has_pod"].astype(bool),
            holder_unverified=columns["holder_unverified"].astype(bool),
            any_unverified=bool(columns["holder_unverified"].any()),
            vgpu_copy=columns["vgpu_copy"].astype(bool),
            uuid=uuid,
            whole_device=whole_device,
            shows_instances=shows_instances,
            device_keys=int(device.max()) + 1 if device.size else 1,
        )


# A whole GPU's class: its weight, the rate card's price units and price per hour, and its own price units
# (None: no such price).
WholeClass = tuple[float, int | None, float | None, int | None]


@dataclass(frozen=True)
class Classes:
    """The device classes by their keys (int_keyed_device_classes): the whole GPU's by model, an instance's by
    model and profile."""

    whole: dict[int, WholeClass]  # by model key
    # An instance's class by [model key, profile key] (keys are ranks from 1: row and column 0 hold no class):
    # its weight and own price units, nan where there is no class or no own price. Looked up for every
    # instance sample of a range at once.
    instance_weight: np.ndarray
    instance_own_units: np.ndarray

    @classmethod
    def of(cls, rows: list[tuple]) -> Classes:
        """From the classes' (model key, profile key, weight, GPU price units, GPU price per hour, device price
        units)."""
        whole: dict[int, WholeClass] = {}
        instance: dict[tuple[int, int], tuple[float, int | None]] = {}
        for model, profile, weight, gpu_units, gpu_price, device_units in rows:
            if profile is None:
                whole[model] = (weight, gpu_units, gpu_price, device_units)
            elif model is not None:
                instance[(model, profile)] = (weight, device_units)
        shape = (max((m for m, _ in instance), default=0) + 1, max((p for _, p in instance), default=0) + 1)
        instance_weight, instance_own_units = np.full(shape, np.nan), np.full(shape, np.nan)
        for (model, profile), (weight, own_units) in instance.items():
            instance_weight[model, profile] = weight
            instance_own_units[model, profile] = np.nan if own_units is None else own_units
        return cls(whole, instance_weight, instance_own_units)

    def instance_class(self, model: np.ndarray, profile: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The weight and own price units of each (model key, profile key) instance (nan: no class, no own
        price); NONE or a key no class has finds no class."""
        rows, columns = self.instance_weight.shape
        at_model, at_profile = model.astype(np.int64), profile.astype(np.int64)
        inside = (at_model > 0) & (at_model < rows) & (at_profile > 0) & (at_profile < columns)
        at_model, at_profile = np.where(inside, at_model, 0), np.where(inside, at_profile, 0)
        return self.instance_weight[at_model, at_profile], self.instance_own_units[at_model, at_profile]


@dataclass(frozen=True)
class NodeSpans:
    """Spans per node key, disjoint per node, found by one search over (node, start)."""

    key: np.ndarray
    node: np.ndarray
    until: np.ndarray
    value: np.ndarray

    SHIFT = np.int64(1) << np.int64(42)  # epoch ms stay below 2^42 until the year 2109

    @classmethod
    def of(cls, table: pa.Table) -> NodeSpans:
        """From the spans' node_key, from_ms, until_ms and value."""
        node = table["node_key"].to_numpy().astype(np.int64)
        start = table["from_ms"].to_numpy().astype(np.int64)
        key = node * cls.SHIFT + start
        order = np.argsort(key, kind="stable")
        value = table["value"].to_numpy(zero_copy_only=False).astype(np.float64)
        return cls(
            key[order], node[order], table["until_ms"].to_numpy().astype(np.int64)[order], value[order]
        )

    def at(self, node: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each (node key, time): whether a span of the node holds it, and that span's value (nan: none)."""
        if self.key.size == 0:
            return np.zeros(ts.size, dtype=bool), np.full(ts.size, np.nan)
        at = np.searchsorted(self.key, node.astype(np.int64) * self.SHIFT + ts, side="right") - 1
        found = at >= 0
        at = np.maximum(at, 0)
        held = found & (node >= 0) & (self.node[at] == node) & (ts < self.until[at])
        return held, np.where(held, self.value[at], np.nan)


@dataclass(frozen=True)
class Inputs:
    """Everything a range is metered with besides its rows."""

    day: Day
    series: Series
    classes: Classes
    prices: NodeSpans  # R8: the nodes' OpenCost GPU prices
    unschedulable: NodeSpans  # R11: when each node is unschedulable
