"""Scale-out, local form (docs/deploy.md): day partitions are independent, so Dagster runs several at once.

Two partitions of the meter_day job run at the same time, each as its own run in its own process with the
multiprocess executor (each step a subprocess), against one persistent Dagster instance: the local shape of
K8sRunLauncher + k8s_job_executor. Their marts must be the bytes that metering the same days one after the
other, in process, writes (R15: a day's result depends on the day only).
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from dagster import DagsterInstance, JobDefinition, build_reconstructable_job, execute_job

from metering import simulator
from metering.cli import write_demo_config
from metering.config import load_config
from metering.warehouse import MARTS, Warehouse
from pipelines.definitions import METER_DAY_JOB, build_definitions
from pipelines.launch import meter_days

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SPEC = simulator.fleet_spec(8, cluster="demo", days=2)
DAYS = SPEC.day_list


def meter_day_job() -> JobDefinition:
    """The job as a code location would load it (reconstructable: the run and step processes import it)."""
    return build_definitions(os.environ["GPUMETER_CONFIG"]).resolve_job_def(METER_DAY_JOB)


def _run_partition(instance_dir: str, partition: str) -> tuple[str, bool, str]:
    with DagsterInstance.from_ref(DagsterInstance.local_temp(instance_dir).get_ref()) as instance:
        result = execute_job(
            # Named by module path, as a code location names it: the step processes import it.
            build_reconstructable_job(
                "tests.test_scale_out", "meter_day_job", reconstructor_working_directory=str(ROOT)
            ),
            instance=instance,
            tags={"dagster/partition": partition},  # what a backfill puts on each partition's run
            run_config={
                "execution": {"config": {"multiprocess": {"max_concurrent": 2}}},
                "loggers": {"console": {"config": {"log_level": "ERROR"}}},
            },
        )
        run = instance.get_run_by_id(result.run_id)
        executor = run.run_config["execution"] if run else {}
        errors = [
            str(event.event_specific_data.error.to_string())  # type: ignore[union-attr]
            for event in result.all_events
            if event.is_failure and getattr(event.event_specific_data, "error", None) is not None
        ]
        return partition, result.success, f"{executor} {errors}"


def _marts(config_path: Path) -> dict[str, str]:
    root = Warehouse.at(load_config(config_path).warehouse.path).root / MARTS
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.glob("*/cluster=*/day=*/data.parquet"))
    }


@pytest.fixture(scope="module")
def fleet_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One small fleet's raw source (two days)."""
    base = tmp_path_factory.mktemp("scale_out")
    simulator.write_parquet(SPEC, base / "source")
    return base


def _copy(base: Path, name: str) -> Path:
    """A config over a copy of the fleet's source, with its own warehouse."""
    shutil.copytree(base / "source", base / name / "source")
    return write_demo_config(base / name)


@pytest.fixture(scope="module")
def sequential_marts(fleet_base: Path) -> dict[str, str]:
    """The marts of the days metered one after the other, in process (the CLI's path)."""
    config_path = _copy(fleet_base, "sequential")
    meter_days(str(config_path), DAYS)
    return _marts(config_path)


def test_day_partitions_run_concurrently_with_the_multiprocess_executor(
    fleet_base: Path, sequential_marts: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parallel = _copy(fleet_base, "parallel")
    monkeypatch.setenv("GPUMETER_CONFIG", str(parallel))
    instance_dir = tmp_path / "dagster_home"
    instance_dir.mkdir()
    # Create the instance's storage once, before the runs share it (as the Helm chart's Postgres is).
    DagsterInstance.local_temp(str(instance_dir)).dispose()
    partitions = [d.isoformat() for d in DAYS]
    # spawn: each run starts from a clean interpreter, as a run pod would.
    with ProcessPoolExecutor(len(partitions), mp_context=multiprocessing.get_context("spawn")) as pool:
        outcomes = list(pool.map(_run_partition, [str(instance_dir)] * len(partitions), partitions))
    assert [(p, ok) for p, ok, _ in outcomes] == [(p, True) for p in partitions], outcomes
    assert all("multiprocess" in executor for _, _, executor in outcomes)
    assert len(sequential_marts) >= 6 * len(DAYS)  # every mart of every day
    assert _marts(parallel) == sequential_marts


def test_a_day_metered_alone_equals_the_same_day_after_its_predecessor(
    fleet_base: Path, sequential_marts: dict[str, str]
) -> None:
    """No state carries from one partition to the next (R15): the second day metered alone (its source
    still holds the first day, for the lookback) writes the marts it writes after the first."""
    alone = _copy(fleet_base, "alone")
    meter_days(str(alone), [DAYS[1]])
    second = {k: v for k, v in sequential_marts.items() if f"day={DAYS[1].isoformat()}" in k}
    assert second
    assert _marts(alone) == second
