"""Read-side summaries of the warehouse: what the CLI prints (and the dashboard will show)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from gpumeter.billing.invoices import invoiced_by_tenant, line_sums_sql
from gpumeter.config import IDLE, UNALLOCATED
from gpumeter.storage.warehouse import Warehouse
from gpumeter.views.words import CATEGORY_WORDS

CATEGORIES = tuple(CATEGORY_WORDS)  # R11's categories, in the order the summary prints them
# A stored R11 category as it reads today: marts metered before `free` was named so (and closed months, which
# are frozen) say 'unallocated'. Every reader of stranded_capacity.category selects this, never the column.
CATEGORY_SQL = "case category when 'unallocated' then 'free' else category end"


@dataclass(frozen=True)
class TenantCharge:
    tenant: str
    cost_center: str | None
    gpu_hours: float
    used_gpu_hours: float
    amount: Decimal

    @property
    def efficiency(self) -> float | None:
        return self.used_gpu_hours / self.gpu_hours if self.gpu_hours else None


@dataclass(frozen=True)
class PoolSummary:
    first_day: date
    last_day: date
    days: int
    pool_cost: Decimal
    observed_gpu_hours: float
    unobserved_gpu_hours: float
    charges: list[TenantCharge]  # tenants first, then __unallocated__ and __idle__; amounts as invoiced
    capacity_hours: dict[str, float]  # R11 category -> GPU-hours

    @property
    def charged(self) -> Decimal:
        return sum((c.amount for c in self.charges), Decimal(0))

    @property
    def stranded_hours(self) -> float:
        return sum(v for k, v in self.capacity_hours.items() if k != "allocated_active")


def pool_summary(warehouse: Warehouse, first_day: date, last_day: date, minor_unit: int) -> PoolSummary:
    """The pool over the days: its cost, where capacity went, and each tenant's charges as its invoice says
    them (each line rounded once to `minor_unit` decimals, gpumeter.billing.invoices.invoiced_by_tenant)."""
    con = warehouse.connect()
    params = [first_day, last_day]
    pool_cost, observed, days = con.execute(
        "select coalesce(sum(pool_cost), 0), coalesce(sum(observed_gpu_seconds), 0) / 3600, count(distinct day) "
        "from pool_daily_cost where day between ? and ?",
        params,
    ).fetchone()
    unobserved = con.execute(
        "select coalesce(sum(unobserved_gpu_seconds), 0) / 3600 from data_quality where day between ? and ?",
        params,
    ).fetchone()[0]
    # Held and busy GPU-hours come from device_seconds: a tenant_daily_cost line's gpu_seconds is what that
    # line bills (busy hours on `usage` lines, none on `energy`), so summing lines would mix them under the
    # `used` and `hybrid` tariffs. __idle__ holds what no one held: observed minus held (R4, R9).
    lines = con.execute(line_sums_sql("day between ? and ?"), params).fetchall()
    invoiced = invoiced_by_tenant((line[1:] for line in lines), minor_unit)
    rows = con.execute(
        """
        with charges as (
            select tenant, any_value(cost_center) as cost_center
            from tenant_daily_cost where day between ? and ? group by tenant
        ),
        held as (
            select tenant, sum(gpu_seconds) / 3600 as gpu_hours, sum(busy_gpu_seconds) / 3600 as busy_hours
            from device_seconds where day between ? and ? group by tenant
        )
        select c.tenant, c.cost_center,
               case when c.tenant = ? then ? - (select coalesce(sum(gpu_hours), 0) from held)
                    else coalesce(h.gpu_hours, 0) end,
               coalesce(h.busy_hours, 0)
        from charges as c left join held as h on h.tenant = c.tenant
        order by case c.tenant when ? then 1 when ? then 2 else 0 end, c.tenant
        """,
        [*params, *params, IDLE, observed, UNALLOCATED, IDLE],
    ).fetchall()
    categories = dict(
        con.execute(
            f"select {CATEGORY_SQL}, sum(gpu_seconds) / 3600 from stranded_capacity where day between ? and ? "
            "group by 1",
            params,
        ).fetchall()
    )
    con.close()
    return PoolSummary(
        first_day,
        last_day,
        days,
        Decimal(pool_cost),
        float(observed),
        float(unobserved),
        [TenantCharge(t, cc, float(h), float(u), invoiced[t]) for t, cc, h, u in rows],
        {c: float(categories.get(c, 0.0)) for c in CATEGORIES},
    )
