"""Run the Dagster jobs in-process: what `gpumeter run`, `demo` and `invoices` call, so that the CLI runs
exactly the job the schedule runs (one code path): one meter_day run per (cluster, day) partition."""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, redirect_stderr
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from pathlib import Path
from typing import Any, TextIO

from dagster import DagsterInstance, ExecuteInProcessResult, InitLoggerContext, JobDefinition, logger

from gpumeter.billing.invoices import InvoiceError
from gpumeter.config import ConfigError, load_config, select_clusters
from gpumeter.ingest.contract import SourceError
from gpumeter.models.project import AccountingError
from gpumeter.pipelines.definitions import INVOICE_MONTH_JOB, METER_DAY_JOB, build_definitions
from gpumeter.pipelines.partitions import cluster_day_key
from gpumeter.storage.files import WarehouseError
from gpumeter.storage.replacement import Acceptance

# A user's or a source's problem (the CLI's exit 2), each with its subclasses (the refusals of
# gpumeter.billing.refusals are InvoiceErrors, a busy lock is a WarehouseError); anything else is a bug.
USER_ERRORS: tuple[type[BaseException], ...] = (
    ConfigError,
    SourceError,
    AccountingError,
    WarehouseError,
    InvoiceError,
)


class RunFailed(RuntimeError):
    """A Dagster run of a gpumeter job failed; the message is the error that stopped it, on one line.
    `internal` when that error is none of USER_ERRORS (a bug: exit 1 from the CLI)."""

    def __init__(self, message: str, internal: bool = False) -> None:
        super().__init__(message)
        self.internal = internal


# Dagster's per-event console logging would drown the progress bar; failures are reported by us.
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}

# The event stream of the runs launched inside `event_log(path)`: to that file only, never the console.
_EVENTS = logging.getLogger("gpumeter.dagster_events")
_EVENTS.propagate = False
_EVENTS.setLevel(logging.DEBUG)
_FILE_LOGGER = "gpumeter_event_log"


@logger(description="the run's Dagster event stream, to the file of gpumeter.pipelines.launch.event_log")
def _file_logger(_: InitLoggerContext) -> logging.Logger:
    return _EVENTS


_DAGSTER = logging.getLogger("dagster")  # Dagster's own Python warnings ("No dagster.yaml found at …")
_stderr: list[TextIO] = []  # the event-log file while `event_log` is on


@contextmanager
def event_log(path: Path) -> Iterator[Path]:
    """Within it, every run launched from here logs Dagster's whole event stream (tracebacks included) to
    `path`, appended, and nothing to the console: nor do Dagster's own warnings, nor what it prints while
    a run executes (its first-run telemetry notice). Outside it, runs log their errors to the console
    (QUIET)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as stream:
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(asctime)s - %(levelname)s - %(name)s - %(message)s"))
        propagates = _DAGSTER.propagate
        _EVENTS.addHandler(handler)
        _DAGSTER.addHandler(handler)
        _DAGSTER.propagate = False
        _stderr.append(stream)
        try:
            yield path
        finally:
            _stderr.pop()
            _DAGSTER.propagate = propagates
            _DAGSTER.removeHandler(handler)
            _EVENTS.removeHandler(handler)
            handler.flush()


def _run_output() -> AbstractContextManager[object]:
    """Where what a run prints on stderr goes: the event-log file inside `event_log`, else stderr."""
    return redirect_stderr(_stderr[-1]) if _stderr else nullcontext()


def _logged(job: JobDefinition, run_config: Mapping[str, Any]) -> tuple[JobDefinition, dict[str, Any]]:
    """The job and its run config with the loggers of the moment: the event-log file inside `event_log`
    (the job's own loggers, Dagster's console among them, replaced), else the console at ERROR (QUIET)."""
    if not _EVENTS.handlers:
        return job, {**run_config, **QUIET}
    return job.with_logger_defs({_FILE_LOGGER: _file_logger}), {**run_config, "loggers": {_FILE_LOGGER: {}}}


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


_RAISED = re.compile(r"^([A-Za-z_][\w.]*): ")  # `module.Class: message`, as a traceback names an exception


def _user_error(message: str) -> bool:
    """Whether the exception a serialized error names (by its module and class) is one of USER_ERRORS."""
    found = _RAISED.match(message)
    if not found:
        return False
    module, _, name = found.group(1).rpartition(".")
    raised = getattr(sys.modules.get(module or "builtins"), name, None)
    return isinstance(raised, type) and issubclass(raised, USER_ERRORS)


def _one_line(message: str) -> str:
    return " ".join(line.strip() for line in message.strip().splitlines() if line.strip())


def _failure(result: ExecuteInProcessResult) -> tuple[str, bool]:
    """The error that failed the run, on one line, and whether it is internal (none of USER_ERRORS)."""
    for event in result.all_events:
        if event.is_failure and event.event_specific_data is not None:
            error = getattr(event.event_specific_data, "error", None)
            if error is None:
                continue
            # Dagster wraps the error raised in the step; the first of USER_ERRORS down the chain of causes
            # is the useful line, its own message without its class.
            chain, link = [], error
            while link is not None:
                chain.append(link)
                link = link.cause
            for link in chain:
                if link.message and _user_error(link.message):
                    return _one_line(_RAISED.sub("", link.message.strip(), count=1)), False
            cause = error.cause or error
            return _one_line(cause.message) if cause.message else str(cause), True
    return "the run failed; see the Dagster event log", True


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
    config_path: str,
    job_name: str,
    partition: str,
    instance: DagsterInstance,
    label: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> RunOutcome:
    job, run_config = _logged(build_definitions(config_path).resolve_job_def(job_name), {})
    with _run_output():
        result = job.execute_in_process(
            partition_key=partition,
            instance=instance,
            run_config=run_config,
            raise_on_error=False,
            tags=dict(tags or {}),
        )
    if not result.success:
        message, internal = _failure(result)
        raise RunFailed(f"{job_name} {label or partition}: {message}", internal)
    return RunOutcome(partition, result.run_id, _checks(result), _materialized(result))


def meter_days(
    config_path: str,
    days: Iterable[date],
    on_day: Callable[[RunOutcome], None] | None = None,
    clusters: Sequence[str] | None = None,
    acceptance: Acceptance | None = None,
) -> list[RunOutcome]:
    """One meter_day run per (cluster, day) partition, day by day (default: every cluster of the config).
    `on_day` is called after each partition's run. `acceptance`: a stored day may be replaced with less
    (gpumeter.storage.replacement), as its runs' tags say."""
    names = select_clusters(load_config(config_path), clusters)
    outcomes = []
    with _instance() as instance:
        for day in days:
            for cluster in names:
                key = cluster_day_key(cluster, day)
                label = f"cluster {cluster} day {day}"
                tags = acceptance.tags() if acceptance else None
                run = _execute(config_path, METER_DAY_JOB, key, instance, label, tags)
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
            ops = {"ops": {TODAY_OP: {"config": {"cluster": cluster, "through": through_key(through)}}}}
            logged, run_config = _logged(job, ops)
            with _run_output():
                result = logged.execute_in_process(
                    run_config=run_config, instance=instance, raise_on_error=False
                )
            if not result.success:
                message, internal = _failure(result)
                raise RunFailed(f"{TODAY_JOB} cluster {cluster}: {message}", internal)
            done.append(result.output_for_node(TODAY_OP))
    return done


def invoice_month(config_path: str, period: str) -> RunOutcome:
    with _instance() as instance:
        return _execute(config_path, INVOICE_MONTH_JOB, f"{period}-01", instance)
