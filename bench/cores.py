"""How the meter, the one-pass design and (b′) scale from one core to two: each step in its own process, pinned
to the cores as `taskset` would pin it, the core counts alternated; wall from the step's own report, CPU from
wait4.

    .venv/bin/python -m bench.cores --work /var/tmp/gbk3/fleet-10000 --gpus 10000 --rounds 2
    .venv/bin/python -m bench.cores --work /var/tmp/gbk3/fleet-10000 --gpus 10000 --rounds 3 --cores 2

`--work` is a bench workspace with the day sorted by GPU and the pass's inputs (`bench.streaming_floor sort`,
`inputs`) and the two tables written for the later models (`bench.streaming_floor downstream --stored setup`,
and again with `--bucket-s`, compressed).
Reported per round: a/b′ on one core and on two, for the meter, for the one-pass design built either way, for
the floor of a pass carried on to the mart grain (the pass summing each file's samples per device, holder
and hour, nothing per sample stored, plus the models no DCGM row reaches; without the billing rules such a
pass would still have to apply), and for the floor of the compressed-samples design (the pass compressing each
file's samples per device, time bucket and key, and the SQL models over the compressed rows); over the rounds,
each step's speedup from one core to two (with `--cores 1,2`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def _run(cores: int, cmd: list[str], result: Path | None = None) -> dict[str, Any]:
    """One step in a child process pinned to the first `cores` CPUs this process may use: its own report
    (stdout JSON, or the `result` file), plus the CPU seconds of the whole child."""
    cpus = sorted(os.sched_getaffinity(0))[:cores]
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{REPO}"}
    process = subprocess.Popen(
        [sys.executable, "-m", *cmd],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        preexec_fn=lambda: os.sched_setaffinity(0, cpus),  # safe: this process runs no threads
    )
    out = process.stdout.read() if process.stdout else b""
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"bench step failed on {cores} core(s): python -m {' '.join(cmd)}")
    report = json.loads(result.read_text(encoding="utf-8") if result else out)
    report["process_cpu_s"] = usage.ru_utime + usage.ru_stime
    return report


def one_round(work: Path, gpus: int, cores: int, bucket_s: int = 900) -> dict[str, float]:
    """On `cores` cores: (b′); the pass with its tables stored in DuckDB, and then as Parquet; the later
    models over those tables loaded into DuckDB (the load is reported apart: the pass's insert stands for it),
    and then over the Parquet files as views; the pass summed to the mart grain, and the models no DCGM row
    reaches; the pass compressing each file's samples per `bucket_s`, and the later models over the two
    tables so compressed; and (a)."""
    fleet = ["bench.fleet", "step"]
    common = ["--work", str(work), "--gpus", str(gpus)]
    result = work / ".cores-step.json"
    floor = _run(cores, [*fleet, "sample_floor", *common, "--result", str(result)], result)
    passes = ["bench.streaming_floor", "pass", "--work", str(work), "--threads", str(cores), "--store"]
    later = ["bench.streaming_floor", "downstream", "--work", str(work), "--stored"]
    pass_duckdb = _run(cores, [*passes, "duckdb"])
    pass_parquet = _run(cores, [*passes, "parquet"])
    later_tables = _run(cores, [*later, "duckdb"])
    later_views = _run(cores, [*later, "parquet"])
    pass_hourly = _run(cores, [*passes, "hourly"])
    no_dcgm = _run(cores, ["bench.streaming_floor", "rest", "--work", str(work)])
    bucket = ["--bucket-s", str(bucket_s)]
    pass_compressed = _run(cores, [*passes, "compressed", *bucket])
    later_compressed = _run(cores, [*later, "duckdb", *bucket])
    meter = _run(cores, [*fleet, "meter", *common, "--result", str(result)], result)
    return {
        "b_prime_s": floor["wall_s"],
        "b_prime_cpu_s": floor["process_cpu_s"],
        "pass_duckdb_s": pass_duckdb["wall_s"],
        "pass_duckdb_cpu_s": pass_duckdb["cpu_s"],
        "pass_parquet_s": pass_parquet["wall_s"],
        "pass_parquet_cpu_s": pass_parquet["cpu_s"],
        "pass_peak_rss_mib": max(pass_duckdb["peak_rss_mib"], pass_parquet["peak_rss_mib"]),
        "later_over_tables_s": later_tables["other_models_s"],
        "tables_loaded_s": sum(later_tables["pass_tables_s"].values()),
        "later_over_views_s": later_views["other_models_s"],
        "pass_hourly_s": pass_hourly["wall_s"],
        "pass_hourly_peak_rss_mib": pass_hourly["peak_rss_mib"],
        "no_dcgm_models_s": no_dcgm["wall_s"],
        "pass_compressed_s": pass_compressed["wall_s"],
        "pass_compressed_peak_rss_mib": pass_compressed["peak_rss_mib"],
        "later_over_compressed_s": later_compressed["other_models_s"],
        "meter_s": meter["wall_s"],
        "meter_cpu_s": meter["process_cpu_s"],
    }


# The two ways to build the design (bench/README, "The one-pass floor made complete"): the pass's tables
# inserted into DuckDB and the later models over them, or written as Parquet and read as views. The floor
# of the pass carried on to the mart grain: its sums, and the models no DCGM row reaches (without the rules).
# And the floor of the compressed-samples design: the pass compressing each file's samples, and every later
# model (those no DCGM row reaches among them) over the compressed rows, the billing rules still in SQL.
DESIGNS = {
    "design_duckdb": ("pass_duckdb_s", "later_over_tables_s"),
    "design_parquet": ("pass_parquet_s", "later_over_views_s"),
    "floor_mart_grain": ("pass_hourly_s", "no_dcgm_models_s"),
    "floor_compressed": ("pass_compressed_s", "later_over_compressed_s"),
}


def ratios(measured: dict[str, float]) -> dict[str, float]:
    """a/b′ of one round on one core count: the meter's, and each design's (the sum of its steps, DESIGNS)."""
    floor = measured["b_prime_s"]
    got = {"meter": round(measured["meter_s"] / floor, 2)}
    for name, steps in DESIGNS.items():
        got[name] = round(sum(measured[step] for step in steps) / floor, 2)
    return got


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per round and core count, a/b′; over the rounds, each step's mean seconds and, where the rounds ran on
    one core and on two, its speedup from one to two. No projection to more cores: with two points, a step that
    scales by more than two (as (b′) can, its one-core run holding two DuckDB threads on one core) fits a
    negative serial share."""
    counts = list(rounds[0])
    mean: dict[str, dict[str, float]] = {}
    for cores in counts:
        runs = [r[cores] for r in rounds]
        mean[cores] = {k: round(sum(r[k] for r in runs) / len(runs), 2) for k in runs[0]}
    report = {
        "a_over_b_prime": [{cores: ratios(r[cores]) for cores in counts} for r in rounds],
        "mean_s": mean,
    }
    if {"1", "2"} <= set(counts):
        timed = [k for k in mean["1"] if k.endswith("_s") and not k.endswith("_cpu_s")]
        report["speedup_1_to_2"] = {k: round(mean["1"][k] / mean["2"][k], 2) for k in timed}
    return report


def kube_rows_not_spans(work: Path) -> list[Path]:
    """The workspace's raw kube files still stored as rows: the pull stores spans, so a meter over rows would time
    the conversion the ingest makes (`bench.fleet step kube_spans`) as (a)'s and the later models'."""
    import pyarrow.parquet as pq

    from gpumeter.ingest.kube_spans import is_spans

    files = sorted((work / "warehouse" / "raw" / "raw_kube_samples").glob("cluster=*/day=*/*.parquet"))
    return [f for f in files if not is_spans(pq.read_schema(f))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cores", description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write the rounds and their summary here as JSON")
    parser.add_argument(
        "--cores", choices=("1,2", "1", "2"), default="1,2", help="the core counts to run each round on"
    )
    parser.add_argument(
        "--bucket-s",
        type=int,
        default=900,
        help="the compressed-samples design's time bucket (its later models need `bench.streaming_floor "
        "downstream --stored setup --bucket-s` run once with it)",
    )
    args = parser.parse_args(argv)
    counts = tuple(int(c) for c in args.cores.split(","))
    if rows := kube_rows_not_spans(args.work):
        raise SystemExit(
            f"{rows[0]}: kube-state-metrics rows not stored as spans, as the pull stores them; run "
            f"`python -m bench.fleet step kube_spans --work {args.work} --gpus {args.gpus} --result <file>` first"
        )
    if len(os.sched_getaffinity(0)) < max(counts):
        raise SystemExit(f"bench.cores --cores {args.cores} needs {max(counts)} CPUs this process may use")
    rounds: list[dict[str, Any]] = []
    for number in range(args.rounds):
        # Alternated: round 1 runs two cores first, round 2 one core first.
        order = counts[::-1] if number % 2 == 0 else counts
        measured: dict[str, Any] = {}
        for cores in order:
            measured[str(cores)] = one_round(args.work, args.gpus, cores, args.bucket_s)
            print(json.dumps({"round": number + 1, "cores": cores, **measured[str(cores)]}), flush=True)
        rounds.append(measured)
    report = {"fleet_gpus": args.gpus, "rounds": rounds, **summarize(rounds)}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
