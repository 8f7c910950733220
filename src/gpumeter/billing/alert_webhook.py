"""What a budget alert sends to its webhook, and the sending (docs/tariffs.md, "Budget alerts").

- The body: Slack-compatible JSON (`text` and `blocks`), or a plain JSON object of the figures
  (`format: generic`).
- The URL: from the environment variable `alerts.webhook_url_env`. A webhook URL is a secret: no message
  repeats it, only its host (`webhook_host`).
- The POST: connection errors, timeouts, 429 and 5xx are retried `alerts.retries` times by urllib3's `Retry`
  (mounted on the requests session), waiting as long as Retry-After says (up to a minute), else with
  exponential back-off; an answer that still fails, or another 4xx, is a DeliveryError in one line.
"""

from __future__ import annotations

import email.utils
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Self
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import MaxRetryError, NewConnectionError
from urllib3.exceptions import TimeoutError as Urllib3Timeout
from urllib3.util.retry import Retry

from gpumeter.billing.alerts import BudgetAlert, moment_text

BACKOFF_SECONDS = 1.0  # the first retry's wait; doubled for each next one
MAX_BACKOFF_SECONDS = 30.0
MAX_RETRY_AFTER_SECONDS = 60.0  # a longer Retry-After is cut to this: the next tick retries anyway
RETRIED_STATUSES = frozenset({429, *range(500, 600)})


class DeliveryError(RuntimeError):
    """The webhook did not take the alert: why, in words."""


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
        "provisional_through": moment_text(alert.provisional_through),
        "title": alert.title,
        "message": alert.message,
    }


def alert_body(alert: BudgetAlert, pool: str, fmt: str) -> dict[str, Any]:
    return slack_body(alert, pool) if fmt == "slack" else generic_body(alert, pool)


# --- where to ------------------------------------------------------------------------------------


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


# --- the POST ------------------------------------------------------------------------------------


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds a Retry-After header asks to wait (seconds or an HTTP date), at most MAX_RETRY_AFTER_SECONDS;
    None when there is none or it does not parse."""
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
    """Why a connection failed, from the OS error underneath ("Connection refused"): the messages of
    requests and urllib3 repeat the URL, which is a secret."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    return type(exc).__name__


def _error_problem(error: BaseException, timeout_s: float) -> str:
    """An attempt that got no answer, in words. A refused connection is a NewConnectionError, which urllib3
    files under its connect timeouts."""
    if isinstance(error, Urllib3Timeout) and not isinstance(error, NewConnectionError):
        return f"no answer within {timeout_s:g} s"
    return f"could not connect ({_reason(error)})"


def _status_problem(status: int, text: str) -> str:
    said = " ".join(text.split())[:200]
    return f"HTTP {status}" + (f" ({said})" if said else "")


class _WebhookRetry(Retry):
    """urllib3's Retry as the webhook wants it: the n-th retry waits Retry-After when the answer has one
    (any retried status, 0 included), else `backoff_factor` × 2^(n-1) (urllib3's own back-off does not wait
    before the first retry); each retry is logged with what went wrong."""

    # Statuses are retried by status_forcelist alone: a 413 with Retry-After is refused, as any other 4xx.
    RETRY_AFTER_STATUS_CODES = frozenset()

    def __init__(
        self,
        *args: Any,
        timeout_s: float = 0.0,
        log: Callable[[str], None] | None = None,
        problem: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.timeout_s = timeout_s
        self.log = log
        self.problem = problem  # what went wrong on the latest attempt

    def new(self, **kw: Any) -> Self:
        fresh = super().new(**kw)
        fresh.timeout_s, fresh.log = self.timeout_s, self.log
        return fresh

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: Any = None,
        error: Exception | None = None,
        _pool: Any = None,
        _stacktrace: Any = None,
    ) -> Self:
        fresh = super().increment(method, url, response, error, _pool, _stacktrace)
        # Only an attempt to be retried gets here (an exhausted Retry raised): its answer is read for the log
        # before urllib3 drains it.
        if error is not None:
            fresh.problem = _error_problem(error, self.timeout_s)
        elif response is not None:
            raw = response.read(decode_content=True, cache_content=True) or b""
            fresh.problem = _status_problem(response.status, raw.decode("utf-8", errors="replace"))
        return fresh

    def get_backoff_time(self) -> float:
        failed = len(self.history)
        return min(self.backoff_factor * 2 ** (failed - 1), self.backoff_max) if failed else 0.0

    def sleep(self, response: Any = None) -> None:
        wait = retry_after_seconds(response.headers.get("Retry-After")) if response is not None else None
        delay = wait if wait is not None else self.get_backoff_time()
        if self.log is not None:
            failed = len(self.history)
            attempts = failed + (self.total or 0) + 1
            self.log(f"attempt {failed} of {attempts}: {self.problem}; retrying in {delay:g} s")
        time.sleep(delay)


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
    retry = _WebhookRetry(
        total=retries,
        allowed_methods=frozenset({"POST"}),
        status_forcelist=RETRIED_STATUSES,
        backoff_factor=backoff_s,
        backoff_max=MAX_BACKOFF_SECONDS,
        raise_on_status=False,  # the last answer is handed back, to be said in the error
        timeout_s=timeout_s,
        log=log,
    )
    with requests.Session() as session:
        adapter = HTTPAdapter(max_retries=retry)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        try:
            response = session.post(
                url,
                json=body,
                timeout=timeout_s,
                allow_redirects=False,  # a redirected POST turns into a GET: say so instead
                headers={"User-Agent": "gpumeter budget alerts"},
            )
        except requests.RequestException as exc:
            spent = next((a for a in exc.args if isinstance(a, MaxRetryError)), None)
            if spent is None:
                raise DeliveryError(f"could not be sent ({_reason(exc)})") from None
            problem = _error_problem(spent.reason or spent, timeout_s)
            raise DeliveryError(f"failed {attempts} time(s); the last attempt: {problem}") from None
    if 200 <= response.status_code < 300:
        return response.status_code
    problem = _status_problem(response.status_code, response.text)
    if response.status_code in RETRIED_STATUSES:
        raise DeliveryError(f"failed {attempts} time(s); the last attempt: {problem}")
    raise DeliveryError(f"was refused: {problem}; not retried, as asking again gets the same answer")
