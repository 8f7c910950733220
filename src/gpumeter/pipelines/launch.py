"""Run the Dagster jobs in-process: what `gpumeter run`, `demo` and `invoices` call, so that the CLI runs
exactly the job the schedule runs (one code path): one meter_day run per (cluster, day) partition."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import Any

from dagster import DagsterInstance, ExecuteInProcessResult

from gpumeter.config import load_config, select_clusters
from gpumeter.pipelines.definitions import INVOICE_MONTH_JOB, METER_DAY_JOB, build_definitions
from gpumeter.pipelines.partitions import cluster_day_key


class RunFailed(RuntimeError):
    """A Dagster run of a gpumeter job failed; the message is the domain error that stopped it."""


# Dagster's per-event console logging would drown the progress bar; failures are reported by us.
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


@dataclass(frozen=True)
class CheckOutcome:
    """One asset check evaluated by a run, with its metadata as plain values."""

    passed: bool
    severity: str  # ERROR | WARN
    metadata: dict[str, Any]


@dataclass(frozen=True)
class RunOutcome:
    """What a run of a gpumeter job reports: its checks and what its assets recorded, so that a caller renders
    what the pipeline computed instead of computing it again."""

    partition: str  # the partition key: `<cluster>|<YYYY-MM-DD>` for meter_day, `<YYYY-MM>-01` for a month
    run_id: str
    checks: dict[str, CheckOutcome] = field(default_factory=dict)
    materialized: dict[str, dict[str, Any]] = field(default_factory=dict)  # asset name -> its metadata
    cluster: str | None = None  # set for a meter_day run
    day: date | None = None

    @property
    def failed_checks(self) -> list[str]:
        return [f"{name} ({check.severity})" for name, check in self.checks.items() if not check.passed]


def _instance() -> DagsterInstance:
    # With DAGSTER_HOME set the runs are recorded where `dagster dev` shows them; else nothing is kept.
    return DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else DagsterInstance.ephemeral()


def _failure(result: ExecuteInProcessResult) -> str:
    for event in result.all_events:
        if event.is_failure and event.event_specific_data is not None:
            error = getattr(event.event_specific_data, "error", None)
            if error is not None:
                # The domain error's own message is the useful line; Dagster wraps it.
                cause = error.cause or error
                return cause.message.strip().splitlines()[-1] if cause.message else str(cause)
    return "the run failed; see the Dagster event log"


def _plain(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Dagster metadata values as the plain values they hold (a MetadataValue keeps it in `.value`)."""
    return {key: getattr(value, "value", value) for key, value in metadata.items()}


def _checks(result: ExecuteInProcessResult) -> dict[str, CheckOutcome]:
    return {
        evaluation.check_name: CheckOutcome(
            evaluation.passed, evaluation.severity.value, _plain(evaluation.metadata)
        )
        for evaluation in result.get_asset_check_evaluations()
    }


def _materialized(result: ExecuteInProcessResult) -> dict[str, dict[str, Any]]:
    found = {}
    for event in result.get_asset_materialization_events():
        materialization = event.step_materialization_data.materialization
        if materialization is not None:
            found[materialization.asset_key.to_user_string()] = _plain(materialization.metadata)
    return found


def _execute(
    config_path: str, job_name: str, partition: str, instance: DagsterInstance, label: str | None = None
) -> RunOutcome:
    job = build_definitions(config_path).resolve_job_def(job_name)
    result = job.execute_in_process(
        partition_key=partition, instance=instance, run_config=QUIET, raise_on_error=False
    )
    if not result.success:
        raise RunFailed(f"{job_name} {label or partition}: {_failure(result)}")
    return RunOutcome(partition, result.run_id, _checks(result), _materialized(result))


def meter_days(
    config_path: str,
    days: Iterable[date],
    on_day: Callable[[RunOutcome], None] | None = None,
    clusters: Sequence[str] | None = None,
) -> list[RunOutcome]:
    """One meter_day run per (cluster, day) partition, day by day (default: every cluster of the config).
    `on_day` is called after each partition's run."""
    names = select_clusters(load_config(config_path), clusters)
    outcomes = []
    with _instance() as instance:
        for day in days:
            for cluster in names:
                key = cluster_day_key(cluster, day)
                run = _execute(config_path, METER_DAY_JOB, key, instance, f"cluster {cluster} day {day}")
                outcome = replace(run, cluster=cluster, day=day)
                outcomes.append(outcome)
                if on_day:
                    on_day(outcome)
    return outcomes


def meter_today(
    config_path: str, through: datetime, clusters: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """One meter_today run per cluster (default: every cluster of the config), each metering the cluster's day
    of `through` up to it as provisional figures: the job the hourly schedule runs. What each run did (metered,
    or skipped and why), as its op returns it."""
    from gpumeter.pipelines.today import TODAY_JOB, TODAY_OP, through_key

    names = select_clusters(load_config(config_path), clusters)
    job = build_definitions(config_path).resolve_job_def(TODAY_JOB)
    done = []
    with _instance() as instance:
        for cluster in names:
            run_config = {
                **QUIET,
                "ops": {TODAY_OP: {"config": {"cluster": cluster, "through": through_key(through)}}},
            }
            result = job.execute_in_process(run_config=run_config, instance=instance, raise_on_error=False)
            if not result.success:
                raise RunFailed(f"{TODAY_JOB} cluster {cluster}: {_failure(result)}")
            done.append(result.output_for_node(TODAY_OP))
    return done


def invoice_month(config_path: str, period: str) -> RunOutcome:
    with _instance() as instance:
        return _execute(config_path, INVOICE_MONTH_JOB, f"{period}-01", instance)
