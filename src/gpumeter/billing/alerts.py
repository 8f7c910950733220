"""Budget alerts (docs/tariffs.md, "Budget alerts"): which (tenant, month, basis, threshold) a tenant has
crossed, and what its message says.

A tenant with a `monthly_budget` crosses a threshold `t` of `alerts.thresholds` on a basis of `alerts.basis`
when its month's spend (basis `spend`), or its forecast for the month (basis `forecast`), is at least
`t × monthly_budget` and above zero; the figures are gpumeter.billing.budgets' (unrounded, every charge type).
Each such (tenant, month, basis, threshold) is one alert, sent once (gpumeter.billing.alert_ledger keeps
the ledger of those delivered, gpumeter.billing.alert_webhook posts them, gpumeter.pipelines.alert_delivery runs
both).

The months looked at follow the metering: the month of the latest metered day and, during the first
GRACE_DAYS days of a month, the month before, whose last days are metered (or re-metered) after it ended.

Provisional figures (today so far, gpumeter.storage.provisional) count on basis `spend` only: money spent up
to the last full hour is spent, and the final day only adds the hours after it. Basis `forecast` reads
complete days only: a part of a day projects its hours' pace (a busy morning, a quiet night) onto the month,
and an alert once sent is never taken back. Either way an alert is the same (tenant, month, basis, threshold)
sent once: crossing it again on the final figures sends nothing.

Pure functions of the stored mart and the config, and `due_alerts`, which reads the mart from a warehouse.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_DOWN, Decimal
from typing import Literal

import pyarrow as pa

from gpumeter.billing.budgets import budget_status
from gpumeter.billing.invoices import Period, round_money
from gpumeter.config import Alerts, Config
from gpumeter.storage import paths, provisional
from gpumeter.storage.warehouse import Warehouse

Basis = Literal["spend", "forecast"]

# The month before stays looked at this many days into a month: its last day is metered on the 1st, and late
# data may re-meter its last days in the days after.
GRACE_DAYS = 7

# English month names, whatever the process locale (calendar.month_name follows LC_TIME).
_MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip


def share_text(share: Decimal | float | str) -> str:
    """A threshold as the config writes it, canonically: 0.8 -> `0.8`, 1.0 -> `1`, 10 -> `10`."""
    return format(Decimal(str(share)).normalize(), "f")


def percent_text(share: Decimal | float | str) -> str:
    """A threshold as a percentage, without trailing zeros: 0.8 -> `80`, 0.825 -> `82.5`."""
    return share_text(Decimal(str(share)) * 100)


def moment_text(moment: datetime | None) -> str | None:
    """A moment in UTC as ISO 8601 with a `Z` (`2026-11-12T14:00:00Z`), for the ledger and JSON bodies."""
    return None if moment is None else moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def alert_key(period: str, tenant: str, basis: str, threshold: Decimal | float | str) -> str:
    """The identity of one alert, sent once: `2026-11:team-a:spend:0.8`."""
    return f"{period}:{tenant}:{basis}:{share_text(threshold)}"


def month_name(period: str) -> str:
    """`2026-11` -> `November 2026`."""
    parsed = Period.parse(period)
    return f"{_MONTHS[parsed.month - 1]} {parsed.year}"


def _day_text(day: date) -> str:
    return f"{day.day} {_MONTHS[day.month - 1]} {day.year}"


@dataclass(frozen=True)
class BudgetAlert:
    """One crossed (tenant, month, basis, threshold), with the figures of the evaluation that found it."""

    tenant: str
    cost_center: str | None
    period: str  # "YYYY-MM"
    basis: Basis
    threshold: Decimal  # a share of the budget: 0.8 is 80 %
    budget: Decimal
    spent: Decimal  # unrounded, as budgets.budget_status computes it
    forecast: Decimal
    days_elapsed: int
    days_in_period: int
    last_day: date | None  # the latest metered day of the month
    currency: str
    minor_unit: int
    # Set when `spent` counts provisional figures: the moment they are metered up to (basis spend only).
    provisional_through: datetime | None = None

    @property
    def amount(self) -> Decimal:
        """What was compared with the threshold: the spend or the forecast."""
        return self.spent if self.basis == "spend" else self.forecast

    @property
    def key(self) -> str:
        return alert_key(self.period, self.tenant, self.basis, self.threshold)

    @property
    def month(self) -> str:
        return month_name(self.period)

    def money(self, amount: Decimal) -> str:
        """An amount rounded to the currency's minor unit (half-even, as invoice lines are) with its code."""
        return f"{round_money(amount, self.minor_unit):,.{self.minor_unit}f} {self.currency}"

    def rounded(self, amount: Decimal) -> str:
        """An amount rounded to the currency's minor unit, as a plain number (for JSON bodies)."""
        return f"{round_money(amount, self.minor_unit):.{self.minor_unit}f}"

    @property
    def percent_of_budget(self) -> str | None:
        """The amount as a percentage of the budget, one decimal at most, rounded down so that it never reads
        above what it is; None for a zero budget."""
        if not self.budget:
            return None
        ratio = (self.amount * 100 / self.budget).quantize(Decimal("0.1"), rounding=ROUND_DOWN)
        return share_text(ratio)

    @property
    def title(self) -> str:
        threshold = percent_text(self.threshold)
        if self.basis == "spend":
            return f"Budget alert: {self.tenant} has used {threshold} % of its {self.month} budget"
        return f"Budget alert: {self.tenant} is forecast to reach {threshold} % of its {self.month} budget"

    @property
    def message(self) -> str:
        """The alert in words: tenant, cost center, budget, spend or forecast, threshold and month."""
        who = f"Tenant {self.tenant}" + (f" (cost center {self.cost_center})" if self.cost_center else "")
        budget = self.money(self.budget)
        share = self.percent_of_budget
        threshold = f"past the alert threshold of {percent_text(self.threshold)} %"
        metered = f"{self.days_elapsed} of the month's {self.days_in_period} days metered" + (
            f", up to {_day_text(self.last_day)}" if self.last_day else ""
        )
        if self.provisional_through is not None:
            through = self.provisional_through.astimezone(UTC)
            metered += f", and {_day_text(through.date())} through {through:%H:%M} UTC, provisional"
        if self.basis == "spend":
            of_it = f"{share} % of it" if share is not None else "all of it and more"
            return (
                f"{who} has spent {self.money(self.spent)} of its monthly budget of {budget} for {self.month}: "
                f"{of_it}, {threshold}. {metered[0].upper()}{metered[1:]}."
            )
        of_budget = (
            f"{share} % of its monthly budget of {budget}"
            if share is not None
            else f"over its monthly budget of {budget}"
        )
        return (
            f"{who} is forecast to spend {self.money(self.forecast)} in {self.month} at its pace so far, "
            f"{of_budget}: {threshold}. Spent so far: {self.money(self.spent)}, over {metered}."
        )


def crossed_alerts(
    tenant_daily_cost: pa.Table,
    config: Config,
    settings: Alerts,
    period: Period,
    provisional_rows: pa.Table | None = None,
) -> list[BudgetAlert]:
    """Every (tenant, basis, threshold) of `period` crossed now: tenants in budget_status's order (the
    configured ones in file order), then basis in the settings' order, then thresholds increasing. Tenants
    without a budget never alert. `provisional_rows` (today so far) count on basis spend only."""
    alerts = []
    so_far = {
        s.tenant: s
        for s in budget_status(tenant_daily_cost, config, period, provisional=provisional_rows)
        if s.provisional_days
    }
    for final in budget_status(tenant_daily_cost, config, period):
        if final.budget is None:
            continue
        for basis in settings.basis:
            status = so_far.get(final.tenant, final) if basis == "spend" else final
            last_day = status.last_complete_day
            amount = status.spent if basis == "spend" else status.forecast
            for share in settings.thresholds:
                threshold = Decimal(str(share))  # 0.8 as written, not the float's binary value
                # Above zero: a zero budget is crossed by any spend, never by none.
                if amount <= 0 or amount < final.budget * threshold:
                    continue
                alerts.append(
                    BudgetAlert(
                        tenant=status.tenant,
                        cost_center=status.cost_center,
                        period=status.period,
                        basis=basis,
                        threshold=threshold,
                        budget=final.budget,
                        spent=status.spent,
                        forecast=status.forecast,
                        days_elapsed=status.days_elapsed,
                        days_in_period=status.days_in_period,
                        last_day=last_day,
                        currency=config.currency,
                        minor_unit=config.minor_unit,
                        provisional_through=status.through,
                    )
                )
    return alerts


def alert_periods(metered_days: Iterable[date]) -> list[Period]:
    """The months to look at, oldest first: the latest metered day's, and the one before during the first
    GRACE_DAYS days of a month. None when nothing is metered."""
    latest = max(metered_days, default=None)
    if latest is None:
        return []
    current = Period.of(latest)
    if latest.day > GRACE_DAYS:
        return [current]
    return [Period.of(current.start - timedelta(days=1)), current]


def due_alerts(warehouse: Warehouse, config: Config, settings: Alerts) -> list[BudgetAlert]:
    """The alerts crossed now in the warehouse's stored tenant_daily_cost (every cluster), for the months of
    `alert_periods`; whether each was already delivered is the ledger's business."""
    metered = [day for _, day in warehouse.days(paths.MARTS, paths.TENANT_DAILY_COST)]
    metered += [day for _, day in provisional.days(warehouse, paths.TENANT_DAILY_COST)]
    return [
        alert
        for period in alert_periods(metered)
        for alert in period_alerts(warehouse, config, settings, period)
    ]


def period_alerts(
    warehouse: Warehouse, config: Config, settings: Alerts, period: Period
) -> list[BudgetAlert]:
    """The alerts of one month crossed now in the stored tenant_daily_cost (and, on basis spend, its
    provisional days)."""
    daily = warehouse.read_days(paths.MARTS, paths.TENANT_DAILY_COST, period.days())
    so_far = provisional.read_days(warehouse, paths.TENANT_DAILY_COST, period.days())
    if daily is None and so_far is None:
        return []
    return crossed_alerts(daily if daily is not None else pa.table({}), config, settings, period, so_far)
