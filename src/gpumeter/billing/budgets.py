"""Monthly budgets: what each tenant spent in a period, its burn-down and a forecast (docs/tariffs.md).

Pure functions over the stored `tenant_daily_cost` mart and the config; no I/O. A tenant's spend is the sum
of all its charge lines (reserved, usage, idle_share, energy): what its invoice will say before rounding
(R12 rounds once per invoice line, so budgets work on the unrounded amounts).

Forecast (docs/tariffs.md, "Budgets"): the mean daily spend of the metered days, times the days of the
period. `spent × days_in_period / days_elapsed`, kept to 12 decimals (DECIMAL(38,12), like every amount).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date
from decimal import ROUND_HALF_EVEN, Decimal, localcontext

import pyarrow as pa

from gpumeter.billing.invoices import Period
from gpumeter.config import RESERVED_BUCKETS, Config

_MONEY = Decimal("1e-12")  # DECIMAL(38, 12), the precision of every amount before an invoice line rounds it


@dataclass(frozen=True)
class BudgetStatus:
    """One tenant's position against its monthly budget, as of a day."""

    tenant: str
    cost_center: str | None
    period: str  # "YYYY-MM"
    budget: Decimal | None  # Tenant.monthly_budget; None if not set
    spent: Decimal  # Σ tenant_daily_cost.amount of the tenant for the period's metered days <= as_of
    days_elapsed: int  # days of the period metered up to as_of
    days_in_period: int
    forecast: Decimal  # projected spend at period end: spent × days_in_period / days_elapsed
    cumulative: list[tuple[date, Decimal]]  # burn-down: cumulative spend after each metered day

    @property
    def remaining(self) -> Decimal | None:
        """Budget left: budget − spent (negative once over); None without a budget."""
        return None if self.budget is None else self.budget - self.spent

    @property
    def forecast_over(self) -> Decimal | None:
        """forecast − budget: > 0 means the period is projected to end over budget; None without a budget."""
        return None if self.budget is None else self.forecast - self.budget

    @property
    def burn_ratio(self) -> Decimal | None:
        """Share of the budget already spent (spent ÷ budget; 1 = all of it). None without a budget or with a
        zero budget (any spend is over it: see `remaining`)."""
        if not self.budget:
            return None
        return _money(self.spent / self.budget)


def _money(value: Decimal) -> Decimal:
    return value.quantize(_MONEY, rounding=ROUND_HALF_EVEN)


def budget_status(
    tenant_daily_cost: pa.Table, config: Config, period: Period, as_of: date | None = None
) -> list[BudgetStatus]:
    """Budget position of every tenant for `period`, counting the metered days up to `as_of` (inclusive;
    None: every metered day of the period).

    Tenants: the configured ones in file order, then any other tenant found in the data (a tenant since
    removed from the config), by name. `__idle__` and `__unallocated__` are no one's budget and are left out.
    A metered day is a day of the period with any row in `tenant_daily_cost` (any tenant, any cluster): a
    tenant that used nothing that day spent 0 on it, and the day still counts for the forecast.
    """
    start, end = period.start, period.end
    last = end if as_of is None else min(end, date.fromordinal(as_of.toordinal() + 1))
    daily: dict[str, dict[date, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    seen_cost_centers: dict[str, str | None] = {}
    metered: set[date] = set()
    # An empty table may come without the mart's columns (no day stored yet): it is simply no spend.
    columns = ["day", "tenant", "cost_center", "amount"]
    found = tenant_daily_cost.select(columns).to_pylist() if tenant_daily_cost.num_rows else []
    for row in found:
        day = row["day"]
        if not start <= day < last:
            continue
        metered.add(day)
        tenant = row["tenant"]
        if tenant in RESERVED_BUCKETS:
            continue
        daily[tenant][day] += Decimal(row["amount"])
        if row["cost_center"]:
            seen_cost_centers[tenant] = row["cost_center"]

    configured = {t.name: t for t in config.tenants}
    names = [t.name for t in config.tenants] + sorted(set(daily) - set(configured))
    days = sorted(metered)
    days_in_period = len(period.days())
    statuses = []
    with localcontext() as ctx:
        ctx.prec = 60  # no rounding before the final quantize to 12 decimals
        for name in names:
            tenant = configured.get(name)
            by_day = daily.get(name, {})
            running = Decimal(0)
            cumulative = []
            for day in days:
                running += by_day.get(day, Decimal(0))
                cumulative.append((day, _money(running)))
            spent = _money(running)
            forecast = _money(spent * days_in_period / len(days)) if days else Decimal(0)
            budget = tenant.monthly_budget if tenant else None
            statuses.append(
                BudgetStatus(
                    tenant=name,
                    cost_center=(tenant.cost_center if tenant else None) or seen_cost_centers.get(name),
                    period=str(period),
                    budget=None if budget is None else Decimal(str(budget)),
                    spent=spent,
                    days_elapsed=len(days),
                    days_in_period=days_in_period,
                    forecast=forecast,
                    cumulative=cumulative,
                )
            )
    return statuses
