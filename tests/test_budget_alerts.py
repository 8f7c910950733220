"""Budget alerts (gpumeter/billing/alerts.py, alert_ledger.py and alert_webhook.py, gpumeter/pipelines/alert_delivery.py,
docs/tariffs.md "Budget alerts").

Which thresholds a tenant crossed is computed by hand in the comments. Delivery runs in a real Dagster
instance against a real HTTP receiver on 127.0.0.1 (http.server in a thread) that records every request
and answers as a test scripts it: a status (500, 429 with Retry-After, ...), a stall, or nothing at all
(its port closed). November 2026 has 30 days.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from datetime import date
from decimal import Decimal as D
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from dagster import (
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    Definitions,
    ExecuteInProcessResult,
    RunRequest,
    RunsFilter,
    SensorResult,
    SkipReason,
    build_sensor_context,
)

from gpumeter.billing.alert_ledger import ledger_path, read_ledger
from gpumeter.billing.alert_webhook import DeliveryError, post_alert
from gpumeter.billing.alerts import BudgetAlert, alert_periods, crossed_alerts, due_alerts
from gpumeter.billing.invoices import Period
from gpumeter.config import Alerts, ConfigError, parse_config
from gpumeter.pipelines.alert_delivery import ALERT_JOB, ALERT_SENSOR
from gpumeter.pipelines.definitions import build_definitions
from gpumeter.storage.paths import MARTS, TENANT_DAILY_COST
from gpumeter.storage.warehouse import Warehouse
from tests.test_invoices import daily

NOV = Period(2026, 11)
HOOK_ENV = "GPUMETER_TEST_ALERT_WEBHOOK"


def nov(day: int) -> date:
    return date(2026, 11, day)


def line(day: date, tenant: str, amount: str, charge_type: str = "reserved") -> tuple[Any, ...]:
    return (day, tenant, charge_type, "H100-80GB", None, "0", "0", amount)


TENANTS = [
    {"name": "team-a", "cost_center": "CC-A", "namespaces": ["ns-a"], "monthly_budget": 1000},
    {"name": "team-b", "cost_center": "CC-B", "namespaces": ["ns-b"], "monthly_budget": 3000},
    {"name": "team-c", "namespaces": ["ns-c"]},  # no budget: never alerts
]


def config_doc(tmp_path: Path, alerts: dict[str, Any] | None, **overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "clusters": [{"name": "c1", "source": {"kind": "parquet", "path": "/nonexistent"}}],
        "tenants": TENANTS,
        "warehouse": {"path": str(tmp_path / "warehouse")},
    }
    if alerts is not None:
        doc["alerts"] = {"webhook_url_env": HOOK_ENV, **alerts}
    doc.update(overrides)
    return doc


def write_config(tmp_path: Path, alerts: dict[str, Any] | None, **overrides: Any) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config_doc(tmp_path, alerts, **overrides), sort_keys=False))
    return path


def store_day(tmp_path: Path, day: date, amounts: dict[str, str], cluster: str = "c1") -> None:
    """One metered (cluster, day) of tenant_daily_cost in the warehouse: each tenant's amount on one line,
    and an __idle__ line, as the mart has."""
    rows = [line(day, tenant, amount) for tenant, amount in amounts.items()] + [line(day, "__idle__", "7")]
    Warehouse.at(tmp_path / "warehouse").write_day(MARTS, TENANT_DAILY_COST, cluster, day, daily(rows))


# --- which thresholds are crossed (pure) ---------------------------------------------------------


def test_thresholds_crossed_by_hand() -> None:
    config = parse_config(
        yaml.safe_dump(
            config_doc(
                Path("/tmp"),
                None,
                tenants=[
                    *TENANTS,
                    {"name": "team-d", "namespaces": ["ns-d"], "monthly_budget": 900},
                    {"name": "team-e", "namespaces": ["ns-e"], "monthly_budget": 0},
                    {"name": "team-f", "namespaces": ["ns-f"], "monthly_budget": 0},
                ],
            )
        )
    )
    # 10 metered days of November (30 days): forecast = spent × 30 / 10 = spent × 3.
    # team-a: 85 a day -> spent 850 (85 % of 1000: 80 % crossed, 100 % not); forecast 2550 (255 %: both).
    # team-b: 10 a day -> spent 100, forecast 300 of 3000: nothing.
    # team-c: 500 a day, no budget: nothing.
    # team-d: 30 a day -> spent 300 (33 %), forecast exactly 900 = 100 % of 900: forecast 80 % and 100 %.
    # team-e: budget 0, spends 0.01 on day 1 -> any spend is over a zero budget: every threshold, both bases.
    # team-f: budget 0, spends nothing: nothing (a zero budget is not crossed by zero).
    rows = []
    for d in range(1, 11):
        rows += [line(nov(d), "team-a", "85"), line(nov(d), "team-b", "10"), line(nov(d), "team-c", "500")]
        rows += [line(nov(d), "team-d", "20"), line(nov(d), "team-d", "10", "energy")]
    rows += [
        line(nov(1), "team-e", "0.01"),
        line(nov(1), "__idle__", "99"),
        line(date(2026, 12, 1), "team-b", "9999"),
    ]
    found = crossed_alerts(daily(rows), config, Alerts(), NOV)
    assert [a.key for a in found] == [
        "2026-11:team-a:spend:0.8",
        "2026-11:team-a:forecast:0.8",
        "2026-11:team-a:forecast:1",
        "2026-11:team-d:forecast:0.8",
        "2026-11:team-d:forecast:1",
        "2026-11:team-e:spend:0.8",
        "2026-11:team-e:spend:1",
        "2026-11:team-e:forecast:0.8",
        "2026-11:team-e:forecast:1",
    ]
    a = found[0]
    assert (a.spent, a.forecast, a.budget, a.days_elapsed, a.last_day) == (
        D(850),
        D(2550),
        D(1000),
        10,
        nov(10),
    )
    assert a.message == (
        "Tenant team-a (cost center CC-A) has spent 850.00 USD of its monthly budget of 1,000.00 USD for "
        "November 2026: 85 % of it, past the alert threshold of 80 %. 10 of the month's 30 days metered, up to "
        "10 November 2026."
    )
    assert a.title == "Budget alert: team-a has used 80 % of its November 2026 budget"
    assert found[2].title == "Budget alert: team-a is forecast to reach 100 % of its November 2026 budget"
    assert found[2].message == (
        "Tenant team-a (cost center CC-A) is forecast to spend 2,550.00 USD in November 2026 at its pace so "
        "far, 255 % of its monthly budget of 1,000.00 USD: past the alert threshold of 100 %. Spent so far: "
        "850.00 USD, over 10 of the month's 30 days metered, up to 10 November 2026."
    )
    assert "(cost center" not in found[3].message  # team-d has none
    assert (
        "spent 0.01 USD of its monthly budget of 0.00 USD for November 2026: all of it and more"
        in found[5].message
    )

    # Spend only, one threshold of 30 %: team-a (85 %), team-d (300 / 900 = 33.3 %), team-e.
    only = Alerts(thresholds=[0.3], basis=["spend"])
    assert [(x.tenant, x.percent_of_budget) for x in crossed_alerts(daily(rows), config, only, NOV)] == [
        ("team-a", "85"),
        ("team-d", "33.3"),  # 33.33… rounded down, never shown above what it is
        ("team-e", None),
    ]


def test_money_is_shown_in_the_currencys_minor_unit() -> None:
    # JPY has no decimals: 123,456.5 spent rounds half-even to 123,456 (and 0.5 of a budget to nothing).
    doc = config_doc(Path("/tmp"), None, currency="JPY")
    doc["tenants"] = [{"name": "team-a", "namespaces": ["ns-a"], "monthly_budget": 150000}]
    config = parse_config(yaml.safe_dump(doc))
    rows = [line(nov(d), "team-a", "12345.65") for d in range(1, 11)]  # 123,456.5 over 10 days
    [spend] = crossed_alerts(daily(rows), config, Alerts(thresholds=[0.8], basis=["spend"]), NOV)
    assert "has spent 123,456 JPY of its monthly budget of 150,000 JPY" in spend.message
    assert "82.3 % of it" in spend.message  # 123456.5 / 150000 = 82.30…


def test_the_months_looked_at_follow_the_metering() -> None:
    assert alert_periods([]) == []
    assert alert_periods([nov(3), nov(20)]) == [NOV]
    # The first days of December: November's last days may just have been metered or re-metered.
    assert alert_periods([nov(30), date(2026, 12, 1)]) == [NOV, Period(2026, 12)]
    assert alert_periods([date(2026, 12, 7)]) == [NOV, Period(2026, 12)]
    assert alert_periods([date(2026, 12, 8)]) == [Period(2026, 12)]
    assert alert_periods([date(2027, 1, 2)]) == [Period(2026, 12), Period(2027, 1)]


# --- the config ----------------------------------------------------------------------------------


def alerts_error(tmp_path: Path, alerts: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(yaml.safe_dump(config_doc(tmp_path, alerts)))
    return " ".join(str(caught.value).split())


def test_alert_settings_are_validated(tmp_path: Path) -> None:
    settings = Alerts()
    assert (settings.webhook_url_env, settings.format, settings.thresholds, settings.basis) == (
        "GPUMETER_ALERT_WEBHOOK",
        "slack",
        [0.8, 1.0],
        ["spend", "forecast"],
    )
    assert "alerts.thresholds" in alerts_error(tmp_path, {"thresholds": [0]})
    assert "threshold 11.0 is not a share of the budget above 0 and at most 10" in alerts_error(
        tmp_path, {"thresholds": [0.5, 11]}
    )
    assert "must be increasing without repeats" in alerts_error(tmp_path, {"thresholds": [1.0, 0.8]})
    assert "must be increasing without repeats" in alerts_error(tmp_path, {"thresholds": [0.8, 0.8]})
    assert "names one twice" in alerts_error(tmp_path, {"basis": ["spend", "spend"]})
    assert "alerts.basis" in alerts_error(tmp_path, {"basis": ["invoice"]})
    assert "alerts.format" in alerts_error(tmp_path, {"format": "teams"})
    assert "a webhook URL is a secret and never goes in this file" in alerts_error(
        tmp_path, {"webhook_url_env": "https://hooks.slack.com/services/T/B/X"}
    )
    assert "'MY-HOOK' is not an environment variable name" in alerts_error(
        tmp_path, {"webhook_url_env": "MY-HOOK"}
    )
    # YAML reads a bare `on:` as true: the message says what to write.
    text = yaml.safe_dump(config_doc(tmp_path, None)) + "alerts:\n  on: [spend]\n"
    with pytest.raises(ConfigError, match="write `basis: \\[spend, forecast\\]`"):
        parse_config(text)


def test_without_alerts_no_sensor_or_job_is_defined(tmp_path: Path, instance: DagsterInstance) -> None:
    defs = build_definitions(write_config(tmp_path, None))
    assert ALERT_JOB not in {j.name for j in defs.resolve_all_job_defs()}
    assert not list(defs.sensors or [])
    defs = build_definitions(write_config(tmp_path, {}))
    sensor = defs.resolve_sensor_def(ALERT_SENSOR)
    assert sensor.default_status == DefaultSensorStatus.RUNNING
    assert sensor.minimum_interval_seconds == 300 and sensor.job_name == ALERT_JOB
    assert tick(defs, instance) == []  # nothing metered yet: nothing to send


# --- a real webhook receiver ---------------------------------------------------------------------


class Receiver:
    """An HTTP server on 127.0.0.1 that records each POST and answers with the next scripted reply
    (status, headers, body, stall seconds); 200 "ok" once the script is used up. `stop()` closes its port
    (connections are then refused) and `start()` opens it again on the same port."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.script: deque[tuple[int, dict[str, str], str, float]] = deque()
        self.server: ThreadingHTTPServer | None = None
        self.port = 0
        self.start()

    def reply(
        self, status: int, headers: dict[str, str] | None = None, body: str = "", stall: float = 0
    ) -> None:
        self.script.append((status, headers or {}, body, stall))

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests.append(
                    {
                        "path": self.path,
                        "headers": dict(self.headers),
                        "json": json.loads(body),
                        "at": time.monotonic(),
                    }
                )
                status, headers, text, stall = (
                    receiver.script.popleft() if receiver.script else (200, {}, "ok", 0)
                )
                time.sleep(stall)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(text.encode())))
                self.end_headers()
                self.wfile.write(text.encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    @property
    def url(self) -> str:
        # The path stands for a Slack webhook's secret: it must never appear in a message.
        return f"http://127.0.0.1:{self.port}/services/T000/B000/SECRETPATH"

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r["json"] for r in self.requests]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.stop()


@pytest.fixture
def instance() -> Iterator[DagsterInstance]:
    with DagsterInstance.ephemeral() as fresh:
        yield fresh


def tick(defs: Definitions, instance: DagsterInstance) -> list[RunRequest]:
    """One evaluation of the sensor on the instance: the runs it asks for."""
    context = build_sensor_context(instance=instance, resources=defs.resources)
    result = defs.resolve_sensor_def(ALERT_SENSOR)(context)
    if isinstance(result, SkipReason):
        return []
    assert isinstance(result, SensorResult)
    return list(result.run_requests or [])


def launch(
    defs: Definitions, instance: DagsterInstance, requests: list[RunRequest]
) -> list[ExecuteInProcessResult]:
    """What the sensor daemon does with the requests: a run for each run key this instance has not used for
    the sensor yet, tagged as the daemon tags it."""
    job = defs.resolve_job_def(ALERT_JOB)
    results = []
    for request in requests:
        tags = {"dagster/sensor_name": ALERT_SENSOR, "dagster/run_key": request.run_key or ""}
        if instance.get_runs(RunsFilter(tags=tags)):
            continue
        results.append(
            job.execute_in_process(
                run_config=request.run_config,
                instance=instance,
                tags={**request.tags, **tags},
                raise_on_error=False,
            )
        )
    return results


def failure_message(result: ExecuteInProcessResult) -> str:
    failure = result.failure_data_for_node("send_budget_alert")
    assert failure is not None and failure.error is not None
    # The run's failure as Dagster shows it: the Failure's description after the class name.
    return " ".join(str(failure.error.message).split()).removeprefix(
        "dagster._core.definitions.events.Failure: "
    )


def ledger_keys(tmp_path: Path) -> list[str]:
    path = ledger_path(Warehouse.at(tmp_path / "warehouse"))
    if not path.exists():
        return []
    return [json.loads(text)["key"] for text in path.read_text().splitlines()]


def ten_days(tmp_path: Path) -> None:
    # team-a 85 a day, team-b 10 a day, team-c 500 a day (no budget), Nov 1..10: as in the first test,
    # team-a crosses spend 80 % and forecast 80 % and 100 %; nobody else crosses anything.
    for d in range(1, 11):
        store_day(tmp_path, nov(d), {"team-a": "85", "team-b": "10", "team-c": "500"})


A_KEYS = ["2026-11:team-a:spend:0.8", "2026-11:team-a:forecast:0.8", "2026-11:team-a:forecast:1"]


# --- the sensor and the job ----------------------------------------------------------------------


def test_the_sensor_launches_one_run_per_crossed_alert_and_the_job_posts_slack_json(
    tmp_path: Path, receiver: Receiver, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOOK_ENV, receiver.url)
    ten_days(tmp_path)
    defs = build_definitions(write_config(tmp_path, {"format": "slack"}))
    requests = tick(defs, instance)
    assert [r.tags["gpumeter/budget_alert"] for r in requests] == A_KEYS
    assert [r.run_key for r in requests] == [f"budget-alert:{key}:attempt-1" for key in A_KEYS]
    results = launch(defs, instance, requests)
    assert [r.success for r in results] == [True] * 3
    assert [r["path"] for r in receiver.requests] == ["/services/T000/B000/SECRETPATH"] * 3
    assert all(r["headers"]["Content-Type"] == "application/json" for r in receiver.requests)
    first = receiver.bodies[0]
    assert set(first) == {"text", "blocks"}
    assert first["blocks"][0] == {
        "type": "header",
        "text": {
            "type": "plain_text",
            "text": "Budget alert: team-a has used 80 % of its November 2026 budget",
        },
    }
    assert first["blocks"][1]["text"] == {
        "type": "mrkdwn",
        "text": "Tenant team-a (cost center CC-A) has spent 850.00 USD of its monthly budget of 1,000.00 USD "
        "for November 2026: 85 % of it, past the alert threshold of 80 %. 10 of the month's 30 days metered, "
        "up to 10 November 2026.",
    }
    assert first["text"].startswith(
        "Budget alert: team-a has used 80 % of its November 2026 budget. Tenant team-a"
    )
    assert "2,550.00 USD" in receiver.bodies[1]["text"] and "255 %" in receiver.bodies[1]["text"]
    assert ledger_keys(tmp_path) == A_KEYS
    record = read_ledger(Warehouse.at(tmp_path / "warehouse"))[A_KEYS[0]]
    assert (record["amount"], record["budget"], record["threshold"], record["http_status"]) == (
        "850.00",
        "1000.00",
        "0.8",
        200,
    )
    assert record["run_id"] == results[0].run_id

    # The next tick: everything crossed is delivered, no run.
    assert tick(defs, instance) == []
    # The same requests again (a replayed tick): Dagster's run keys launch nothing twice.
    assert launch(defs, instance, requests) == []
    # A fresh Dagster instance (a new cursor, no run history): the ledger still says sent.
    with DagsterInstance.ephemeral() as fresh:
        assert tick(defs, fresh) == []
    assert len(receiver.requests) == 3


def test_the_generic_format_posts_the_figures(
    tmp_path: Path, receiver: Receiver, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOOK_ENV, receiver.url)
    ten_days(tmp_path)
    defs = build_definitions(
        write_config(tmp_path, {"format": "generic", "thresholds": [1.0], "basis": ["forecast"]})
    )
    [request] = tick(defs, instance)
    [result] = launch(defs, instance, [request])
    assert result.success
    [body] = receiver.bodies
    assert body == {
        "kind": "budget_alert",
        "key": "2026-11:team-a:forecast:1",
        "pool": "gpu-pool",
        "tenant": "team-a",
        "cost_center": "CC-A",
        "period": "2026-11",
        "basis": "forecast",
        "threshold": 1.0,
        "amount": "2550.00",  # 850 × 30 / 10
        "budget": "1000.00",
        "spent": "850.00",
        "forecast": "2550.00",
        "currency": "USD",
        "days_metered": 10,
        "days_in_period": 30,
        "metered_through": "2026-11-10",
        "provisional_through": None,  # complete days only
        "title": "Budget alert: team-a is forecast to reach 100 % of its November 2026 budget",
        "message": "Tenant team-a (cost center CC-A) is forecast to spend 2,550.00 USD in November 2026 at its "
        "pace so far, 255 % of its monthly budget of 1,000.00 USD: past the alert threshold of 100 %. Spent so "
        "far: 850.00 USD, over 10 of the month's 30 days metered, up to 10 November 2026.",
    }


def test_a_webhook_that_is_down_fails_the_run_and_the_next_tick_delivers_once(
    tmp_path: Path, receiver: Receiver, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOOK_ENV, receiver.url)
    ten_days(tmp_path)
    defs = build_definitions(write_config(tmp_path, {"thresholds": [0.8], "basis": ["spend"], "retries": 0}))
    receiver.stop()  # its port is closed: connections are refused
    [request] = tick(defs, instance)
    [result] = launch(defs, instance, [request])
    assert not result.success
    message = failure_message(result)
    assert message == (
        f"Budget alert: team-a has used 80 % of its November 2026 budget: not delivered to the webhook at "
        f"http://127.0.0.1:{receiver.port} (${HOOK_ENV}): it failed 1 time(s); the last attempt: could not "
        "connect (Connection refused). Not recorded as sent: the budget_alerts sensor tries again at its next check."
    )
    assert "SECRETPATH" not in message
    assert ledger_keys(tmp_path) == []

    receiver.start()
    [retry] = tick(defs, instance)  # a new attempt, so a new run key
    assert retry.run_key == "budget-alert:2026-11:team-a:spend:0.8:attempt-2"
    [result] = launch(defs, instance, [retry])
    assert result.success and len(receiver.requests) == 1
    assert ledger_keys(tmp_path) == ["2026-11:team-a:spend:0.8"]
    assert tick(defs, instance) == []


def test_a_5xx_then_ok_is_delivered_after_retries(
    tmp_path: Path, receiver: Receiver, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOOK_ENV, receiver.url)
    ten_days(tmp_path)
    defs = build_definitions(write_config(tmp_path, {"thresholds": [0.8], "basis": ["spend"], "retries": 2}))
    receiver.reply(500, body="upstream broke")  # then the default back-off: 1 s
    receiver.reply(429, {"Retry-After": "0"}, "slow down")  # Retry-After 0: at once
    [request] = tick(defs, instance)
    [result] = launch(defs, instance, [request])
    assert result.success
    assert len(receiver.requests) == 3 and receiver.bodies[0] == receiver.bodies[2]
    first, second, third = (r["at"] for r in receiver.requests)
    assert second - first >= 1.0 and third - second < 0.9
    assert ledger_keys(tmp_path) == ["2026-11:team-a:spend:0.8"]
    logged = [entry.user_message for entry in instance.all_logs(result.run_id)]
    assert "attempt 1 of 3: HTTP 500 (upstream broke); retrying in 1 s" in logged
    assert "attempt 2 of 3: HTTP 429 (slow down); retrying in 0 s" in logged


def test_re_metering_never_re_sends_and_a_later_threshold_sends_only_itself(
    tmp_path: Path, receiver: Receiver, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOOK_ENV, receiver.url)
    ten_days(tmp_path)
    defs = build_definitions(write_config(tmp_path, {}))
    assert all(r.success for r in launch(defs, instance, tick(defs, instance)))
    assert len(receiver.requests) == 3

    # Nov 10 re-metered lower: team-a 35 -> spent 800 = 80 % still, forecast 2400. Nothing new.
    store_day(tmp_path, nov(10), {"team-a": "35", "team-b": "10", "team-c": "500"})
    assert tick(defs, instance) == []
    # ... and lower again, under 80 % (spent 765, forecast 2295): the alert sent stays sent.
    store_day(tmp_path, nov(10), {"team-a": "0", "team-b": "10", "team-c": "500"})
    assert tick(defs, instance) == []
    # Nov 11: team-a 300 -> spent 1065 of 1000: 100 % on spend, the one new alert.
    store_day(tmp_path, nov(11), {"team-a": "300", "team-b": "10"})
    [request] = tick(defs, instance)
    assert request.tags["gpumeter/budget_alert"] == "2026-11:team-a:spend:1"
    assert all(r.success for r in launch(defs, instance, [request]))
    assert len(receiver.requests) == 4
    assert "has spent 1,065.00 USD of its monthly budget of 1,000.00 USD" in receiver.bodies[3]["text"]
    assert "106.5 % of it" in receiver.bodies[3]["text"]
    assert ledger_keys(tmp_path) == [*A_KEYS, "2026-11:team-a:spend:1"]
    assert tick(defs, instance) == []


def test_a_run_of_an_alert_already_in_the_ledger_sends_nothing(
    tmp_path: Path, receiver: Receiver, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two runs of one alert asked for at once (say, by two Dagster instances on one warehouse): the ledger,
    # read under its lock, lets one of them send.
    monkeypatch.setenv(HOOK_ENV, receiver.url)
    ten_days(tmp_path)
    defs = build_definitions(write_config(tmp_path, {"thresholds": [0.8], "basis": ["spend"]}))
    [request] = tick(defs, instance)
    job = defs.resolve_job_def(ALERT_JOB)
    assert job.execute_in_process(run_config=request.run_config, instance=instance).success
    assert job.execute_in_process(run_config=request.run_config, instance=instance).success
    assert len(receiver.requests) == 1 and ledger_keys(tmp_path) == ["2026-11:team-a:spend:0.8"]


def test_a_missing_environment_variable_is_one_clear_error(
    tmp_path: Path, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(HOOK_ENV, raising=False)
    ten_days(tmp_path)
    defs = build_definitions(write_config(tmp_path, {"thresholds": [0.8], "basis": ["spend"]}))
    [result] = launch(defs, instance, tick(defs, instance))
    assert not result.success
    assert failure_message(result) == (
        "the budget alert of tenant team-a (spend at 80 % of its November 2026 budget) was not sent: the "
        f"environment variable {HOOK_ENV} "
        "(alerts.webhook_url_env) is not set: set it to the webhook URL where Dagster runs the budget alert "
        "job (its run workers and `dagster dev`)"
    )
    assert ledger_keys(tmp_path) == []
    monkeypatch.setenv(HOOK_ENV, "hooks.example.com/no-scheme")
    [result] = launch(defs, instance, tick(defs, instance))
    assert "does not hold an http(s) URL" in failure_message(result)
    assert "no-scheme" not in failure_message(result)


def test_the_sensor_waits_for_a_run_still_going(tmp_path: Path, instance: DagsterInstance) -> None:
    ten_days(tmp_path)
    defs = build_definitions(write_config(tmp_path, {"thresholds": [0.8], "basis": ["spend"]}))
    [request] = tick(defs, instance)
    # The daemon created the run and a worker has not finished it: no second delivery of the alert at once.
    run = instance.create_run_for_job(
        defs.resolve_job_def(ALERT_JOB), run_config=request.run_config, tags=request.tags
    )
    assert run.status == DagsterRunStatus.NOT_STARTED
    assert tick(defs, instance) == []
    instance.report_run_failed(run)  # it died before sending: the next tick tries again
    [retry] = tick(defs, instance)
    assert retry.run_key == "budget-alert:2026-11:team-a:spend:0.8:attempt-2"


# --- delivery: retries and back-off --------------------------------------------------------------


def test_connection_errors_are_retried_with_exponential_back_off(receiver: Receiver) -> None:
    url = receiver.url
    receiver.stop()
    started = time.monotonic()
    with pytest.raises(
        DeliveryError, match=r"failed 3 time\(s\); the last attempt: could not connect \(Connection refused\)"
    ):
        post_alert(url, {"text": "x"}, timeout_s=2, retries=2, backoff_s=0.2)
    assert time.monotonic() - started >= 0.6  # 0.2, then 0.4


def test_retry_after_is_honoured_and_a_4xx_is_not_retried(receiver: Receiver) -> None:
    receiver.reply(503, {"Retry-After": "1"})
    started = time.monotonic()
    assert post_alert(receiver.url, {"text": "x"}, timeout_s=2, retries=1, backoff_s=0) == 200
    assert time.monotonic() - started >= 1.0 and len(receiver.requests) == 2

    receiver.reply(404, body="no_service")
    with pytest.raises(DeliveryError, match=r"was refused: HTTP 404 \(no_service\); not retried"):
        post_alert(receiver.url, {"text": "x"}, timeout_s=2, retries=3, backoff_s=0)
    assert len(receiver.requests) == 3


def test_a_webhook_that_does_not_answer_times_out(receiver: Receiver) -> None:
    receiver.reply(200, stall=1.5)
    receiver.reply(200, stall=1.5)
    with pytest.raises(DeliveryError, match=r"failed 2 time\(s\); the last attempt: no answer within 0.3 s"):
        post_alert(receiver.url, {"text": "x"}, timeout_s=0.3, retries=1, backoff_s=0)


# --- the demo's table ----------------------------------------------------------------------------


def test_due_alerts_read_every_cluster_of_the_latest_month(tmp_path: Path) -> None:
    # Two clusters' days add up: team-a 45 + 40 a day on Nov 1..10 is the 85 a day of the first test.
    for d in range(1, 11):
        store_day(tmp_path, nov(d), {"team-a": "45"}, cluster="c1")
        store_day(tmp_path, nov(d), {"team-a": "40"}, cluster="c2")
    config = parse_config(yaml.safe_dump(config_doc(tmp_path, {})))
    assert config.alerts is not None
    found = due_alerts(Warehouse.of(config.warehouse), config, config.alerts)
    assert [a.key for a in found] == A_KEYS


def test_the_demo_prints_the_alerts_it_would_send(capsys: pytest.CaptureFixture[str]) -> None:
    from gpumeter.cli import render

    alert = BudgetAlert(
        tenant="research",
        cost_center="CC-4100",
        period="2026-11",
        basis="forecast",
        threshold=D("0.8"),
        budget=D(2500),
        spent=D("700.123"),
        forecast=D("3000.5271"),
        days_elapsed=7,
        days_in_period=30,
        last_day=nov(7),
        currency="USD",
        minor_unit=2,
    )
    over = dataclasses.replace(alert, threshold=D(1))
    render.budget_alerts([alert, over], sent_to=None)
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("research") == 1  # one row per tenant, month and basis: the figures are the same
    assert "80 %, 100 %" in out
    assert "2 alerts, one per threshold crossed" in out
    for text in (
        "research",
        "CC-4100",
        "2026-11",
        "forecast",
        "80 %",
        "3,000.53 USD",
        "2,500.00 USD",
        "120 %",
    ):
        assert text in out, text
    assert "no webhook" in out
    render.budget_alerts([], sent_to=None)
    assert "no budget alert" in capsys.readouterr().out.lower()
