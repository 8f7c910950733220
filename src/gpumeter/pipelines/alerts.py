"""Budget alerts to a webhook (docs/tariffs.md, "Budget alerts"): the sensor `budget_alerts` and the job
`send_budget_alerts`, defined only when the config has an `alerts` section.

- The sensor looks every 5 minutes (running by default) at the alerts crossed now
  (gpumeter.billing.alerts.due_alerts) and launches one run per alert not yet in the ledger, none for an alert
  whose run is still going.
- Its run key is the alert's and the attempt's (`budget-alert:2026-11:team-a:spend:0.8:attempt-1`, the
  attempt counting this instance's earlier runs of the alert), so Dagster never launches one attempt twice,
  and a failed run is followed by a new attempt at the next tick.
- The ledger `<warehouse>/alerts/budget_alerts.jsonl` (one JSON line per alert delivered, appended with
  storage.files.append_line) is what makes an alert once: a re-metered day, a new sensor cursor or a fresh
  Dagster instance finds the alert there and sends nothing. The run checks it again under the ledger's lock
  before it posts, and writes it only after the webhook said yes.
- Delivery: a POST of Slack-compatible JSON (`text` and `blocks`) or of a plain JSON object of the figures
  (`format: generic`), to the URL in the environment variable `alerts.webhook_url_env`. Connection errors,
  timeouts, 429 and 5xx are retried `alerts.retries` times with exponential back-off (or as long as
  Retry-After says, up to a minute); an answer that still fails, or another 4xx, fails the run with one
  message naming the alert and the webhook's host (never its URL: a webhook URL is a secret), and the alert
  is not written to the ledger, so the next tick tries again.

An alert is delivered at least once: a run killed between the webhook's yes and the ledger line sends it
again at the next tick.
"""

import email.utils
import json
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
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
from gpumeter.storage import locks, paths
from gpumeter.storage.files import WarehouseError, append_line
from gpumeter.storage.warehouse import Warehouse

ALERT_JOB = "send_budget_alerts"
ALERT_OP = "send_budget_alert"
ALERT_SENSOR = "budget_alerts"
ALERT_TAG = "gpumeter/budget_alert"  # the alert's key, on each of its runs
SENSOR_INTERVAL_SECONDS = 300

BACKOFF_SECONDS = 1.0  # the first retry's wait; doubled for each next one
MAX_BACKOFF_SECONDS = 30.0
MAX_RETRY_AFTER_SECONDS = 60.0  # a longer Retry-After is cut to this: the next tick retries anyway
LEDGER_LOCK_TIMEOUT_SECONDS = 600.0

_FINISHED = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


class DeliveryError(RuntimeError):
    """The webhook did not take the alert: why, in words."""


# --- the ledger ----------------------------------------------------------------------------------


def ledger_path(warehouse: Warehouse) -> Path:
    return paths.alert_ledger(warehouse.root)


def read_ledger(warehouse: Warehouse) -> dict[str, dict[str, Any]]:
    """Alert key -> its delivery record. A line that does not parse (the torn end of a killed append) is
    skipped: at worst that alert is sent again."""
    path = ledger_path(warehouse)
    if not path.exists():
        return {}
    delivered = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("key"), str):
            delivered.setdefault(record["key"], record)
    return delivered


def record_delivery(warehouse: Warehouse, alert: BudgetAlert, *, fmt: str, status: int, run_id: str) -> dict:
    """Append the delivery of `alert` to the ledger (one line, made durable) and return the record."""
    record = {
        "key": alert.key,
        "tenant": alert.tenant,
        "cost_center": alert.cost_center,
        "period": alert.period,
        "basis": alert.basis,
        "threshold": share_text(alert.threshold),
        "amount": alert.rounded(alert.amount),
        "budget": alert.rounded(alert.budget),
        "currency": alert.currency,
        "provisional_through": _moment(alert.provisional_through),
        "format": fmt,
        "http_status": status,
        "run_id": run_id,
        "sent_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
    }
    append_line(ledger_path(warehouse), json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n")
    return record


# --- the bodies ----------------------------------------------------------------------------------


def _slack_escape(text: str) -> str:
    # Slack's mrkdwn takes &, < and > as markup: a cost center "R&D <core>" must read as written.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(alert: BudgetAlert, pool: str) -> dict[str, Any]:
    """Slack incoming-webhook JSON: `text` (the notification, and what a client without blocks shows) and
    `blocks` (a header, the message, where it comes from)."""
    return {
        "text": _slack_escape(f"{alert.title}. {alert.message}"),
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": alert.title[:150]}},
            {"type": "section", "text": {"type": "mrkdwn", "text": _slack_escape(alert.message)}},
            {
                "type": "context",
                "elements": [
                    {"type": "mrkdwn", "text": _slack_escape(f"gpumeter, pool {pool}: alert {alert.key}")}
                ],
            },
        ],
    }


def generic_body(alert: BudgetAlert, pool: str) -> dict[str, Any]:
    """A plain JSON object of the alert's figures. Money is a string rounded to the currency's minor unit
    (exact, unlike a JSON number); `threshold` is the share of the budget (0.8 = 80 %)."""
    return {
        "kind": "budget_alert",
        "key": alert.key,
        "pool": pool,
        "tenant": alert.tenant,
        "cost_center": alert.cost_center,
        "period": alert.period,
        "basis": alert.basis,
        "threshold": float(alert.threshold),
        "amount": alert.rounded(alert.amount),
        "budget": alert.rounded(alert.budget),
        "spent": alert.rounded(alert.spent),
        "forecast": alert.rounded(alert.forecast),
        "currency": alert.currency,
        "days_metered": alert.days_elapsed,
        "days_in_period": alert.days_in_period,
        "metered_through": alert.last_day.isoformat() if alert.last_day else None,
        # Set when the spend counts today's provisional figures: the moment they are metered up to.
        "provisional_through": _moment(alert.provisional_through),
        "title": alert.title,
        "message": alert.message,
    }


def _moment(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def alert_body(alert: BudgetAlert, pool: str, fmt: str) -> dict[str, Any]:
    return slack_body(alert, pool) if fmt == "slack" else generic_body(alert, pool)


# --- delivery ------------------------------------------------------------------------------------


def webhook_url(env_name: str) -> str:
    """The webhook URL from the environment variable `env_name`; DeliveryError naming it when unset or not
    an http(s) URL (the value itself is never repeated: it is a secret)."""
    url = os.environ.get(env_name, "").strip()
    if not url:
        raise DeliveryError(
            f"the environment variable {env_name} (alerts.webhook_url_env) is not set: set it to the webhook "
            "URL where Dagster runs the budget alert job (its run workers and `dagster dev`)"
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DeliveryError(
            f"the environment variable {env_name} (alerts.webhook_url_env) does not hold an http(s) URL: "
            "set it to the webhook URL, e.g. https://hooks.slack.com/services/..."
        )
    return url


def webhook_host(url: str) -> str:
    """Where a webhook is, without the secret parts of its URL (credentials, path, query)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


def _retry_after(value: str | None) -> float | None:
    """Seconds a Retry-After header asks to wait (seconds or an HTTP date), at most MAX_RETRY_AFTER_SECONDS."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = (moment - datetime.now(UTC)).total_seconds() if moment.tzinfo else 0.0
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)


def _reason(exc: BaseException) -> str:
    """Why a connection failed, from the OS error underneath ("Connection refused"): requests' own message
    repeats the URL, which is a secret."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    return type(exc).__name__


def post_alert(
    url: str,
    body: dict[str, Any],
    *,
    timeout_s: float,
    retries: int,
    backoff_s: float = BACKOFF_SECONDS,
    log: Callable[[str], None] | None = None,
) -> int:
    """POST `body` as JSON to `url`; the HTTP status of the 2xx answer. Connection errors, timeouts, 429 and
    5xx are retried up to `retries` times, waiting Retry-After when the answer has one, else `backoff_s`
    doubled at each retry (at most MAX_BACKOFF_SECONDS). DeliveryError when it still fails, or at once on any
    other answer (a 4xx will not change by asking again)."""
    attempts = retries + 1
    problem = ""
    for attempt in range(1, attempts + 1):
        wait: float | None = None
        try:
            response = requests.post(
                url,
                json=body,
                timeout=timeout_s,
                allow_redirects=False,  # a redirected POST turns into a GET: say so instead
                headers={"User-Agent": "gpumeter budget alerts"},
            )
        except requests.Timeout:
            problem = f"no answer within {timeout_s:g} s"
        except requests.ConnectionError as exc:
            problem = f"could not connect ({_reason(exc)})"
        except requests.RequestException as exc:
            raise DeliveryError(f"could not be sent ({_reason(exc)})") from None
        else:
            if 200 <= response.status_code < 300:
                return response.status_code
            said = " ".join(response.text.split())[:200]
            problem = f"HTTP {response.status_code}" + (f" ({said})" if said else "")
            if response.status_code != 429 and response.status_code < 500:
                raise DeliveryError(
                    f"was refused: {problem}; not retried, as asking again gets the same answer"
                )
            wait = _retry_after(response.headers.get("Retry-After"))
        if attempt < attempts:
            delay = wait if wait is not None else min(backoff_s * 2 ** (attempt - 1), MAX_BACKOFF_SECONDS)
            if log is not None:
                log(f"attempt {attempt} of {attempts}: {problem}; retrying in {delay:g} s")
            time.sleep(delay)
    raise DeliveryError(f"failed {attempts} time(s); the last attempt: {problem}")


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
    # One delivery at a time: the ledger is checked and written by one run only (and on an object store
    # an append is a rewrite of the whole file).
    with locks.hold(paths.alert_lock(warehouse.root), "the budget alert ledger", LEDGER_LOCK_TIMEOUT_SECONDS):
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
