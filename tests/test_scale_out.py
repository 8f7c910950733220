"""Scale-out, local form (docs/deploy.md): (cluster, day) partitions are independent, so Dagster runs many at
once.

A multi-partition backfill of the meter_day job over 2 clusters x 2 days: each of the 4 partitions is its own
run, in its own process, with the multiprocess executor (each step a subprocess), all at the same time,
against one persistent Dagster instance: the local shape of K8sRunLauncher + k8s_job_executor. Their marts
must be the bytes that metering the same partitions one after the other, in process, writes (R15: a
partition's result depends on the partition only). And the per-(cluster, day) lock lets two clusters of one
day run at once while it serializes two runs of the same (cluster, day).
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import shutil
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import date
from pathlib import Path

import pytest
from dagster import (
    AssetKey,
    DagsterInstance,
    DagsterRunStatus,
    JobDefinition,
    RunsFilter,
    build_reconstructable_job,
    execute_job,
)

import gpumeter_sim as simulator
from gpumeter.cli.demo import write_demo_config
from gpumeter.config import load_config
from gpumeter.pipelines.definitions import METER_DAY_JOB, build_definitions
from gpumeter.pipelines.launch import RunFailed, meter_days
from gpumeter.pipelines.partitions import cluster_day_key
from gpumeter.storage.files import WarehouseError
from gpumeter.storage.locks import LOCK_TIMEOUT_ENV
from gpumeter.storage.paths import MARTS
from gpumeter.storage.warehouse import Warehouse
from tests.builders import edit_config

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
CLUSTERS = ("demo", "east")
SPECS = [simulator.fleet_spec(8, cluster=cluster, days=2) for cluster in CLUSTERS]
DAYS = SPECS[0].day_list
PARTITIONS = [cluster_day_key(cluster, day) for day in DAYS for cluster in CLUSTERS]


def meter_day_job() -> JobDefinition:
    """The job as a code location would load it (reconstructable: the run and step processes import it)."""
    return build_definitions(os.environ["GPUMETER_CONFIG"]).resolve_job_def(METER_DAY_JOB)


def _run_partition(instance_dir: str, partition: str) -> tuple[str, bool, str]:
    with DagsterInstance.from_ref(DagsterInstance.local_temp(instance_dir).get_ref()) as instance:
        job = meter_day_job()
        assert job.partitions_def is not None
        result = execute_job(
            # Named by module path, as a code location names it: the step processes import it.
            build_reconstructable_job(
                "tests.test_scale_out", "meter_day_job", reconstructor_working_directory=str(ROOT)
            ),
            instance=instance,
            # What a backfill puts on each partition's run: the key and one tag per dimension.
            tags=dict(job.partitions_def.get_tags_for_partition_key(partition)),
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
    """Two small fleets' raw sources (two days each), side by side in one parquet source."""
    base = tmp_path_factory.mktemp("scale_out")
    for spec in SPECS:
        simulator.write_parquet(spec, base / "source")
    return base


def _copy(base: Path, name: str) -> Path:
    """A two-cluster config over a copy of the fleets' source, with its own warehouse."""
    shutil.copytree(base / "source", base / name / "source")
    east = {"name": "east", "source": {"kind": "parquet", "path": str(base / name / "source")}}
    path = edit_config(write_demo_config(base / name), lambda doc: doc["clusters"].insert(0, east))
    assert sorted(c.name for c in load_config(path).clusters) == sorted(CLUSTERS)
    return path


@pytest.fixture(scope="module")
def sequential_marts(fleet_base: Path) -> dict[str, str]:
    """The marts of the partitions metered one after the other, in process (the CLI's path)."""
    config_path = _copy(fleet_base, "sequential")
    outcomes = meter_days(str(config_path), DAYS)
    assert sorted(o.partition for o in outcomes) == sorted(PARTITIONS)
    return _marts(config_path)


def test_a_cluster_day_backfill_runs_concurrently_with_the_multiprocess_executor(
    fleet_base: Path, sequential_marts: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parallel = _copy(fleet_base, "parallel")
    monkeypatch.setenv("GPUMETER_CONFIG", str(parallel))
    instance_dir = tmp_path / "dagster_home"
    instance_dir.mkdir()
    # Create the instance's storage once, before the runs share it (as the Helm chart's Postgres is).
    DagsterInstance.local_temp(str(instance_dir)).dispose()
    assert len(PARTITIONS) == 4  # 2 clusters x 2 days
    # spawn: each run starts from a clean interpreter, as a run pod would.
    with ProcessPoolExecutor(len(PARTITIONS), mp_context=multiprocessing.get_context("spawn")) as pool:
        outcomes = list(pool.map(_run_partition, [str(instance_dir)] * len(PARTITIONS), PARTITIONS))
    assert [(p, ok) for p, ok, _ in outcomes] == [(p, True) for p in PARTITIONS], outcomes
    assert all("multiprocess" in executor for _, _, executor in outcomes)

    with DagsterInstance.from_ref(DagsterInstance.local_temp(str(instance_dir)).get_ref()) as instance:
        records = instance.get_run_records(RunsFilter(job_name=METER_DAY_JOB))
        assert sorted(r.dagster_run.tags["dagster/partition"] for r in records) == sorted(PARTITIONS)
        assert {r.dagster_run.status for r in records} == {DagsterRunStatus.SUCCESS}
        # Concurrent, not one after the other: some two runs were in flight at the same time.
        spans = sorted((r.start_time, r.end_time) for r in records)
        assert all(start is not None and end is not None for start, end in spans)
        assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:], strict=False)), spans
        materialized = instance.get_materialized_partitions(AssetKey("mart_tenant_daily_cost"))
        assert materialized == set(PARTITIONS)

    assert len(sequential_marts) >= 6 * len(PARTITIONS)  # every mart of every (cluster, day)
    assert {k.split("/")[1] for k in sequential_marts} == {f"cluster={c}" for c in CLUSTERS}
    assert _marts(parallel) == sequential_marts  # R15


def test_a_partition_metered_alone_equals_the_same_partition_in_the_backfill(
    fleet_base: Path, sequential_marts: dict[str, str]
) -> None:
    """No state carries from one partition to the next (R15): the second day of one cluster metered alone
    (its source still holds the first day, for the lookback) writes the marts it writes in the full run."""
    alone = _copy(fleet_base, "alone")
    outcomes = meter_days(str(alone), [DAYS[1]], clusters=["east"])
    assert [(o.cluster, o.day) for o in outcomes] == [("east", DAYS[1])]
    second = {k: v for k, v in sequential_marts.items() if f"cluster=east/day={DAYS[1].isoformat()}" in k}
    assert second
    assert _marts(alone) == second


def test_a_locked_cluster_day_blocks_its_own_runs_only(
    fleet_base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R15 with the real job: while (demo, day) is held, a run of east's same day goes ahead; a run of
    (demo, day) itself waits, here not at all (timeout 0), and fails naming the cluster and day."""
    config_path = _copy(fleet_base, "locked")
    warehouse = Warehouse.at(load_config(config_path).warehouse.path)
    monkeypatch.setenv(LOCK_TIMEOUT_ENV, "0")
    with warehouse.day_lock(DAYS[0], cluster="demo"):
        assert [o.cluster for o in meter_days(str(config_path), [DAYS[0]], clusters=["east"])] == ["east"]
        with pytest.raises(
            RunFailed, match=rf"cluster demo day {DAYS[0]}.*is being written by pid {os.getpid()}"
        ):
            meter_days(str(config_path), [DAYS[0]], clusters=["demo"])
    marts = _marts(config_path)
    assert marts and all("cluster=east/" in k for k in marts)  # the refused run wrote nothing


def test_runs_of_one_cluster_day_serialize_and_other_clusters_do_not_wait(tmp_path: Path) -> None:
    """R15: the lock is per (cluster, day). flock locks belong to an open file, so threads that open the
    lock file each stand for a separate run here."""
    warehouse = Warehouse.at(tmp_path / "warehouse")
    day = date(2026, 11, 1)
    acquired: dict[str, float] = {}

    def run(cluster: str, name: str, timeout_s: float) -> None:
        with warehouse.day_lock(day, cluster=cluster, timeout_s=timeout_s):
            acquired[name] = time.monotonic()

    with warehouse.day_lock(day, cluster="demo"):
        same = threading.Thread(target=run, args=("demo", "same", 30.0))
        other = threading.Thread(target=run, args=("east", "other", 0.0))
        same.start()
        other.start()
        other.join(timeout=30)
        time.sleep(0.5)  # the second run of (demo, day) is still waiting
        assert "other" in acquired and "same" not in acquired
        released = time.monotonic()
    same.join(timeout=30)
    assert acquired["same"] >= released  # it went ahead only once the first run let go
    assert acquired["other"] < released
    # Another day of the same cluster is another partition, with its own lock.
    with (
        warehouse.day_lock(day, cluster="demo"),
        warehouse.day_lock(date(2026, 11, 2), cluster="demo", timeout_s=0),
    ):
        pass
    with (
        warehouse.day_lock(day, cluster="demo"),
        pytest.raises(WarehouseError, match="cluster demo day 2026-11-01 is being written"),
        warehouse.day_lock(day, cluster="demo", timeout_s=0),
    ):
        pass
    assert sorted(p.relative_to(warehouse.root).as_posix() for p in warehouse.root.rglob("*.lock")) == [
        ".locks/cluster=demo/day=2026-11-01.lock",
        ".locks/cluster=demo/day=2026-11-02.lock",
        ".locks/cluster=east/day=2026-11-01.lock",
    ]
