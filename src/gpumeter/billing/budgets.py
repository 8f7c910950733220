"""Monthly budgets: what each tenant spent in a period, its burn-down and a forecast (docs/tariffs.md).

Pure functions over the stored `tenant_daily_cost` mart and the config; no I/O. A tenant's spend is the sum
of all its charge lines (reserved, usage, idle_share, energy): what its invoice will say before rounding
(R12 rounds once per invoice line, so budgets work on the unrounded amounts).

Forecast (docs/tariffs.md, "Budgets"): the mean daily spend of the metered days, times the days of the
period. `spent × days_in_period / days_elapsed`, kept to 12 decimals (DECIMAL(38,12), like every amount).

Provisional figures (today so far, gpumeter.storage.provisional) may be counted too: their spend is spent, and
their day counts as the part of it they cover (16 complete days and today through 12:00 are 16.5 metered
days), so that the forecast stays spend per metered time × the period's time.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime
from decimal import ROUND_HALF_EVEN, Decimal, localcontext

import pyarrow as pa

from gpumeter.billing.invoices import LINE_COLUMNS, Period, invoiced_from_rows
from gpumeter.config import RESERVED_BUCKETS, Config
from gpumeter.ingest.contract import day_bounds_ms
from gpumeter.storage.provisional import THROUGH

_MONEY = Decimal("1e-12")  # DECIMAL(38, 12), the precision of every amount before an invoice line rounds it
_DAY_S = 86_400


@dataclass(frozen=True)
class BudgetStatus:
    """One tenant's position against its monthly budget, as of a day."""

    tenant: str
    cost_center: str | None
    period: str  # "YYYY-MM"
    budget: Decimal | None  # Tenant.monthly_budget; None if not set
    spent: Decimal  # the tenant's metered days <= as_of as its invoice says them (each line rounded once), + today so far
    days_elapsed: int  # complete days of the period metered up to as_of (provisional ones not counted)
    days_in_period: int
    forecast: Decimal  # projected spend at period end: spent × days_in_period / days_metered
    cumulative: list[tuple[date, Decimal]]  # burn-down: cumulative spend after each metered day
    # Counted from provisional figures (none unless the caller passed them): the part of `spent` they are,
    # each provisional day with the moment it is metered up to, and the seconds of those days they cover
    # (days that are also complete count whole, in `days_elapsed`).
    provisional_spent: Decimal = Decimal(0)
    provisional_days: tuple[tuple[date, datetime], ...] = ()
    provisional_seconds: int = 0

    @property
    def days_metered(self) -> Decimal:
        """The metered time in days, which the forecast divides by: the complete days, and the share of a
        provisional day it covers (16 days and today through 12:00: 16.5)."""
        return Decimal(self.days_elapsed) + Decimal(self.provisional_seconds) / _DAY_S

    @property
    def through(self) -> datetime | None:
        """The latest moment provisional figures are counted up to; None without any."""
        return max((t for _, t in self.provisional_days), default=None)

    @property
    def last_complete_day(self) -> date | None:
        """The latest metered day that is not provisional."""
        partial = {d for d, _ in self.provisional_days}
        return max((d for d, _ in self.cumulative if d not in partial), default=None)

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
    tenant_daily_cost: pa.Table,
    config: Config,
    period: Period,
    as_of: date | None = None,
    provisional: pa.Table | None = None,
) -> list[BudgetStatus]:
    """Budget position of every tenant for `period`, counting the metered days up to `as_of` (inclusive;
    None: every metered day of the period).

    `provisional`: rows of provisional days (the mart's columns and `through`), counted as spent; a day only
    they have counts as the share of it up to its latest `through`, for the forecast.

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
    # What the invoice says of the complete days, where the rows carry their lines' keys and exact money.
    invoiced = None
    if tenant_daily_cost.num_rows and set(LINE_COLUMNS) <= set(tenant_daily_cost.column_names):
        in_range = [
            r
            for r in tenant_daily_cost.select([*columns, *LINE_COLUMNS]).to_pylist()
            if start <= r["day"] < last and r["tenant"] not in RESERVED_BUCKETS
        ]
        invoiced = invoiced_from_rows(in_range, config.minor_unit)
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
    partial: dict[date, datetime] = {}  # provisional day -> the latest moment it is metered up to
    provisional_spent: dict[str, Decimal] = defaultdict(Decimal)
    found = []
    if provisional is not None and provisional.num_rows:
        found = provisional.select([*columns, THROUGH]).to_pylist()
    for row in found:
        day = row["day"]
        if not start <= day < last:
            continue
        partial[day] = max(partial.get(day, row[THROUGH]), row[THROUGH])
        tenant = row["tenant"]
        if tenant in RESERVED_BUCKETS:
            continue
        daily[tenant][day] += Decimal(row["amount"])
        provisional_spent[tenant] += Decimal(row["amount"])
        if row["cost_center"]:
            seen_cost_centers[tenant] = row["cost_center"]
    # A day some cluster metered in full is a whole day; one only provisional figures have, the part covered.
    covered = sum(
        min(_DAY_S, (int(t.timestamp() * 1000) - day_bounds_ms(d)[0]) // 1000)
        for d, t in partial.items()
        if d not in metered
    )

    configured = {t.name: t for t in config.tenants}
    names = [t.name for t in config.tenants] + sorted(set(daily) - set(configured))
    days = sorted(metered | set(partial))
    complete = len(metered)
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
            # The spend is the invoice's figure (each line rounded once) plus today so far, where known.
            spent = (
                _money(running)
                if invoiced is None
                else _money(invoiced.get(name, Decimal(0)) + provisional_spent.get(name, Decimal(0)))
            )
            if not partial:
                forecast = _money(spent * days_in_period / len(days)) if days else Decimal(0)
            else:  # spend per metered second × the period's seconds: one division, exact to 12 places
                seconds = complete * _DAY_S + covered
                forecast = _money(spent * days_in_period * _DAY_S / seconds) if seconds else Decimal(0)
            budget = tenant.monthly_budget if tenant else None
            statuses.append(
                BudgetStatus(
                    tenant=name,
                    cost_center=(tenant.cost_center if tenant else None) or seen_cost_centers.get(name),
                    period=str(period),
                    budget=None if budget is None else Decimal(str(budget)),
                    spent=spent,
                    days_elapsed=complete,
                    days_in_period=days_in_period,
                    forecast=forecast,
                    cumulative=cumulative,
                    provisional_spent=_money(provisional_spent.get(name, Decimal(0))),
                    provisional_days=tuple(sorted(partial.items())),
                    provisional_seconds=covered,
                )
            )
    return statuses
