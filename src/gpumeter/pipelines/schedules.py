"""Schedules: every night the previous UTC day is metered, one run per cluster (its (cluster, day)
partition, so the clusters run at once); on the 1st the previous month is invoiced.

Written as plain schedules rather than `build_schedule_from_partitioned_job` because the partitions
reach into the current day and month (for previews), and a schedule must only ever take a complete one.
"""

from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta

from dagster import RunRequest, ScheduleEvaluationContext, schedule

from gpumeter.billing.invoices import Period
from gpumeter.pipelines.partitions import cluster_day_key


def previous_day(moment: datetime) -> date:
    return moment.astimezone(UTC).date() - timedelta(days=1)


def previous_month(moment: datetime) -> Period:
    return Period.of(moment.astimezone(UTC).date().replace(day=1) - timedelta(days=1))


def build_schedules(meter_day_job, invoice_month_job, clusters: Sequence[str]):  # noqa: ANN001, ANN201 - Dagster job objects
    @schedule(
        job=meter_day_job, cron_schedule="15 1 * * *", execution_timezone="UTC", name="meter_previous_day"
    )
    def meter_previous_day(context: ScheduleEvaluationContext) -> list[RunRequest]:
        day = previous_day(context.scheduled_execution_time)
        return [
            RunRequest(run_key=f"meter-{cluster}-{day}", partition_key=cluster_day_key(cluster, day))
            for cluster in clusters
        ]

    @schedule(
        job=invoice_month_job,
        cron_schedule="0 3 1 * *",
        execution_timezone="UTC",
        name="invoice_previous_month",
    )
    def invoice_previous_month(context: ScheduleEvaluationContext) -> RunRequest:
        period = previous_month(context.scheduled_execution_time)
        return RunRequest(run_key=f"invoice-{period}", partition_key=f"{period}-01")

    return [meter_previous_day, invoice_previous_month]
