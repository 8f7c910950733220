"""What the dashboard reads, scoped to who reads it. Every query takes a `Viewer` and adds the viewer's
tenant scope itself, in SQL with bound parameters: a page cannot widen it, and no filter value is ever
spliced into SQL text. Pool-level views (capacity, MIG layout, data quality) are refused to tenant viewers.

What comes from the config is scoped the same way: `config_for(viewer)` is the config a viewer may read (a
tenant viewer's holds its own tenant only: no other tenant's name, cost center, budget, namespaces or Kueue
queues, and no role mappings), and every view that reads the config (budgets) reads that one.

Reads go through `Warehouse.connect()` (in-memory DuckDB views over the Parquet files), so the dashboard never
holds a lock the pipeline needs; a day the pipeline is rewriting is read as the old or the new file (atomic
renames), never half of one.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any, Literal

import polars as pl
import pyarrow as pa

from gpumeter.billing.budgets import BudgetStatus, budget_status
from gpumeter.billing.invoices import INVOICE_SCHEMA, Period, csv_text, neutralize
from gpumeter.billing.periods import status_of, stored_lines
from gpumeter.billing.status import Status
from gpumeter.config import IDLE, UNALLOCATED, Config
from gpumeter.storage.warehouse import Warehouse

Role = Literal["finance", "ops", "tenant"]
ROLES: tuple[Role, ...] = ("finance", "ops", "tenant")
VIEWER_ENV = "GPUMETER_DASHBOARD_VIEWER"


class AccessDenied(PermissionError):
    """The viewer's role may not read this view."""


class ViewerError(ValueError):
    """A viewer setting that names no role or no configured tenant."""


@dataclass(frozen=True)
class Viewer:
    """Who is reading: finance and ops see every tenant; a tenant viewer sees its own tenant's rows only."""

    role: Role
    tenant: str | None = None
    identity: str = "local"

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ViewerError(f"unknown dashboard role {self.role!r}: use finance, ops or tenant")
        if self.role == "tenant" and not self.tenant:
            raise ViewerError("a tenant viewer needs its tenant")

    @property
    def sees_all_tenants(self) -> bool:
        return self.role != "tenant"

    @property
    def label(self) -> str:
        return f"tenant {self.tenant}" if self.role == "tenant" else self.role


def viewer_for_identity(
    config: Config, email: str | None, groups: object, identity: str = ""
) -> Viewer | None:
    """The first `dashboard.roles` rule (file order) that the identity's email or groups match; None if no
    rule does (such a user sees nothing)."""
    group_set = {str(g) for g in groups} if isinstance(groups, list | tuple | set) else set()
    if isinstance(groups, str):
        group_set = {groups}
    mail = (email or "").strip().lower()
    for rule in config.dashboard.roles:
        by_mail = bool(mail) and any(fnmatch.fnmatchcase(mail, pattern.lower()) for pattern in rule.emails)
        if by_mail or group_set.intersection(rule.groups):
            return Viewer(rule.role, rule.tenant, identity or mail or "oidc user")
    return None


def local_viewer(config: Config, setting: str | None = None) -> Viewer:
    """Local mode (no login configured): finance, unless GPUMETER_DASHBOARD_VIEWER says `ops` or
    `tenant:<name>`."""
    text = (os.environ.get(VIEWER_ENV, "") if setting is None else setting).strip()
    if not text or text == "finance":
        return Viewer("finance", identity="local mode")
    if text == "ops":
        return Viewer("ops", identity="local mode")
    if text.startswith("tenant:"):
        tenant = text.removeprefix("tenant:").strip()
        if tenant not in {t.name for t in config.tenants}:
            # The message is shown on the page, to whoever opens it: it names no configured tenant.
            raise ViewerError(
                f"{VIEWER_ENV}={text!r}: no tenant {tenant!r} in the config; use the name of one of the "
                "config's `tenants`"
            )
        return Viewer("tenant", tenant, identity="local mode")
    raise ViewerError(f"{VIEWER_ENV}={text!r}: use finance, ops or tenant:<name>")


def config_for(config: Config, viewer: Viewer) -> Config:
    """The config as `viewer` may read it. Finance and ops: all of it. A tenant viewer: its own tenant only
    (name, cost center, budget, namespaces, Kueue queues), and no role mappings (who else may sign in, and
    as what, is not a tenant's to read). Prices, currency and pool name are the same for everyone."""
    if viewer.sees_all_tenants:
        return config
    own = [t for t in config.tenants if t.name == viewer.tenant]
    return config.model_copy(
        update={"tenants": own, "dashboard": config.dashboard.model_copy(update={"roles": []})}
    )


@dataclass(frozen=True)
class Filters:
    """What the reader picked. Empty tuples mean "all" (within the viewer's scope)."""

    period: Period
    clusters: tuple[str, ...] = ()
    tenants: tuple[str, ...] = ()
    gpu_models: tuple[str, ...] = ()


@dataclass(frozen=True)
class Options:
    periods: list[str]
    clusters: list[str]
    tenants: list[str]
    gpu_models: list[str]


@dataclass
class _Where:
    """A WHERE clause built from fixed SQL fragments and bound parameters only."""

    parts: list[str] = field(default_factory=list)
    params: list[Any] = field(default_factory=list)

    def add(self, sql: str, *params: Any) -> None:
        self.parts.append(sql)
        self.params.extend(params)

    @property
    def sql(self) -> str:
        return " and ".join(self.parts) if self.parts else "true"


class Views:
    """Scoped reads of one warehouse. One DuckDB session per instance; cheap to make per page render."""

    def __init__(self, warehouse: Warehouse, config: Config):
        self._config = config  # all of it: pages get `config_for(viewer)`
        self.warehouse = warehouse
        self.con = warehouse.connect()
        self.con.execute("set TimeZone = 'UTC'")  # days and hours are UTC (R2)
        self.tables = {row[0] for row in self.con.execute("select view_name from duckdb_views()").fetchall()}

    def close(self) -> None:
        self.con.close()

    def config_for(self, viewer: Viewer) -> Config:
        """The config as `viewer` may read it (module function `config_for`): what the pages get."""
        return config_for(self._config, viewer)

    # --- plumbing ------------------------------------------------------------------------------
    def _frame(self, sql: str, params: list[Any], needs: tuple[str, ...]) -> pl.DataFrame:
        if not set(needs) <= self.tables:  # nothing metered yet: an empty view, not an error
            return pl.DataFrame()
        return self.con.sql(sql, params=params).pl()

    @staticmethod
    def _require_all(viewer: Viewer, what: str) -> None:
        if not viewer.sees_all_tenants:
            raise AccessDenied(f"{what} is pool-wide; a tenant viewer sees only its own tenant's views")

    def _where(
        self,
        viewer: Viewer,
        filters: Filters,
        *,
        tenant_col: str | None = "tenant",
        day_col: str | None = "day",
        model_col: str | None = "gpu_model",
        cluster_col: str | None = "cluster",
    ) -> _Where:
        where = _Where()
        if tenant_col is not None and viewer.role == "tenant":
            where.add(f"{tenant_col} = ?", viewer.tenant)  # the viewer's scope, whatever the filters say
        if tenant_col is None and viewer.role == "tenant":
            raise AccessDenied("this view has no tenant column; a tenant viewer cannot read it")
        if day_col is not None:
            where.add(f"{day_col} >= ? and {day_col} < ?", filters.period.start, filters.period.end)
        for column, values in (
            (cluster_col, filters.clusters),
            (tenant_col, filters.tenants),
            (model_col, filters.gpu_models),
        ):
            if column is not None and values:
                where.add(f"list_contains(?::varchar[], {column})", list(values))
        return where

    # --- filter choices ------------------------------------------------------------------------
    def options(self, viewer: Viewer) -> Options:
        scope = _Where()
        if viewer.role == "tenant":
            scope.add("tenant = ?", viewer.tenant)
        if "tenant_daily_cost" not in self.tables:
            return Options([], [], [viewer.tenant] if viewer.tenant else [], [])

        def distinct(expr: str) -> list[str]:
            sql = f"select distinct {expr} as v from tenant_daily_cost where {scope.sql} and v is not null order by v desc"
            return [r[0] for r in self.con.execute(sql, scope.params).fetchall()]

        periods = distinct("strftime(day, '%Y-%m')")
        clusters = sorted(distinct("cluster"))
        models = sorted(distinct("gpu_model"))
        if viewer.role == "tenant":
            tenants = [viewer.tenant or ""]
        else:
            found = set(distinct("tenant"))
            configured = [t.name for t in self._config.tenants]
            tenants = configured + sorted(found - set(configured) - {IDLE, UNALLOCATED})
            tenants += [b for b in (UNALLOCATED, IDLE) if b in found]
        return Options(periods, clusters, tenants, models)

    # --- finance -------------------------------------------------------------------------------
    def tenant_charges(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """Per tenant over the period: GPU-hours held and used, efficiency (R10) and the charge (R9)."""
        where = self._where(viewer, filters)
        sql = f"""
            select tenant, any_value(cost_center) as cost_center,
                   sum(gpu_seconds) / 3600 as gpu_hours,
                   sum(busy_gpu_seconds) / 3600 as used_gpu_hours,
                   case when sum(gpu_seconds) > 0 then sum(busy_gpu_seconds) / sum(gpu_seconds) end
                       as efficiency,
                   sum(amount) as amount
            from tenant_daily_cost where {where.sql}
            group by tenant
            order by case tenant when '{UNALLOCATED}' then 1 when '{IDLE}' then 2 else 0 end, amount desc, tenant
        """
        return self._frame(sql, where.params, ("tenant_daily_cost",))

    def daily_charges(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        where = self._where(viewer, filters)
        sql = f"""
            select day, tenant, sum(amount) as amount, sum(gpu_seconds) / 3600 as gpu_hours,
                   sum(busy_gpu_seconds) / 3600 as used_gpu_hours
            from tenant_daily_cost where {where.sql}
            group by day, tenant order by day, tenant
        """
        return self._frame(sql, where.params, ("tenant_daily_cost",))

    def monthly_charges(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """Every stored period (the period filter does not apply: this is the history)."""
        where = self._where(viewer, filters, day_col=None)
        sql = f"""
            select strftime(day, '%Y-%m') as period, tenant, sum(amount) as amount
            from tenant_daily_cost where {where.sql}
            group by all order by period, tenant
        """
        return self._frame(sql, where.params, ("tenant_daily_cost",))

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

    def tenant_daily_cost(self, viewer: Viewer, filters: Filters) -> pa.Table:
        """The mart's rows in scope, for budgets (gpumeter/billing/budgets.py)."""
        where = self._where(viewer, filters)
        if "tenant_daily_cost" not in self.tables:
            return pa.table({"day": pa.array([], pa.date32())})
        sql = f"select * from tenant_daily_cost where {where.sql}"
        return self.con.sql(sql, params=where.params).to_arrow_table()

    def budgets(self, viewer: Viewer, filters: Filters) -> list[BudgetStatus]:
        """Budget positions (gpumeter/billing/budgets.py) of the tenants in scope: a tenant viewer's hold its
        own tenant only, whatever the config lists; finance's hold the tenants its tenant filter picks (all
        when none is picked). The budgets and cost centers come from the viewer's config (`config_for`).

        A metered day counts for every tenant alike (budgets.py): the days come from the whole pool under
        the cluster and GPU model filters, so that a tenant's forecast is the same whoever reads it. They
        reach `budget_status` as zero-amount `__idle__` rows, which count the day and are no one's spend."""
        if "tenant_daily_cost" not in self.tables:
            return []
        columns = ["day", "tenant", "cost_center", "amount"]
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
            },
            schema=rows.schema,
        )
        statuses = budget_status(pa.concat_tables([rows, markers]), self.config_for(viewer), filters.period)
        return [s for s in statuses if not filters.tenants or s.tenant in filters.tenants]

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

    def invoice_status(self, filters: Filters) -> Status | None:
        """Closed (with its content hash) or draft: the same for every viewer, it names no tenant."""
        stored = stored_lines(self.warehouse, str(filters.period))
        if stored is None:
            return None
        return status_of(self.warehouse, str(filters.period), stored, self._config.minor_unit)

    # --- platform ops --------------------------------------------------------------------------
    def gpu_hourly_heatmap(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """Per GPU and UTC hour: allocated share (held GPU-seconds ÷ observed) and busy share (R10, R11)."""
        self._require_all(viewer, "the utilization heatmap")
        where = self._pool_where(filters, model_col="gpu_model", by_ts_ms=True)
        sql = f"""
            select cluster, node, uuid, any_value(gpu_model) as gpu_model,
                   time_bucket(interval 1 hour, make_timestamp(ts_ms * 1000)) as hour,
                   coalesce(sum(gpu_seconds) filter (where is_held), 0) / (count(distinct ts_ms) * ?)
                       as allocated,
                   sum(gpu_seconds * coalesce(busy, 0)) / (count(distinct ts_ms) * ?) as busy
            from int_device_categories where {where.sql}
            group by cluster, node, uuid, hour order by node, uuid, hour
        """
        delta = self._config.scrape_interval_seconds
        return self._frame(sql, [delta, delta, *where.params], ("int_device_categories",))

    def stranded_capacity(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """GPU-hours per node and R11 category; `is_stranded` for every category but allocated_active."""
        self._require_all(viewer, "stranded capacity")
        where = self._pool_where(filters)
        sql = f"""
            select cluster, node, category, bool_or(is_stranded) as is_stranded,
                   sum(gpu_seconds) / 3600 as gpu_hours
            from stranded_capacity where {where.sql}
            group by all order by cluster, node, category
        """
        return self._frame(sql, where.params, ("stranded_capacity",))

    def mig_layout(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """Per MIG GPU and instance: average compute slices (of 7) held-busy, held-idle, free and
        unpartitioned over the observed time (slice-seconds ÷ observed seconds)."""
        self._require_all(viewer, "the MIG layout")
        where = self._pool_where(filters, model_col="gpu_model")
        joined = self._pool_where(filters, model_col="m.gpu_model", prefix="m.")
        sql = f"""
            with per_gpu as (
                select cluster, node, uuid, max(observed_seconds) as gpu_observed_seconds
                from mig_slice_usage where {where.sql} group by all
            )
            select m.cluster, m.node, m.uuid, any_value(m.gpu_model) as gpu_model,
                   coalesce(m.gpu_i_id, '-') as gpu_i_id, m.mig_profile,
                   sum(m.busy_slice_seconds) / any_value(p.gpu_observed_seconds) as busy_slices,
                   (sum(m.held_slice_seconds) - sum(m.busy_slice_seconds)) / any_value(p.gpu_observed_seconds)
                       as held_idle_slices,
                   sum(m.free_slice_seconds) / any_value(p.gpu_observed_seconds) as free_slices,
                   sum(m.unpartitioned_slice_seconds) / any_value(p.gpu_observed_seconds) as unpartitioned_slices,
                   sum(m.held_slice_seconds) / 3600 as held_slice_hours,
                   sum(m.busy_slice_seconds) / 3600 as busy_slice_hours,
                   sum(m.free_slice_seconds) / 3600 as free_slice_hours,
                   sum(m.unpartitioned_slice_seconds) / 3600 as unpartitioned_slice_hours
            from mig_slice_usage as m
            join per_gpu as p using (cluster, node, uuid)
            where {joined.sql}
            group by m.cluster, m.node, m.uuid, m.gpu_i_id, m.mig_profile
            order by m.node, m.uuid, m.mig_profile = 'unpartitioned', m.gpu_i_id
        """
        return self._frame(sql, [*where.params, *joined.params], ("mig_slice_usage",))

    @staticmethod
    def _pool_where(
        filters: Filters, model_col: str | None = None, prefix: str = "", by_ts_ms: bool = False
    ) -> _Where:
        """Period, cluster and model filters of a pool-wide table (no tenant column)."""
        where = _Where()
        if by_ts_ms:
            where.add(
                f"{prefix}ts_ms >= ? and {prefix}ts_ms < ?",
                _epoch_ms(filters.period.start),
                _epoch_ms(filters.period.end),
            )
        else:
            where.add(f"{prefix}day >= ? and {prefix}day < ?", filters.period.start, filters.period.end)
        if filters.clusters:
            where.add(f"list_contains(?::varchar[], {prefix}cluster)", list(filters.clusters))
        if model_col and filters.gpu_models:
            where.add(f"list_contains(?::varchar[], {model_col})", list(filters.gpu_models))
        return where

    def idle_holders(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """Holders ranked by what their allocated-idle samples cost (R11 allocated_idle, charged per R9)."""
        where = self._where(
            viewer,
            filters,
            day_col="t.day",
            cluster_col="c.cluster",
            model_col="c.gpu_model",
            tenant_col="t.tenant",
        )
        where.add(
            "c.ts_ms >= ? and c.ts_ms < ?", _epoch_ms(filters.period.start), _epoch_ms(filters.period.end)
        )
        sql = f"""
            with tenants as (
                select distinct cluster, day, device_id, namespace, pod, tenant from device_seconds
            )
            select c.cluster, t.tenant, h.namespace, h.pod, c.gpu_model,
                   coalesce(c.mig_profile, 'whole GPU') as mig_profile,
                   sum(cast(c.gpu_seconds * h.share as decimal(38, 12))) / 3600 as idle_gpu_hours,
                   sum(cast(? / 3600.0 * s.device_price_per_hour * h.share as decimal(38, 12))) as idle_cost
            from int_device_categories as c
            join int_device_holders as h on h.device_id = c.device_id and h.ts_ms = c.ts_ms
            join int_device_samples as s on s.device_id = c.device_id and s.ts_ms = c.ts_ms
            join tenants as t on t.cluster = c.cluster and t.device_id = c.device_id
                and t.namespace = h.namespace and t.pod = h.pod
                and t.day = cast(make_timestamp(c.ts_ms * 1000) as date)
            where c.category = 'allocated_idle' and {where.sql}
            group by all order by idle_cost desc, t.tenant, h.namespace, h.pod
        """
        return self._frame(
            sql,
            [self._config.scrape_interval_seconds, *where.params],
            ("int_device_categories", "int_device_holders", "int_device_samples", "device_seconds"),
        )

    def whole_gpu_holders(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """Whole-GPU holders with their peaks, the input of MIG right-sizing (gpumeter/views/rightsizing.py)."""
        where = self._where(viewer, filters)
        sql = f"""
            select cluster, node, uuid, model_name, gpu_model, tenant, namespace, pod,
                   sum(gpu_seconds) / 3600 as held_gpu_hours,
                   sum(busy_gpu_seconds) / 3600 as used_gpu_hours,
                   max(peak_fb_used_mib) as peak_fb_used_mib, max(peak_busy) as peak_busy,
                   sum(reserved_cost) as reserved_cost
            from device_seconds where {where.sql} and mig_profile is null
            group by all order by reserved_cost desc
        """
        return self._frame(sql, where.params, ("device_seconds",))

    def metered_days(self, viewer: Viewer, filters: Filters) -> list[date]:
        where = self._where(
            viewer, filters, tenant_col=None if viewer.sees_all_tenants else "tenant", model_col=None
        )
        if "tenant_daily_cost" not in self.tables:
            return []
        rows = self.con.execute(
            f"select distinct day from tenant_daily_cost where {where.sql} order by day", where.params
        ).fetchall()
        return [r[0] for r in rows]

    # --- data quality --------------------------------------------------------------------------
    def data_quality(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """Per cluster and node: coverage (observed ÷ expected GPU-seconds, R4), unobserved GPU-hours,
        unmapped namespaces (R7), and every quarantine column the mart has (`*quarantin*`), summed."""
        self._require_all(viewer, "data quality")
        where = self._pool_where(filters)
        if "data_quality" not in self.tables:
            return pl.DataFrame()
        columns = self.con.execute("describe data_quality").fetchall()
        quarantine = [(name, type_) for name, type_, *_ in columns if "quarantin" in name.lower()]
        # Numbers add up over days; text (e.g. a JSON breakdown by reason) is listed per node, empty ones left out.
        extra = "".join(
            f', sum("{name}") as "{name}"' if _numeric(type_) else _text_list(name)
            for name, type_ in quarantine
        )
        sql = f"""
            select cluster, node, count(distinct day) as days,
                   sum(observed_gpu_seconds) / 3600 as observed_gpu_hours,
                   sum(expected_gpu_seconds) / 3600 as expected_gpu_hours,
                   case when sum(expected_gpu_seconds) > 0
                        then sum(observed_gpu_seconds) / sum(expected_gpu_seconds) end as coverage,
                   sum(unobserved_gpu_seconds) / 3600 as unobserved_gpu_hours,
                   max(unmapped_namespaces) as unmapped_namespaces,
                   sum(unmapped_device_seconds) / 3600 as unmapped_device_hours{extra}
            from data_quality where {where.sql}
            group by cluster, node order by cluster, node
        """
        return self._frame(sql, where.params, ("data_quality",))

    def coverage_gaps(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """Days of the period up to the last metered one with no metered data, per cluster."""
        self._require_all(viewer, "coverage gaps")
        metered = self._frame(
            f"select distinct cluster, day from pool_daily_cost where {self._pool_where(filters).sql}",
            self._pool_where(filters).params,
            ("pool_daily_cost",),
        )
        clusters = list(filters.clusters) or [c.name for c in self._config.clusters]
        if metered.is_empty():
            return pl.DataFrame(
                {"cluster": [], "missing_day": []}, schema={"cluster": pl.Utf8, "missing_day": pl.Date}
            )
        last = max(metered["day"].to_list())
        seen = {(r["cluster"], r["day"]) for r in metered.iter_rows(named=True)}
        missing = [
            (cluster, day)
            for cluster in clusters
            for day in filters.period.days()
            if day <= last and (cluster, day) not in seen
        ]
        return pl.DataFrame(
            {"cluster": [m[0] for m in missing], "missing_day": [m[1] for m in missing]},
            schema={"cluster": pl.Utf8, "missing_day": pl.Date},
        )

    def unmapped_namespaces(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """Namespaces whose holders matched no tenant (R7): charged to __unallocated__."""
        self._require_all(viewer, "unmapped namespaces")
        where = self._pool_where(filters, model_col="gpu_model")
        sql = f"""
            select cluster, namespace, count(distinct pod) as pods,
                   sum(device_seconds) / 3600 as device_hours, sum(reserved_cost) as amount
            from device_seconds where {where.sql} and tenant = ?
            group by all order by amount desc
        """
        return self._frame(sql, [*where.params, UNALLOCATED], ("device_seconds",))


def _epoch_ms(day: date) -> int:
    return (day.toordinal() - date(1970, 1, 1).toordinal()) * 86_400_000


def _numeric(duckdb_type: str) -> bool:
    return duckdb_type.upper().split("(")[0] in {
        "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "DOUBLE", "FLOAT", "REAL", "DECIMAL",
        "UBIGINT", "UINTEGER", "USMALLINT", "UTINYINT",
    }  # fmt: skip


def _text_list(column: str) -> str:
    empty = "('', '{}')"
    return f', string_agg(distinct "{column}", \'; \') filter (where "{column}" not in {empty}) as "{column}"'


def frame_csv(frame: pl.DataFrame) -> str:
    """A table as CSV, every text cell neutralized against spreadsheet formula injection."""
    return csv_text(
        [neutralize(c) for c in frame.columns], ([_cell(v) for v in row] for row in frame.iter_rows())
    )


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float | int | bool | date):
        return str(value)
    return neutralize(str(value))


__all__ = [
    "AccessDenied",
    "Filters",
    "Options",
    "Viewer",
    "ViewerError",
    "Views",
    "config_for",
    "frame_csv",
    "local_viewer",
    "viewer_for_identity",
]
