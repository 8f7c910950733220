"""Budget alerts to a webhook (docs/tariffs.md, "Budget alerts"): the sensor `budget_alerts` and the job
`send_budget_alerts`, defined only when the config has an `alerts` section. What is crossed is
gpumeter.billing.alerts', the ledger of alerts delivered gpumeter.billing.alert_ledger's, the bodies and the
POST gpumeter.billing.alert_webhook's; this module runs them.

- The sensor looks every 5 minutes (running by default) at the alerts crossed now and launches one run per
  alert not yet in the ledger, none for an alert whose run is still going.
- Its run key is the alert's and the attempt's (`budget-alert:2026-11:team-a:spend:0.8:attempt-1`, the
  attempt counting this instance's earlier runs of the alert), so Dagster never launches one attempt twice,
  and a failed run is followed by a new attempt at the next tick.
- The run checks the ledger again under its lock before it posts, and writes it only after the webhook said
  yes. A delivery that still fails after its retries fails the run with one message naming the alert and the
  webhook's host (never its URL: a webhook URL is a secret), and the alert is not written to the ledger, so
  the next tick tries again.

An alert is delivered at least once: a run killed between the webhook's yes and the ledger line sends it
again at the next tick.
"""

from decimal import Decimal

from dagster import (
    Config,
    DagsterRunStatus,
    DefaultSensorStatus,
    Failure,
    JobDefinition,
    OpExecutionContext,
    RunConfig,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    job,
    op,
    sensor,
)

from gpumeter.billing.alert_ledger import held, ledger_path, read_ledger, record_delivery
from gpumeter.billing.alert_webhook import DeliveryError, alert_body, post_alert, webhook_host, webhook_url
from gpumeter.billing.alerts import (
    BudgetAlert,
    alert_key,
    due_alerts,
    month_name,
    percent_text,
    period_alerts,
    share_text,
)
from gpumeter.billing.invoices import InvoiceError, Period
from gpumeter.config import Config as GpumeterConfig
from gpumeter.pipelines.resources import GpumeterConfigResource
from gpumeter.storage.files import WarehouseError

ALERT_JOB = "send_budget_alerts"
ALERT_OP = "send_budget_alert"
ALERT_SENSOR = "budget_alerts"
ALERT_TAG = "gpumeter/budget_alert"  # the alert's key, on each of its runs
SENSOR_INTERVAL_SECONDS = 300

_FINISHED = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


# --- the job -------------------------------------------------------------------------------------


class BudgetAlertRun(Config):
    """The alert a run delivers: its month (YYYY-MM), tenant, basis (spend or forecast) and threshold (a share
    of the budget, as in the config: 0.8)."""

    period: str
    tenant: str
    basis: str
    threshold: str


@op(
    name=ALERT_OP,
    description="Send one budget alert to the webhook, unless the ledger has it already; record it once sent.",
)
def send_budget_alert(
    context: OpExecutionContext, config: BudgetAlertRun, gpumeter: GpumeterConfigResource
) -> None:
    settings = gpumeter.config.alerts
    if settings is None:
        raise Failure(
            description="the config has no `alerts` section: budget alerts are off (docs/config.md)"
        )
    try:
        period = Period.parse(config.period)
        threshold = Decimal(config.threshold)
        if config.basis not in ("spend", "forecast"):
            raise ValueError(config.basis)
    except (InvoiceError, ArithmeticError, ValueError):
        raise Failure(
            description=f"not a budget alert: month {config.period!r} (YYYY-MM), basis {config.basis!r} "
            f"(spend or forecast), threshold {config.threshold!r} (a share of the budget, e.g. 0.8)"
        ) from None
    key = alert_key(config.period, config.tenant, config.basis, threshold)
    # The alert in words, for the messages of a run that sends nothing.
    what = (
        f"the budget alert of tenant {config.tenant} ({config.basis} at {percent_text(threshold)} % of its "
        f"{month_name(config.period)} budget)"
    )
    try:
        url = webhook_url(settings.webhook_url_env)
    except DeliveryError as exc:
        raise Failure(description=f"{what} was not sent: {exc}") from None
    warehouse = gpumeter.warehouse
    # One delivery at a time: the ledger is checked and written by one run only.
    with held(warehouse):
        sent = read_ledger(warehouse).get(key)
        if sent is not None:
            context.log.info(f"{what} was delivered at {sent.get('sent_at')}: not sent again")
            return
        alert = next(
            (a for a in period_alerts(warehouse, gpumeter.config, settings, period) if a.key == key), None
        )
        if alert is None:
            context.log.info(
                f"{what} is not crossed any more (its days were re-metered, or the budget or thresholds "
                "changed): nothing sent"
            )
            return
        try:
            status = post_alert(
                url,
                alert_body(alert, gpumeter.config.pool, settings.format),
                timeout_s=settings.timeout_seconds,
                retries=settings.retries,
                log=context.log.warning,
            )
        except DeliveryError as exc:
            raise Failure(
                description=f"{alert.title}: not delivered to the webhook at {webhook_host(url)} "
                f"(${settings.webhook_url_env}): it {exc}. Not recorded as sent: the budget_alerts sensor "
                "tries again at its next check."
            ) from None
        try:
            record = record_delivery(
                warehouse, alert, fmt=settings.format, status=status, run_id=context.run_id
            )
        except (WarehouseError, OSError) as exc:
            raise Failure(
                description=f"{what} was delivered but could not be recorded in the ledger "
                f"{ledger_path(warehouse)} ({exc}): it will be sent again at the next check unless the "
                "warehouse is writable by then"
            ) from None
    context.log.info(f"{alert.title}: delivered (HTTP {status}). {alert.message}")
    context.add_output_metadata({"alert": key, "delivered_at": record["sent_at"]})


@job(
    name=ALERT_JOB,
    description="Deliver one budget alert (a tenant's spend or forecast past a share of its monthly budget) "
    "to the webhook, once: the ledger in the warehouse records every alert delivered.",
)
def send_budget_alerts() -> None:
    send_budget_alert()


# --- the sensor ----------------------------------------------------------------------------------


def _alert_run(alert: BudgetAlert, attempt: int) -> RunRequest:
    return RunRequest(
        run_key=f"budget-alert:{alert.key}:attempt-{attempt}",
        run_config=RunConfig(
            ops={
                ALERT_OP: BudgetAlertRun(
                    period=alert.period,
                    tenant=alert.tenant,
                    basis=alert.basis,
                    threshold=share_text(alert.threshold),
                )
            }
        ),
        tags={ALERT_TAG: alert.key},
    )


@sensor(
    name=ALERT_SENSOR,
    job=send_budget_alerts,
    minimum_interval_seconds=SENSOR_INTERVAL_SECONDS,
    default_status=DefaultSensorStatus.RUNNING,
    description="Every 5 minutes: a run of send_budget_alerts for each budget alert crossed and not yet "
    "delivered (one per tenant, month, basis and threshold).",
)
def budget_alerts(
    context: SensorEvaluationContext, gpumeter: GpumeterConfigResource
) -> SensorResult | SkipReason:
    config = gpumeter.config
    settings = config.alerts
    if settings is None:
        return SkipReason("the config has no `alerts` section: budget alerts are off")
    warehouse = gpumeter.warehouse
    crossed = due_alerts(warehouse, config, settings)
    delivered = read_ledger(warehouse)
    requests_, running = [], 0
    for alert in crossed:
        if alert.key in delivered:
            continue
        runs = context.instance.get_run_records(RunsFilter(job_name=ALERT_JOB, tags={ALERT_TAG: alert.key}))
        if any(run.dagster_run.status not in _FINISHED for run in runs):
            running += 1  # its run is queued or going: never two deliveries of one alert at once
            continue
        requests_.append(_alert_run(alert, len(runs) + 1))
    if requests_:
        return SensorResult(run_requests=requests_)
    if running:
        return SkipReason(f"{running} budget alert(s) waiting for their run to finish")
    return SkipReason(f"no budget alert to send ({len(crossed)} crossed, all delivered)")


def budget_alert_definitions(config: GpumeterConfig) -> tuple[list[JobDefinition], list[SensorDefinition]]:
    """The alert job and its sensor, when the config has an `alerts` section."""
    if config.alerts is None:
        return [], []
    return [send_budget_alerts], [budget_alerts]
