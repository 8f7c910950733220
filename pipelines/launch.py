"""Run the Dagster jobs in-process: what `gpumeter run`, `demo` and `invoices` call, so that the CLI runs
exactly the job the schedule runs (one code path)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date

from dagster import DagsterInstance, ExecuteInProcessResult

from metering.runner import RunFailed
from pipelines.definitions import INVOICE_MONTH_JOB, METER_DAY_JOB, build_definitions

# Dagster's per-event console logging would drown the progress bar; failures are reported by us.
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


@dataclass(frozen=True)
class RunOutcome:
    partition: str
    run_id: str
    failed_checks: list[str]


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


def _failed_checks(result: ExecuteInProcessResult) -> list[str]:
    failed = []
    for evaluation in result.get_asset_check_evaluations():
        if not evaluation.passed:
            failed.append(f"{evaluation.check_name} ({evaluation.severity.value})")
    return failed


def _execute(config_path: str, job_name: str, partition: str, instance: DagsterInstance) -> RunOutcome:
    job = build_definitions(config_path).resolve_job_def(job_name)
    result = job.execute_in_process(
        partition_key=partition, instance=instance, run_config=QUIET, raise_on_error=False
    )
    if not result.success:
        raise RunFailed(f"{job_name} {partition}: {_failure(result)}")
    return RunOutcome(partition, result.run_id, _failed_checks(result))


def meter_days(
    config_path: str, days: Iterable[date], on_day: Callable[[RunOutcome], None] | None = None
) -> list[RunOutcome]:
    outcomes = []
    with _instance() as instance:
        for day in days:
            outcome = _execute(config_path, METER_DAY_JOB, day.isoformat(), instance)
            outcomes.append(outcome)
            if on_day:
                on_day(outcome)
    return outcomes


def invoice_month(config_path: str, period: str) -> RunOutcome:
    with _instance() as instance:
        return _execute(config_path, INVOICE_MONTH_JOB, f"{period}-01", instance)
