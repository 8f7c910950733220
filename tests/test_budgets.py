"""Budgets (gpumeter/billing/budgets.py, docs/tariffs.md): spend, burn-down and forecast on known series.

Every expected value is computed by hand in the comment beside it. November 2026 has 30 days.
"""

from __future__ import annotations

from datetime import date
from typing import Any

import pyarrow as pa
import pytest

from gpumeter.billing.budgets import BudgetStatus, budget_status
from gpumeter.billing.invoices import Period
from gpumeter.config import Config
from tests.test_invoices import daily
from tests.test_rules import P1, P2, D, factory, make_config, meter

NOV = Period(2026, 11)


def line(day: date, tenant: str, amount: str, charge_type: str = "reserved") -> tuple[Any, ...]:
    """A tenant_daily_cost row in the shape of tests/test_invoices.py's `daily`."""
    return (day, tenant, charge_type, "H100-80GB", None, "0", "0", amount)


def table(*lines: tuple[Any, ...]) -> pa.Table:
    # `daily` needs a row to type its columns: an empty table is a typed row sliced away.
    return daily(list(lines)) if lines else daily([line(date(2026, 10, 31), "team-a", "0")]).slice(0, 0)


def config(budgets: dict[str, float | None]) -> Config:
    tenants = [
        {"name": name, "namespaces": [f"ns-{name}"], "cost_center": f"CC-{name}", "monthly_budget": budget}
        for name, budget in budgets.items()
    ]
    return make_config(tenants=tenants)


def by_tenant(statuses: list[BudgetStatus]) -> dict[str, BudgetStatus]:
    return {s.tenant: s for s in statuses}


def nov(day: int) -> date:
    return date(2026, 11, day)


# team-a: Nov 1 = 8 reserved + 2 idle_share = 10; Nov 2 = 20 (two clusters: 15 + 5); Nov 3 = 25 reserved + 5
# energy = 30. team-b spends nothing. Reserved buckets and days outside November must not count.
SERIES = table(
    line(date(2026, 10, 31), "team-a", "999"),
    line(nov(1), "team-a", "8"),
    line(nov(1), "team-a", "2", "idle_share"),
    line(nov(1), "__idle__", "50", "idle"),
    line(nov(2), "team-a", "15"),
    line(nov(2), "team-a", "5"),  # another cluster's line of the day
    line(nov(2), "__unallocated__", "7"),
    line(nov(3), "team-a", "25", "usage"),
    line(nov(3), "team-a", "5", "energy"),
    line(date(2026, 12, 1), "team-a", "999"),
)


def test_spend_forecast_and_burn_down_of_a_known_series() -> None:
    statuses = budget_status(SERIES, config({"team-a": 500, "team-b": None}), NOV)
    assert [s.tenant for s in statuses] == ["team-a", "team-b"]  # config order; no reserved bucket
    a = by_tenant(statuses)["team-a"]
    assert a.cost_center == "CC-team-a" and a.period == "2026-11"
    assert a.budget == D(500)
    assert a.spent == D(60)  # 10 + 20 + 30
    assert a.days_elapsed == 3 and a.days_in_period == 30
    assert a.forecast == D(600)  # 60 / 3 days × 30 days
    assert a.cumulative == [(nov(1), D(10)), (nov(2), D(30)), (nov(3), D(60))]
    assert a.remaining == D(440)  # 500 − 60
    assert a.forecast_over == D(100)  # 600 − 500: projected over budget
    assert a.burn_ratio == D("0.12")  # 60 / 500


def test_a_tenant_without_spend_or_budget() -> None:
    b = by_tenant(budget_status(SERIES, config({"team-a": 500, "team-b": None}), NOV))["team-b"]
    assert b.spent == D(0) and b.forecast == D(0) and b.days_elapsed == 3
    assert b.cumulative == [(nov(1), D(0)), (nov(2), D(0)), (nov(3), D(0))]  # metered days count, at 0
    assert b.budget is None and b.remaining is None and b.forecast_over is None and b.burn_ratio is None


def test_as_of_counts_only_the_days_up_to_it() -> None:
    a = by_tenant(budget_status(SERIES, config({"team-a": 500}), NOV, as_of=nov(2)))["team-a"]
    assert a.spent == D(30) and a.days_elapsed == 2
    assert a.forecast == D(450)  # 30 / 2 × 30
    assert a.forecast_over == D(-50)  # under budget
    assert a.cumulative == [(nov(1), D(10)), (nov(2), D(30))]


def test_a_forecast_that_does_not_divide_is_kept_to_12_decimals() -> None:
    # 1.00 spent over 7 metered days of a 30-day month: 30/7 = 4.285714285714|2857…, rounded half-even.
    series = table(*(line(nov(d), "team-a", "1" if d == 1 else "0") for d in range(1, 8)))
    a = by_tenant(budget_status(series, config({"team-a": 4}), NOV))["team-a"]
    assert a.days_elapsed == 7
    assert a.forecast == D("4.285714285714")
    assert a.forecast_over == D("0.285714285714")
    assert a.burn_ratio == D("0.25")


def test_a_gap_in_metering_is_not_a_day_elapsed() -> None:
    # Nov 3 was not metered (yet): 2 metered days, 40 spent -> 40 / 2 × 30 = 600.
    series = table(line(nov(1), "team-a", "10"), line(nov(4), "team-a", "30"))
    a = by_tenant(budget_status(series, config({"team-a": 600}), NOV))["team-a"]
    assert a.days_elapsed == 2 and a.forecast == D(600) and a.forecast_over == D(0)
    assert a.cumulative == [(nov(1), D(10)), (nov(4), D(40))]


def test_a_fully_metered_month_forecasts_what_was_spent() -> None:
    series = table(*(line(nov(d), "team-a", f"{d}.5") for d in range(1, 31)))
    a = by_tenant(budget_status(series, config({"team-a": 100}), NOV))["team-a"]
    spent = sum((D(f"{d}.5") for d in range(1, 31)), D(0))  # 465 + 15 = 480
    assert spent == D(480)
    assert a.spent == spent and a.forecast == spent and a.days_elapsed == 30


def test_a_tenant_only_in_the_data_is_shown_after_the_configured_ones() -> None:
    series = table(line(nov(1), "zeta", "4"), line(nov(1), "team-a", "1"))
    statuses = budget_status(series, config({"team-a": None}), NOV)
    assert [s.tenant for s in statuses] == ["team-a", "zeta"]
    zeta = statuses[1]
    assert zeta.budget is None and zeta.spent == D(4) and zeta.forecast == D(120)  # 4 × 30


@pytest.mark.parametrize("empty", [table(), pa.table({"day": pa.array([], pa.date32())})])
def test_an_empty_period_has_nothing_spent(empty: pa.Table) -> None:
    # Also a table without the mart's columns: what a reader returns before any day is stored.
    a = by_tenant(budget_status(empty, config({"team-a": 10}), NOV))["team-a"]
    assert a.spent == D(0) and a.days_elapsed == 0 and a.forecast == D(0) and a.cumulative == []
    assert a.remaining == D(10) and a.burn_ratio == D(0)


def test_spend_is_the_metered_tenant_daily_cost() -> None:
    # A real metered day: P1 (team-a) holds an H100 for 10 samples, P2 (team-b) for 5. Δ = 60 s, 3.60/h:
    # 0.06 a sample. Platform idle policy: team-a 0.60, team-b 0.30; the rest is __idle__.
    f = factory()
    f.gpu("n1", "GPU-1", "NVIDIA H100 80GB HBM3")
    f.samples("GPU-1", range(10), util=50, pod=P1)
    f.samples("GPU-1", range(10, 15), util=50, pod=P2)
    f.samples("GPU-1", range(15, 20), util=0)
    tenants = [
        {"name": "team-a", "namespaces": ["ns-a"], "monthly_budget": 18},
        {"name": "team-b", "namespaces": ["ns-b"]},
    ]
    config = make_config(tenants=tenants)
    out = meter(f, config)
    statuses = by_tenant(budget_status(out["mart_tenant_daily_cost"], config, NOV))
    assert statuses["team-a"].spent == D("0.6") and statuses["team-b"].spent == D("0.3")
    assert statuses["team-a"].forecast == D(18)  # 0.60 × 30
    assert statuses["team-a"].forecast_over == D(0)
