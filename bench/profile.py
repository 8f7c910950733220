"""Where one metering run spends its time: wall time per model and, per SQL model, DuckDB's query profile
(the EXPLAIN ANALYZE tree as JSON), summed per operator.

    .venv/bin/python -m bench.profile --work /var/tmp/gpumeter-bench/fleet-1000 [--top 8]

`--work` is a bench workspace (bench/fleet.py writes one per fleet): its config and its raw zone.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa

from gpumeter.config import load_config
from gpumeter.models.partition import read_raw_day
from gpumeter.models.project import Model
from gpumeter.models.runner import meter_day
from gpumeter.storage.warehouse import Warehouse
from gpumeter_sim import FactorySpec


def _operators(node: dict[str, Any], into: Counter[str]) -> None:
    """Self time per operator type over a DuckDB JSON profile tree (keys differ across DuckDB versions)."""
    name = node.get("operator_type") or node.get("type") or node.get("operator_name") or node.get("name")
    timing = node.get("operator_timing", node.get("timing"))
    if name and timing is not None:
        into[str(name).strip()] += float(timing)
    for child in [*node.get("children", []), *node.get("operator", [])]:
        _operators(child, into)


def model_timer() -> tuple[dict[str, float], Callable[[Model], None]]:
    """{model: wall seconds}, filled by the returned `on_model` callback of meter_day: each model's time since
    the previous one ended (the first: since this call)."""
    seconds: dict[str, float] = {}
    last = [time.perf_counter()]

    def on_model(model: Model) -> None:
        now = time.perf_counter()
        seconds[model.name] = now - last[0]
        last[0] = now

    return seconds, on_model


def meter_workspace_day(
    work: Path, day: date, scratch: str | None = None, **options: Any
) -> dict[str, pa.Table]:
    """meter_day over a bench workspace's day (its config's first cluster, its raw zone), with meter_day's
    `options`; with `scratch`, the models are tables of a DuckDB file in the warehouse's scratch folder of
    that name (as the pipeline runs them), else of an in-memory database."""
    config = load_config(work / "config.yaml")
    warehouse = Warehouse.of(config.warehouse)
    cluster = config.clusters[0].name
    temp_directory = warehouse.scratch_dir(scratch) if scratch else None
    raw = read_raw_day(warehouse, cluster, day)
    return meter_day(raw, config, cluster, day, temp_directory=temp_directory, **options)


def profile(work: Path, day: date | None, top: int) -> str:
    cluster = load_config(work / "config.yaml").clusters[0].name
    day = day or FactorySpec().start  # the simulator's first day, which bench/fleet.py meters
    seconds, on_model = model_timer()
    profiles = work / "profile" / day.isoformat()
    started = time.perf_counter()
    meter_workspace_day(work, day, "profile", on_model=on_model, keep_layers=("marts",), profile_dir=profiles)
    total = time.perf_counter() - started
    lines = [
        f"{cluster} {day}: {total:.1f} s in all",
        "",
        "| model | s | share | peak buffer MiB | spilled MiB | top operators (s) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, secs in sorted(seconds.items(), key=lambda kv: -kv[1])[:top]:
        ops: Counter[str] = Counter()
        path = profiles / f"{name}.json"
        system: dict[str, Any] = {}
        if path.exists():
            tree = json.loads(path.read_text(encoding="utf-8"))
            system = tree.get("system", {})
            _operators(tree, ops)
        detail = ", ".join(f"{op} {t:.1f}" for op, t in ops.most_common(3))
        peak = system.get("peak_buffer_memory", 0) / 2**20
        spilled = system.get("total_bytes_spilled", 0) / 2**20
        lines.append(
            f"| {name} | {secs:.1f} | {secs / total:.0%} | {peak:,.0f} | {spilled:,.0f} | {detail} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--day")
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args(argv)
    print(profile(Path(args.work), date.fromisoformat(args.day) if args.day else None, args.top), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
