"""Today so far (docs/dashboard.md, "Provisional figures"): every hour at minute 10 (UTC) the schedule
`meter_today_so_far` asks for one run of the job `meter_today` per cluster of the config, each metering the
cluster's current day up to the last full hour (`through`) into the provisional zone
(gpumeter.models.provisional). The nightly `meter_previous_day` replaces those figures with the complete
day's.

- Not an asset job: provisional figures are no materialization of the daily assets, whose lineage and
  checks stay the final figures'.
- A run key per cluster and hour (`today-<cluster>-2026-11-17T14:00:00Z`): a tick is never run twice.
- At 00:10 the current day has no full hour yet: the tick skips (the day before keeps its figures through
  23:00 until the nightly run).
- A run that finds the day locked (the nightly run, another provisional run) or already metered in full
  skips, says why in its log and succeeds: it is no failure of the pipeline.
"""

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from dagster import (
    Config,
    Failure,
    OpExecutionContext,
    RunConfig,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    job,
    op,
    schedule,
)

from gpumeter.models.provisional import last_full_hour, meter_day_so_far
from gpumeter.pipelines.resources import GpumeterConfigResource

TODAY_JOB = "meter_today"
TODAY_SCHEDULE = "meter_today_so_far"
TODAY_CRON = "10 * * * *"
TODAY_OP = "meter_day_so_far"
TODAY_TAG = "gpumeter/provisional_through"  # the through of a run, on each run


def through_key(through: datetime) -> str:
    """A through as run config and run keys write it: `2026-11-17T14:00:00Z`."""
    return through.astimezone(UTC).isoformat().replace("+00:00", "Z")


class TodayRun(Config):
    """The (cluster, day) a run meters so far: the cluster's name and `through`, the end of the last full
    hour to meter (ISO 8601 in UTC, `2026-11-17T14:00:00Z`); its day is the day of `through`."""

    cluster: str
    through: str


def _through(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None or moment != last_full_hour(moment):
        raise Failure(
            description=f"through {text!r} is not a whole hour with its time zone; write it like "
            "2026-11-17T14:00:00Z"
        )
    return moment.astimezone(UTC)


@op(
    name=TODAY_OP,
    description="Meter one cluster's current day up to a full hour into the provisional zone; skip it when "
    "another run holds the day or the day has its final figures.",
)
def meter_day_so_far_op(
    context: OpExecutionContext, config: TodayRun, gpumeter: GpumeterConfigResource
) -> dict[str, Any]:
    settings = gpumeter.config
    if config.cluster not in {c.name for c in settings.clusters}:
        raise Failure(
            description=f"cluster {config.cluster!r} is not in the config: one of "
            f"{', '.join(c.name for c in settings.clusters)}"
        )
    outcome = meter_day_so_far(
        settings,
        gpumeter.warehouse,
        config.cluster,
        _through(config.through),
        source_for=gpumeter.source,
        log=context.log.info,
    )
    context.add_output_metadata(
        {"status": "metered, provisional" if outcome.metered else "skipped", "message": outcome.message}
    )
    return {
        "cluster": outcome.cluster,
        "day": outcome.day.isoformat(),
        "through": through_key(outcome.through),
        "metered": outcome.metered,
        "message": outcome.message,
        "rows": dict(outcome.rows),
    }


@job(
    name=TODAY_JOB,
    description="Meter one cluster's current day so far (up to the last full hour) as provisional figures, "
    "which the dashboard shows apart and no invoice ever reads; the nightly run replaces them.",
)
def meter_today() -> None:
    meter_day_so_far_op()


def today_requests(clusters: Sequence[str], moment: datetime) -> list[RunRequest] | SkipReason:
    """The runs of a tick at `moment`: one per cluster, through the last full hour; none at 00:xx."""
    through = last_full_hour(moment)
    if through.hour == 0:
        return SkipReason(
            f"{through:%Y-%m-%d} has no full hour yet: its first provisional figures are metered at 01:10 UTC"
        )
    key = through_key(through)
    return [
        RunRequest(
            run_key=f"today-{cluster}-{key}",
            run_config=RunConfig(ops={TODAY_OP: TodayRun(cluster=cluster, through=key)}),
            tags={TODAY_TAG: key},
        )
        for cluster in clusters
    ]


def build_today_schedule(clusters: Sequence[str]) -> ScheduleDefinition:
    @schedule(job=meter_today, cron_schedule=TODAY_CRON, execution_timezone="UTC", name=TODAY_SCHEDULE)
    def meter_today_so_far(context: ScheduleEvaluationContext) -> list[RunRequest] | SkipReason:
        return today_requests(clusters, context.scheduled_execution_time or datetime.now(UTC))

    return meter_today_so_far
