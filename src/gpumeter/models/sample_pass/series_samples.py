"""R1: a range's judged rows as one sample per series and time (tests/reference_sql/stg_dcgm_samples.sql): the
pivot of one scrape's metrics per series."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpumeter.ingest.row_order import combined_key, lexicographic_order
from gpumeter.models.sample_pass.inputs import (
    ENERGY,
    FB,
    GR,
    NONE,
    OBSERVES,
    READ_METRICS,
    UTIL,
    XID,
    Day,
    Rows,
    Series,
)
from gpumeter.models.sample_pass.runs import run_of_row, starts
from gpumeter.models.sample_pass.tables import Columns


def rows_order(gpu: np.ndarray, ts: np.ndarray, place: np.ndarray, metric: np.ndarray) -> np.ndarray | None:
    """The order that puts a range's rows in the raw zone's order (GPU, time, series, metric), or None where
    each GPU's rows already lie together in that order, whatever the order of the GPUs: the pass reads each
    GPU's rows as a run of neighbours, never two GPUs in turn. A range set apart from several stored parts
    (each in GPU order, a node group's GPUs in one) is such runs, so it is checked, not sorted."""
    boundary = gpu[1:] != gpu[:-1]
    run_starts = np.flatnonzero(boundary) + 1
    if np.unique(gpu[np.r_[0, run_starts]]).size == run_starts.size + 1:  # no GPU in two runs
        # In order inside each run: (time, series, metric) never goes down but where a run starts.
        within = combined_key([ts - ts.min(), place - place.min(), metric.astype(np.int64)])
        if within is not None and np.all(boundary | (within[1:] >= within[:-1])):
            return None
    return lexicographic_order([gpu - gpu.min(), ts - ts.min(), place - place.min(), metric.astype(np.int64)])


@dataclass(frozen=True)
class SeriesSamples:
    """One sample per series and time, in the rows' order (GPU, time, series): each array indexed by sample.
    The metrics' values are nan where the sample has no reading of them."""

    place: np.ndarray  # the series' place (Series)
    ts: np.ndarray
    gpu: np.ndarray
    node: np.ndarray  # the series' node (NONE: no node label)
    in_day: np.ndarray  # R2: a sample of the day, not of its lookback
    observed: np.ndarray  # R4: a metric read that makes the series observed then
    instance: np.ndarray  # R3: a MIG instance's series
    holder: np.ndarray  # R5: the pod the series names, where observed (NONE: none)
    copied: np.ndarray  # R1: a metric read more than once
    gr: np.ndarray
    util: np.ndarray
    fb: np.ndarray
    energy: np.ndarray
    xid: np.ndarray


def series_samples(rows: Rows, gpu: np.ndarray, series: Series, day: Day) -> SeriesSamples:
    """R1: one sample per series and time, its metrics' values (a metric read twice: the largest), whether the
    series is observed then (R4) and whether a metric was read more than once (rows in raw zone order; `gpu`:
    each row's GPU)."""
    place, ts, metric, value = rows.place, rows.ts, rows.metric, rows.value
    seg_start = starts(place, ts)
    samples = seg_start.size
    seg = run_of_row(seg_start, ts.size)
    cell = seg * len(READ_METRICS) + metric
    pivot = np.full(samples * len(READ_METRICS), np.nan)
    last = np.r_[cell[1:] != cell[:-1], True]  # copies of one reading are neighbours: each cell set once
    if last.all():  # no reading copied (nearly every range)
        pivot[cell] = value
        copied = np.zeros(samples, dtype=bool)
    else:
        pivot[cell[last]] = value[last]
        np.fmax.at(pivot, cell[~last], value[~last])
        read_values = np.bincount(seg[~np.isnan(value)], minlength=samples)
        copied = read_values > (~np.isnan(pivot)).reshape(samples, len(READ_METRICS)).sum(axis=1)
    pivot = pivot.reshape(samples, len(READ_METRICS))
    observed = np.logical_or.reduceat(OBSERVES[metric], seg_start)
    sample_place, sample_ts = place[seg_start], ts[seg_start]
    return SeriesSamples(
        place=sample_place,
        ts=sample_ts,
        gpu=gpu[seg_start],
        node=series.node[sample_place],
        in_day=day.holds(sample_ts),
        observed=observed,
        instance=series.instance[sample_place],
        holder=np.where(observed, series.holder[sample_place], NONE),
        copied=copied,
        gr=pivot[:, GR],
        util=pivot[:, UTIL],
        fb=pivot[:, FB],
        energy=pivot[:, ENERGY],
        xid=pivot[:, XID],
    )


def copied_samples(samples: SeriesSamples, series: Series) -> Columns | None:
    """R1: the series samples with a reading copied (int_dcgm_copied_samples), None where there is none."""
    if not samples.copied.any():
        return None
    return {"series_key": series.key[samples.place[samples.copied]], "ts_ms": samples.ts[samples.copied]}
