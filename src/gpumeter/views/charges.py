"""What tenants are charged, scoped to who reads it: per tenant, day, month and GPU model, budgets, the
invoice's lines and status, and today so far (provisional figures beside the final ones). Money is the amount
the invoice says: each line rounded once, then summed (gpumeter.billing.invoices.invoiced_by_tenant)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from gpumeter.billing.budgets import BudgetStatus, budget_status
from gpumeter.billing.invoices import INVOICE_SCHEMA, LINE_COLUMNS, invoiced_by_tenant, line_sums_sql
from gpumeter.billing.periods import metered_days, status_of, stored_lines
from gpumeter.billing.status import Status, data_through
from gpumeter.config import IDLE, UNALLOCATED
from gpumeter.storage import paths, provisional
from gpumeter.storage.provisional import THROUGH
from gpumeter.views.filters import Filters, Where
from gpumeter.views.identity import Viewer
from gpumeter.views.session import Session, cached


class ChargeReads(Session):
    """The reads of tenant_daily_cost (and device_seconds beside it) and of the invoice lines."""

    # --- complete days: what the invoice says --------------------------------------------------
    def _invoiced(self, where: Where, by_period: bool = False) -> pl.DataFrame:
        """The amount each tenant's invoice says over the rows in `where` (gpumeter.billing.invoices.
        invoiced_by_tenant: every line rounded once, then summed), per period with `by_period`."""
        lines = self.con.sql(line_sums_sql(where.sql), params=where.params).fetchall()
        groups: dict[tuple[str, str], list[tuple[str, int | None, int | None, Decimal]]] = {}
        for period, tenant, units, per, amount in lines:
            groups.setdefault((period if by_period else "", tenant), []).append((tenant, units, per, amount))
        minor = self._config.minor_unit
        rows = [(p, t, invoiced_by_tenant(found, minor)[t]) for (p, t), found in groups.items()]
        schema = {"period": pl.String, "tenant": pl.String, "amount": pl.Decimal(38, minor)}
        frame = pl.DataFrame(rows, schema=schema, orient="row")
        return frame if by_period else frame.drop("period")

    @staticmethod
    def _in_charge_order(frame: pl.DataFrame) -> pl.DataFrame:
        """Tenants by amount, largest first, then unmapped workloads and idle capacity."""
        bucket = pl.col("tenant").replace_strict({UNALLOCATED: 1, IDLE: 2}, default=0, return_dtype=pl.Int8)
        return frame.sort([bucket, pl.col("amount"), pl.col("tenant")], descending=[False, True, False])

    def data_through(self, filters: Filters) -> str:
        """How far the period's figures go, in words (gpumeter.billing.status.data_through)."""
        return data_through(filters.period, metered_days(self.warehouse, str(filters.period)))

    def tenant_charges(self, viewer: Viewer, filters: Filters, so_far: bool = False) -> pl.DataFrame:
        """Per tenant over the period: GPU-hours held and used, efficiency (R10) and the charge (R9), the
        amount its invoice says (each line rounded once, R12). With `so_far`, the month to date: today's
        provisional figures too (`_month_to_date`)."""
        return self._month_to_date(viewer, filters) if so_far else self._tenant_charges(viewer, filters)

    @cached("tenant_daily_cost")
    def _tenant_charges(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        where = self._where(viewer, filters)
        sql = f"""
            select tenant, any_value(cost_center) as cost_center,
                   sum(gpu_seconds) / 3600 as gpu_hours,
                   sum(busy_gpu_seconds) / 3600 as used_gpu_hours,
                   case when sum(gpu_seconds) > 0 then sum(busy_gpu_seconds) / sum(gpu_seconds) end
                       as efficiency
            from tenant_daily_cost where {where.sql}
            group by tenant
        """
        hours = self._frame(sql, where.params, ("tenant_daily_cost",))
        if hours.is_empty():
            return hours
        return self._in_charge_order(hours.join(self._invoiced(where), on="tenant", how="left"))

    def daily_charges(self, viewer: Viewer, filters: Filters, so_far: bool = False) -> pl.DataFrame:
        """Per day and tenant: the charge and GPU-hours held and used. With `so_far`, today's provisional
        figures too, every row marked (`_daily_charges_so_far`)."""
        return self._daily_charges_so_far(viewer, filters) if so_far else self._daily_charges(viewer, filters)

    @cached("tenant_daily_cost")
    def _daily_charges(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        where = self._where(viewer, filters)
        sql = f"""
            select day, tenant, sum(amount) as amount, sum(gpu_seconds) / 3600 as gpu_hours,
                   sum(busy_gpu_seconds) / 3600 as used_gpu_hours
            from tenant_daily_cost where {where.sql}
            group by day, tenant order by day, tenant
        """
        return self._frame(sql, where.params, ("tenant_daily_cost",))

    @cached("tenant_daily_cost")
    def monthly_charges(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """Every stored period (the period filter does not apply: this is the history), each tenant's month
        as its invoice says."""
        where = self._where(viewer, filters, day_col=None)
        if "tenant_daily_cost" not in self.tables:
            return pl.DataFrame()
        return self._invoiced(where, by_period=True).sort(["period", "tenant"])

    @cached("device_seconds", "tenant_daily_cost")
    def usage_by_model(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """Held and used hours from device_seconds (what a tenant held, whatever the tariff bills), beside
        the time charges (`reserved` and `usage` lines, R9/R10) of the same model and profile."""
        where = self._where(viewer, filters)  # both tables have the same scope columns
        sql = f"""
            with held as (
                select tenant, gpu_model, coalesce(mig_profile, 'whole GPU') as mig_profile,
                       sum(device_seconds) / 3600 as device_hours, sum(gpu_seconds) / 3600 as gpu_hours,
                       sum(busy_gpu_seconds) / 3600 as used_gpu_hours
                from device_seconds where {where.sql} group by all
            ),
            charged as (
                select tenant, gpu_model, coalesce(mig_profile, 'whole GPU') as mig_profile, sum(amount) as amount
                from tenant_daily_cost
                where {where.sql} and charge_type in ('reserved', 'usage')
                group by all
            )
            select h.tenant, h.gpu_model, h.mig_profile, h.device_hours, h.gpu_hours, h.used_gpu_hours,
                   case when h.gpu_hours > 0 then h.used_gpu_hours / h.gpu_hours end as efficiency,
                   coalesce(c.amount, 0) as amount
            from held as h
            left join charged as c using (tenant, gpu_model, mig_profile)
            order by h.tenant, h.gpu_model, h.mig_profile
        """
        return self._frame(sql, [*where.params, *where.params], ("device_seconds", "tenant_daily_cost"))

    @cached("tenant_daily_cost")
    def tenant_daily_cost(self, viewer: Viewer, filters: Filters) -> pa.Table:
        """The mart's rows in scope, for budgets (gpumeter/billing/budgets.py)."""
        where = self._where(viewer, filters)
        if "tenant_daily_cost" not in self.tables:
            return pa.table({"day": pa.array([], pa.date32())})
        sql = f"select * from tenant_daily_cost where {where.sql}"
        return self.con.sql(sql, params=where.params).to_arrow_table()

    def budgets(self, viewer: Viewer, filters: Filters, so_far: bool = False) -> list[BudgetStatus]:
        """Budget positions of the tenants in scope (`_budgets`). With `so_far`, today's provisional figures
        counted too (`_budgets_so_far`)."""
        return self._budgets_so_far(viewer, filters) if so_far else self._budgets(viewer, filters)

    @cached("tenant_daily_cost")
    def _budgets(self, viewer: Viewer, filters: Filters) -> list[BudgetStatus]:
        """Budget positions (gpumeter/billing/budgets.py) of the tenants in scope: a tenant viewer's hold its
        own tenant only, whatever the config lists; finance's hold the tenants its tenant filter picks (all
        when none is picked). The budgets and cost centers come from the viewer's config (`config_for`).

        A metered day counts for every tenant alike (budgets.py): the days come from the whole pool under
        the cluster and GPU model filters, so that a tenant's forecast is the same whoever reads it. They
        reach `budget_status` as zero-amount `__idle__` rows, which count the day and are no one's spend."""
        if "tenant_daily_cost" not in self.tables:
            return []
        columns = ["day", "tenant", "cost_center", "amount", *LINE_COLUMNS]  # the lines: spent as invoiced
        rows = self.tenant_daily_cost(viewer, filters).select(columns)
        where = self._pool_where(filters, model_col="gpu_model")
        days = [
            r[0]
            for r in self.con.execute(
                f"select distinct day from tenant_daily_cost where {where.sql} order by day", where.params
            ).fetchall()
        ]
        if not days:
            return []
        markers = pa.table(
            {
                "day": days,
                "tenant": [IDLE] * len(days),
                "cost_center": [None] * len(days),
                "amount": [Decimal(0)] * len(days),
                **{c: [None] * len(days) for c in LINE_COLUMNS},
            },
            schema=rows.schema,
        )
        statuses = budget_status(pa.concat_tables([rows, markers]), self.config_for(viewer), filters.period)
        return [s for s in statuses if not filters.tenants or s.tenant in filters.tenants]

    @cached(periods=True)
    def invoice_lines(self, viewer: Viewer, filters: Filters) -> pa.Table:
        """The period's lines of record (R14; the closed copy once the period is closed, R16), in scope.
        Cluster does not apply: lines are per pool."""
        stored = stored_lines(self.warehouse, str(filters.period))
        if stored is None:
            return INVOICE_SCHEMA.empty_table()
        where = self._where(viewer, filters, day_col=None, cluster_col=None)
        # Scoped in SQL like every other view; the row number keeps the invoice's line order.
        self.con.register(
            "lines_of_record", stored.append_column("line_no", pa.array(range(stored.num_rows)))
        )
        try:
            sql = f"select * exclude (line_no) from lines_of_record where {where.sql} order by line_no"
            return self.con.sql(sql, params=where.params).to_arrow_table().cast(INVOICE_SCHEMA)
        finally:
            self.con.unregister("lines_of_record")

    @cached(periods=True)
    def invoice_status(self, filters: Filters) -> Status | None:
        """Closed (with its content hash) or draft: the same for every viewer, it names no tenant."""
        stored = stored_lines(self.warehouse, str(filters.period))
        if stored is None:
            return None
        return status_of(self.warehouse, str(filters.period), stored, self._config.minor_unit)

    # --- today so far: provisional figures ------------------------------------------------------
    # The day being metered, up to its last full hour (gpumeter.storage.provisional): read beside the final
    # marts, every row marked `provisional` with the `through` it stands for. Never part of an invoice.
    def _with_provisional(
        self, filters: Filters, sql: Callable[[str], str], params: list[Any]
    ) -> pa.Table | None:
        """The result of `sql(source)`, where `source` is tenant_daily_cost's final rows and the period's
        provisional ones, each marked `provisional`, with `through` (null on final rows); None when neither
        is stored."""
        rows = provisional.read_days(self.warehouse, paths.TENANT_DAILY_COST, filters.period.days())
        parts = []
        if "tenant_daily_cost" in self.tables:
            parts.append(
                "select *, false as provisional, null::timestamptz as through from tenant_daily_cost"
            )
        if rows is not None:
            parts.append(
                f"select * exclude ({THROUGH}), true as provisional, {THROUGH} as through "
                "from provisional_tenant_daily_cost"
            )
            self.con.register("provisional_tenant_daily_cost", rows)
        try:
            if not parts:
                return None
            return self.con.sql(sql(" union all by name ".join(parts)), params=params).to_arrow_table()
        finally:
            if rows is not None:
                self.con.unregister("provisional_tenant_daily_cost")

    def provisional_days(self, viewer: Viewer, filters: Filters) -> list[ProvisionalDay]:
        """The days of the period with provisional figures (under the cluster filter), each with the moment it
        is metered up to: what the pages name ("through 14:00 UTC, provisional"). The same for every viewer:
        it names no tenant."""
        where = self._pool_where(filters)

        def sql(source: str) -> str:
            return (
                f"select distinct day, through from ({source}) where provisional and {where.sql} order by all"
            )

        def read() -> list[ProvisionalDay]:
            found = self._with_provisional(filters, sql, where.params)
            return [] if found is None else [ProvisionalDay(**r) for r in found.to_pylist()]

        return self._so_far("provisional_days", None, filters, read)

    def provisional_periods(self) -> list[str]:
        """The months with provisional figures, latest first (a month's first day has no final one yet)."""
        found = provisional.days(self.warehouse, paths.TENANT_DAILY_COST)
        return sorted({f"{day:%Y-%m}" for _, day in found}, reverse=True)

    def _daily_charges_so_far(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """`daily_charges` with today's provisional figures: per day, tenant and `provisional` (true on the
        rows of a day metered so far, with its `through`)."""
        where = self._where(viewer, filters)

        def sql(source: str) -> str:
            return f"""
                select day, tenant, provisional, max(through) as through, sum(amount) as amount,
                       sum(gpu_seconds) / 3600 as gpu_hours, sum(busy_gpu_seconds) / 3600 as used_gpu_hours
                from ({source}) where {where.sql}
                group by day, tenant, provisional order by day, tenant, provisional
            """

        return self._so_far(
            "daily_charges_so_far",
            viewer,
            filters,
            lambda: _polars(self._with_provisional(filters, sql, where.params)),
        )

    def _month_to_date(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """`tenant_charges` up to now: per tenant, the complete days' amount (what the draft invoice says),
        the provisional part of today so far (`provisional_amount`, its lines rounded as an invoice's, with
        its `through`) and their sum (`amount`); GPU-hours of both."""
        where = self._where(viewer, filters)

        def sql(source: str) -> str:
            return f"""
                select tenant, any_value(cost_center) as cost_center,
                       sum(gpu_seconds) / 3600 as gpu_hours,
                       sum(busy_gpu_seconds) / 3600 as used_gpu_hours,
                       case when sum(gpu_seconds) > 0 then sum(busy_gpu_seconds) / sum(gpu_seconds) end
                           as efficiency,
                       max(through) as through
                from ({source}) where {where.sql}
                group by tenant
            """

        def provisional_lines(source: str) -> str:
            return line_sums_sql(f"provisional and {where.sql}", source=f"({source})")

        def read() -> pl.DataFrame:
            hours = _polars(self._with_provisional(filters, sql, where.params))
            if hours.is_empty():
                return hours
            minor = self._config.minor_unit
            lines = self._with_provisional(filters, provisional_lines, where.params)
            rows = lines.to_pylist() if lines is not None else []
            today = invoiced_by_tenant(
                ((r["tenant"], r["units"], r["per"], r["amount"]) for r in rows), minor
            )
            complete = dict(self._invoiced(where).iter_rows()) if "tenant_daily_cost" in self.tables else {}
            money = pl.Decimal(38, minor)
            zero = Decimal(0)
            amounts = pl.DataFrame(
                [
                    (t, complete.get(t, zero), today.get(t, zero), complete.get(t, zero) + today.get(t, zero))
                    for t in hours["tenant"]
                ],
                schema={
                    "tenant": pl.String,
                    "complete_days_amount": money,
                    "provisional_amount": money,
                    "amount": money,
                },
                orient="row",
            )
            frame = hours.join(amounts, on="tenant", how="left")
            order = ["tenant", "cost_center", "gpu_hours", "used_gpu_hours", "efficiency"]
            frame = frame.select(*order, "complete_days_amount", "provisional_amount", "amount", "through")
            return self._in_charge_order(frame)

        return self._so_far("month_to_date", viewer, filters, read)

    def _budgets_so_far(self, viewer: Viewer, filters: Filters) -> list[BudgetStatus]:
        """`budgets` with today's provisional figures counted (gpumeter/billing/budgets.py): their spend is
        spent, and their day counts as the part of it they cover. Days count pool-wide, as in `budgets`."""
        if not self.provisional_days(viewer, filters):
            return self._budgets(viewer, filters)
        scope, pool = self._where(viewer, filters), self._pool_where(filters, model_col="gpu_model")

        def sql(source: str) -> str:
            # The viewer's rows, and a zero-amount __idle__ row per metered day of the pool (final or
            # provisional): a day counts for every tenant alike, whoever reads it.
            return f"""
                select day, tenant, cost_center, amount, provisional, through from ({source}) where {scope.sql}
                union all
                select distinct day, '{IDLE}', null::varchar, 0::decimal(38, 12), provisional, through
                from ({source}) where {pool.sql}
            """

        def read() -> list[BudgetStatus]:
            found = self._with_provisional(filters, sql, [*scope.params, *pool.params])
            assert found is not None  # there are provisional days
            marked = found.column("provisional")
            table = found.select(_SO_FAR_SCHEMA.names).cast(_SO_FAR_SCHEMA)
            statuses = budget_status(
                table.filter(pc.invert(marked)).drop_columns([THROUGH]),
                self.config_for(viewer),
                filters.period,
                provisional=table.filter(marked),
            )
            return [s for s in statuses if not filters.tenants or s.tenant in filters.tenants]

        return self._so_far("budgets_so_far", viewer, filters, read)


# Rows of final and provisional figures as budgets read them (gpumeter/billing/budgets.py).
_SO_FAR_SCHEMA = pa.schema(
    [
        ("day", pa.date32()),
        ("tenant", pa.string()),
        ("cost_center", pa.string()),
        ("amount", pa.decimal128(38, 12)),
        (THROUGH, pa.timestamp("us", tz="UTC")),
    ]
)


@dataclass(frozen=True)
class ProvisionalDay:
    """A day shown with provisional figures, and the moment (UTC) they are metered up to."""

    day: date
    through: datetime


def provisional_label(days: list[ProvisionalDay]) -> str:
    """How pages and the CLI name provisional figures: `through 14:00 UTC, provisional` (with the day when it
    is not the only one: `16 November through 23:00 UTC, 17 November through 14:00 UTC, provisional`)."""
    if not days:
        return ""
    if len(days) == 1:
        return f"through {days[0].through.astimezone(UTC):%H:%M} UTC, provisional"
    parts = [f"{d.day.day} {d.day:%B} through {d.through.astimezone(UTC):%H:%M} UTC" for d in days]
    return ", ".join(parts) + ", provisional"


def _polars(table: pa.Table | None) -> pl.DataFrame:
    if table is None:
        return pl.DataFrame()
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame
