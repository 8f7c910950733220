"""Comparison (c): the metering rules as a user might write them in plain pandas.

The core rules only: every DCGM sample of a device stands for Δ seconds (R1), a MIG instance weighs its
compute slices / 7 (R3), holders sharing a device at a sample split it equally (R6), a GPU-hour is priced by
GPU model (R8), the tenant is the namespace. No kube-state-metrics join (R4, R5), no label rules (R7), no
idle or stranded accounting (R9-R11): gpumeter does strictly more work than this, which the ratio c/a
has to be read with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from gpumeter.ingest.schema import DCGM_GR_ENGINE_ACTIVE

COLUMNS = ["ts_ms", "metric", "uuid", "gpu_i_id", "gpu_i_profile", "model_name", "namespace", "pod"]


def cost_by_namespace(
    dcgm_files: Sequence[Path],
    day_start_ms: int,
    day_end_ms: int,
    scrape_s: float,
    price_per_gpu_hour: Mapping[str, float],
) -> pd.DataFrame:
    """GPU-seconds and cost per namespace of one day (columns namespace, gpu_seconds, cost)."""
    samples = pd.concat([pd.read_parquet(path, columns=COLUMNS) for path in dcgm_files], ignore_index=True)
    samples = samples[
        (samples.metric == DCGM_GR_ENGINE_ACTIVE)
        & (samples.ts_ms >= day_start_ms)
        & (samples.ts_ms < day_end_ms)
    ].copy()
    slices = samples.gpu_i_profile.str.extract(r"^(\d+)g", expand=False).astype(float).fillna(7.0)
    samples["weight"] = slices / 7.0
    samples["device"] = samples.uuid + "/" + samples.gpu_i_id.fillna("")
    # R6: the holders seen on a device at one timestamp share it equally.
    samples["holders"] = samples.groupby(["device", "ts_ms"]).pod.transform("count")
    held = samples[samples.pod.notna()].copy()
    held["gpu_seconds"] = scrape_s * held.weight / held.holders
    held["cost"] = held.gpu_seconds / 3600.0 * held.model_name.map(price_per_gpu_hour)
    return held.groupby("namespace", as_index=False)[["gpu_seconds", "cost"]].sum()
