"""What the dashboard reads, scoped to who reads it. Every query takes a `Viewer` and adds the viewer's
tenant scope itself, in SQL with bound parameters: a page cannot widen it, and no filter value is ever
spliced into SQL text. Pool-level views (capacity, MIG layout, data quality) are refused to tenant viewers.

What comes from the config is scoped the same way: `config_for(viewer)` is the config a viewer may read (a
tenant viewer's holds its own tenant only: no other tenant's name, cost center, budget, namespaces or Kueue
queues, and no role mappings), and every view that reads the config (budgets) reads that one.

Reads go through `Warehouse.connect()` (in-memory DuckDB views over the Parquet files), so the dashboard never
holds a lock the pipeline needs; a day the pipeline is rewriting is read as the old or the new file (atomic
renames), never half of one.

Reads are cached (gpumeter/views/cache.py) per viewer scope (role and tenant), read, arguments, config and data
version (every stored file the read depends on): a cached result is never handed to another scope, and a
re-metered day is read afresh. The capacity heatmap is drawn per GPU up to `HEATMAP_GPU_ROWS` GPUs, and per
group of GPUs (node, GPU model, ...) above it, aggregated here in DuckDB.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal, ParamSpec, TypeVar

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from gpumeter.billing.budgets import BudgetStatus, budget_status
from gpumeter.billing.invoices import (
    INVOICE_SCHEMA,
    LINE_COLUMNS,
    Period,
    csv_text,
    invoiced_by_tenant,
    line_sums_sql,
    neutralize,
)
from gpumeter.billing.periods import metered_days, status_of, stored_lines
from gpumeter.billing.status import Status, data_through
from gpumeter.config import IDLE, UNALLOCATED, Config
from gpumeter.ingest.contract import utc_today
from gpumeter.storage import paths, provisional
from gpumeter.storage.provisional import THROUGH
from gpumeter.storage.warehouse import Warehouse
from gpumeter.views.cache import READS, SESSIONS, ReadCache, files_version, stored_tables
from gpumeter.views.rightsizing import Advice, advise, holder_peaks
from gpumeter.views.summary import CATEGORY_SQL

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


# Above this many GPUs in scope the capacity heatmap draws one row per group of GPUs, not one per GPU.
HEATMAP_GPU_ROWS = 300
# How the heatmap may group GPUs: the columns of a group. Offered where the stored table has those columns.
HEATMAP_GROUPS: dict[str, tuple[str, ...]] = {
    "node": ("cluster", "node"),
    "node_pool": ("cluster", "node_pool"),
    "gpu_model": ("gpu_model",),
    "cluster": ("cluster",),
}

P = ParamSpec("P")
R = TypeVar("R")


def _cached(*tables: str, periods: bool = False) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Cache a read of `tables` (and, with `periods`, of the period's invoice lines and closed copy) per viewer
    scope, arguments, config and data version (gpumeter/views/cache.py)."""

    def wrap(read: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(read)
        def cached(*args: P.args, **kwargs: P.kwargs) -> R:
            self = args[0]
            assert isinstance(self, Views)
            period = _period_of(args[1:]) if periods else None
            version = self._version(tables, period)
            key = (
                read.__name__,
                tuple(_key_part(a) for a in args[1:]),
                tuple(sorted((k, _key_part(v)) for k, v in kwargs.items())),
                self._config_key,
                version,
            )
            try:
                return _handout(self._cache.get(key, lambda: read(*args, **kwargs)))
            except duckdb.Error:
                if self._version(tables, period, fresh=True) == version:
                    raise  # the files did not change: a real error
                # A day was re-metered while the query ran: a file replaced mid-scan can be read partly
                # old and partly new. The replacement is whole now: read again, and keep nothing (the
                # page view's version is the old one; the next view reads under the new).
                return read(*args, **kwargs)

        return cached

    return wrap


def _key_part(value: object) -> object:
    """A viewer is keyed by its scope (role, tenant), never by who it is: the scope is all a read depends on."""
    if isinstance(value, Viewer):
        return ("viewer", value.role, value.tenant)
    return value


def _period_of(args: tuple[object, ...]) -> str | None:
    return next((str(a.period) for a in args if isinstance(a, Filters)), None)


def _handout(value: R) -> R:
    """A cached result as a caller may keep it: frames and lists are copies (cheap: polars shares the data)."""
    if isinstance(value, pl.DataFrame):
        return value.clone()  # type: ignore[return-value]
    if isinstance(value, list):
        return list(value)  # type: ignore[return-value]
    if isinstance(value, Options):
        return dataclasses.replace(  # type: ignore[return-value]
            value,
            periods=list(value.periods),
            clusters=list(value.clusters),
            tenants=list(value.tenants),
            gpu_models=list(value.gpu_models),
        )
    return value


class Views:
    """Scoped reads of one warehouse, cached (gpumeter/views/cache.py). Cheap to make per page render: the
    DuckDB session is shared, each instance reads through its own cursor of it."""

    def __init__(
        self, warehouse: Warehouse, config: Config, cache: ReadCache | None = None, snapshot: bool = False
    ):
        self._config = config  # all of it: pages get `config_for(viewer)`
        self.warehouse = warehouse
        self._cache = READS if cache is None else cache
        # snapshot (one page view): each table's files are listed once, at its first read, so the page's
        # reads agree on one version of it and a page does not list a table per read. Else at every read.
        self._listed: dict[str, str] | None = {} if snapshot else None
        self._config_key = hashlib.sha256(config.model_dump_json().encode()).hexdigest()
        self._folders = stored_tables(warehouse)
        self.con = SESSIONS.cursor(warehouse, self._folders)
        self.con.execute("set TimeZone = 'UTC'")  # days and hours are UTC (R2)
        self.tables = set(self._folders)

    def close(self) -> None:
        self.con.close()

    def _version(
        self, tables: tuple[str, ...], period: str | None, fresh: bool = False
    ) -> tuple[object, ...]:
        """The data version of what a read depends on: which of its tables are stored, and every file of them
        (and of the period's invoice lines and closed copy). `fresh` lists the files again, where a page
        view otherwise keeps its first listing."""
        folders: list[Any] = [self._folders[t] for t in tables if t in self._folders]
        if period is not None:
            folders += [
                paths.period_dir(self.warehouse.table_dir(paths.MARTS, paths.INVOICE_LINES), period),
                self.warehouse.periods_dir() / period,
            ]
        present = tuple(t in self._folders for t in tables)
        version_of = (lambda folder: files_version([folder])) if fresh else self._folder_version
        return (str(self.warehouse.root), present, tuple(version_of(f) for f in folders))

    def _folder_version(self, folder: Any) -> str:
        if self._listed is None:
            return files_version([folder])
        if str(folder) not in self._listed:
            self._listed[str(folder)] = files_version([folder])
        return self._listed[str(folder)]

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
    @_cached("tenant_daily_cost")
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
    def _invoiced(self, where: _Where, by_period: bool = False) -> pl.DataFrame:
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

    @_cached("tenant_daily_cost")
    def tenant_charges(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """Per tenant over the period: GPU-hours held and used, efficiency (R10) and the charge (R9), the
        amount its invoice says (each line rounded once, R12)."""
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

    @_cached("tenant_daily_cost")
    def daily_charges(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        where = self._where(viewer, filters)
        sql = f"""
            select day, tenant, sum(amount) as amount, sum(gpu_seconds) / 3600 as gpu_hours,
                   sum(busy_gpu_seconds) / 3600 as used_gpu_hours
            from tenant_daily_cost where {where.sql}
            group by day, tenant order by day, tenant
        """
        return self._frame(sql, where.params, ("tenant_daily_cost",))

    @_cached("tenant_daily_cost")
    def monthly_charges(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """Every stored period (the period filter does not apply: this is the history), each tenant's month
        as its invoice says."""
        where = self._where(viewer, filters, day_col=None)
        if "tenant_daily_cost" not in self.tables:
            return pl.DataFrame()
        return self._invoiced(where, by_period=True).sort(["period", "tenant"])

    @_cached("device_seconds", "tenant_daily_cost")
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

    @_cached("tenant_daily_cost")
    def tenant_daily_cost(self, viewer: Viewer, filters: Filters) -> pa.Table:
        """The mart's rows in scope, for budgets (gpumeter/billing/budgets.py)."""
        where = self._where(viewer, filters)
        if "tenant_daily_cost" not in self.tables:
            return pa.table({"day": pa.array([], pa.date32())})
        sql = f"select * from tenant_daily_cost where {where.sql}"
        return self.con.sql(sql, params=where.params).to_arrow_table()

    @_cached("tenant_daily_cost")
    def budgets(self, viewer: Viewer, filters: Filters) -> list[BudgetStatus]:
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

    @_cached(periods=True)
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

    @_cached(periods=True)
    def invoice_status(self, filters: Filters) -> Status | None:
        """Closed (with its content hash) or draft: the same for every viewer, it names no tenant."""
        stored = stored_lines(self.warehouse, str(filters.period))
        if stored is None:
            return None
        return status_of(self.warehouse, str(filters.period), stored, self._config.minor_unit)

    # --- platform ops --------------------------------------------------------------------------
    # The heatmap reads the per-sample categories: hours are finer than the daily marts.
    def _heatmap_where(self, viewer: Viewer, filters: Filters, node: tuple[str, str] | None = None) -> _Where:
        self._require_all(viewer, "the utilization heatmap")
        where = self._pool_where(filters, model_col="gpu_model", by_ts_ms=True)
        if node is not None:
            where.add("cluster = ? and node = ?", *node)
        return where

    @_cached("int_device_categories")
    def heatmap_gpus(self, viewer: Viewer, filters: Filters) -> int:
        """How many GPUs the heatmap would draw: whether it draws one row per GPU or per group."""
        where = self._heatmap_where(viewer, filters)
        if "int_device_categories" not in self.tables:
            return 0
        sql = f"select count(*) from (select distinct cluster, uuid from int_device_categories where {where.sql})"
        ((count,),) = self.con.execute(sql, where.params).fetchall()
        return int(count)

    @_cached("int_device_categories")
    def heatmap_groupings(self, viewer: Viewer) -> list[str]:
        """The groupings of HEATMAP_GROUPS whose columns the stored per-sample table has (node pool only where
        the pipeline stores one), node first."""
        self._require_all(viewer, "the utilization heatmap")
        if "int_device_categories" not in self.tables:
            return []
        columns = {r[0] for r in self.con.execute("describe int_device_categories").fetchall()}
        return [name for name, group in HEATMAP_GROUPS.items() if set(group) <= columns]

    @_cached("int_device_categories")
    def heatmap_nodes(self, viewer: Viewer, filters: Filters) -> list[tuple[str, str]]:
        """(cluster, node) of every node with GPU samples in scope: the drill-down's choices."""
        where = self._heatmap_where(viewer, filters)
        if "int_device_categories" not in self.tables:
            return []
        sql = f"select distinct cluster, node from int_device_categories where {where.sql} order by all"
        return [(r[0], r[1]) for r in self.con.execute(sql, where.params).fetchall()]

    def _delta(self, cluster_col: str) -> tuple[str, list[object]]:
        """Δ of each row's cluster (R1, `Config.scrape_interval_of`) as SQL and its parameters; a cluster the
        config no longer names has the pool's."""
        names = [c.name for c in self._config.clusters]
        whens = " ".join(f"when {cluster_col} = ? then ?" for _ in names)
        params = [v for name in names for v in (name, self._config.scrape_interval_of(name))]
        return f"(case {whens} else ? end)", [*params, self._config.scrape_interval_seconds]

    def _per_gpu_hour(self, where: _Where) -> tuple[str, list[object]]:
        """Per GPU and UTC hour: held, busy and observed GPU-seconds (observed: its sample times × Δ), and
        the query's parameters."""
        delta, params = self._delta("cluster")
        sql = f"""
            select cluster, node, uuid, any_value(gpu_model) as gpu_model,
                   time_bucket(interval 1 hour, make_timestamp(ts_ms * 1000)) as hour,
                   coalesce(sum(gpu_seconds) filter (where is_held), 0) as held_seconds,
                   coalesce(sum(gpu_seconds * coalesce(busy, 0)), 0) as busy_seconds,
                   count(distinct ts_ms) * {delta} as observed_seconds
            from int_device_categories where {where.sql}
            group by cluster, node, uuid, hour
        """
        return sql, [*params, *where.params]

    @_cached("int_device_categories")
    def gpu_hourly_heatmap(
        self, viewer: Viewer, filters: Filters, node: tuple[str, str] | None = None
    ) -> pl.DataFrame:
        """Per GPU and UTC hour: allocated share (held GPU-seconds ÷ observed) and busy share (R10, R11); of
        one (cluster, node) when `node` is given (the drill-down of a grouped heatmap)."""
        per_gpu_hour, params = self._per_gpu_hour(self._heatmap_where(viewer, filters, node))
        sql = f"""
            select cluster, node, uuid, gpu_model, hour,
                   held_seconds / observed_seconds as allocated, busy_seconds / observed_seconds as busy
            from ({per_gpu_hour})
            order by node, uuid, hour
        """
        return self._frame(sql, params, ("int_device_categories",))

    @_cached("int_device_categories")
    def grouped_hourly_heatmap(self, viewer: Viewer, filters: Filters, by: str) -> pl.DataFrame:
        """Per group of GPUs (`by`, one of HEATMAP_GROUPS) and UTC hour: the GPUs observed, the allocated and
        busy shares of the group (its held and busy GPU-seconds ÷ its observed ones, so a GPU weighs by the
        time it was observed), and the observed GPU-hours."""
        if by not in HEATMAP_GROUPS:  # a column name reaches SQL text: only the fixed ones
            raise ValueError(f"unknown heatmap grouping {by!r}: one of {', '.join(HEATMAP_GROUPS)}")
        per_gpu_hour, params = self._per_gpu_hour(self._heatmap_where(viewer, filters))
        group = ", ".join(HEATMAP_GROUPS[by])
        sql = f"""
            select {group}, hour, count(*) as gpus,
                   sum(held_seconds) / sum(observed_seconds) as allocated,
                   sum(busy_seconds) / sum(observed_seconds) as busy,
                   sum(observed_seconds) / 3600 as observed_gpu_hours
            from ({per_gpu_hour})
            group by {group}, hour order by {group}, hour
        """
        return self._frame(sql, params, ("int_device_categories",))

    @_cached("stranded_capacity")
    def stranded_capacity(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """GPU-hours per node and R11 category; `is_stranded` for every category but allocated_active."""
        self._require_all(viewer, "stranded capacity")
        where = self._pool_where(filters)
        sql = f"""
            select cluster, node, {CATEGORY_SQL} as category, bool_or(is_stranded) as is_stranded,
                   sum(gpu_seconds) / 3600 as gpu_hours
            from stranded_capacity where {where.sql}
            group by all order by cluster, node, category
        """
        return self._frame(sql, where.params, ("stranded_capacity",))

    @_cached("mig_slice_usage")
    def mig_layout(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """Per MIG GPU and instance: average compute slices (of 7) held-busy, held-idle, free and
        unpartitioned over the observed time (slice-seconds ÷ observed seconds)."""
        self._require_all(viewer, "the MIG layout")
        where = self._pool_where(filters, model_col="gpu_model")
        joined = self._pool_where(filters, model_col="m.gpu_model", prefix="m.")
        # A GPU's observed time is every day's, in each layout it had: each (day, layout) counted once, as
        # its instance rows all carry it.
        sql = f"""
            with per_layout as (
                select cluster, node, uuid, day, layout, max(observed_seconds) as observed_seconds
                from mig_slice_usage where {where.sql} group by all
            ),
            per_gpu as (
                select cluster, node, uuid, sum(observed_seconds) as gpu_observed_seconds
                from per_layout group by all
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

    @_cached("int_device_categories", "int_device_holders", "int_device_samples", "device_seconds")
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
        delta, delta_params = self._delta("c.cluster")
        sql = f"""
            with tenants as (
                select distinct cluster, day, device_id, namespace, pod, tenant from device_seconds
            )
            select c.cluster, t.tenant, h.namespace, h.pod, c.gpu_model,
                   coalesce(c.mig_profile, 'whole GPU') as mig_profile,
                   sum(cast(c.gpu_seconds * h.share as decimal(38, 12))) / 3600 as idle_gpu_hours,
                   sum(cast({delta} / 3600.0 * s.device_price_per_hour * h.share as decimal(38, 12))) as idle_cost
            from int_device_categories as c
            join int_device_holders as h on h.device_id = c.device_id and h.ts_ms = c.ts_ms
            join int_device_samples as s on s.device_id = c.device_id and s.ts_ms = c.ts_ms
            join tenants as t on t.cluster = c.cluster and t.device_id = c.device_id
                and t.namespace = h.namespace and t.pod = h.pod
                and t.day = cast(make_timestamp(c.ts_ms * 1000) as date)
            where c.category = 'allocated_idle' and {where.sql}
            group by all order by idle_cost desc, t.tenant, h.namespace, h.pod, c.cluster, c.gpu_model, mig_profile
        """
        return self._frame(
            sql,
            [*delta_params, *where.params],
            ("int_device_categories", "int_device_holders", "int_device_samples", "device_seconds"),
        )

    @_cached("device_seconds")
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
            group by all
            order by reserved_cost desc, cluster, node, uuid, model_name, gpu_model, tenant, namespace, pod
        """
        return self._frame(sql, where.params, ("device_seconds",))

    @_cached("device_seconds", "tenant_daily_cost")
    def rightsizing_advice(self, viewer: Viewer, filters: Filters) -> list[Advice]:
        """MIG right-sizing (gpumeter/views/rightsizing.py) of the whole-GPU holders in scope, at the rate
        card's prices (the same for every viewer)."""
        holders = holder_peaks(self.whole_gpu_holders(viewer, filters))
        metered = len(self.metered_days(viewer, filters))
        return advise(holders, self.config_for(viewer), metered, len(filters.period.days()))

    @_cached("tenant_daily_cost")
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
    @_cached("data_quality")
    def data_quality(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """Per cluster and node: coverage (observed ÷ expected GPU-seconds, R4), unobserved GPU-hours,
        unmapped namespaces (R7), and every reported figure the stored marts have (is_reported_figure),
        summed."""
        self._require_all(viewer, "data quality")
        where = self._pool_where(filters)
        if "data_quality" not in self.tables:
            return pl.DataFrame()
        columns = self.con.execute("describe data_quality").fetchall()
        reported = [(name, type_) for name, type_, *_ in columns if is_reported_figure(name)]
        # Numbers add up over days; text (e.g. a JSON breakdown by reason) is listed per node, empty ones left out.
        extra = "".join(
            f', sum("{name}") as "{name}"' if _numeric(type_) else _text_list(name)
            for name, type_ in reported
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

    @_cached("pool_daily_cost")
    def coverage_gaps(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """Days of the period with no metered data, per cluster: every day before the last metered one, and
        every day since that has ended (UTC) and is not metered yet."""
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
        ended = utc_today() - timedelta(days=1)
        last = max(max(metered["day"].to_list()), min(ended, filters.period.days()[-1]))
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

    @_cached("device_seconds")
    def unmapped_namespaces(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
        """Namespaces whose holders matched no tenant (R7): charged to __unallocated__."""
        self._require_all(viewer, "unmapped namespaces")
        where = self._pool_where(filters, model_col="gpu_model")
        sql = f"""
            select cluster, namespace, count(distinct pod) as pods,
                   sum(device_seconds) / 3600 as device_hours, sum(reserved_cost) as amount
            from device_seconds where {where.sql} and tenant = ?
            group by all order by amount desc, cluster, namespace
        """
        return self._frame(sql, [*where.params, UNALLOCATED], ("device_seconds",))

    # --- today so far: provisional figures ------------------------------------------------------
    # The day being metered, up to its last full hour (gpumeter.storage.provisional): read beside the final
    # marts, every row marked `provisional` with the `through` it stands for. Never part of an invoice.
    def _so_far(self, name: str, viewer: Viewer | None, filters: Filters, read: Callable[[], R]) -> R:
        """A read of final and provisional figures, cached like the others and keyed also by every provisional
        file of the mart: a new hour's figures, or the nightly run removing them, are read afresh."""
        folder = provisional.zone(self.warehouse).table_dir(paths.MARTS, paths.TENANT_DAILY_COST)
        version = (self._version(("tenant_daily_cost",), None), files_version([folder]))
        key = (name, _key_part(viewer), filters, self._config_key, version)
        return _handout(self._cache.get(key, read))

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

    def daily_charges_so_far(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
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

    def month_to_date(self, viewer: Viewer, filters: Filters) -> pl.DataFrame:
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

    def budgets_so_far(self, viewer: Viewer, filters: Filters) -> list[BudgetStatus]:
        """`budgets` with today's provisional figures counted (gpumeter/billing/budgets.py): their spend is
        spent, and their day counts as the part of it they cover. Days count pool-wide, as in `budgets`."""
        if not self.provisional_days(viewer, filters):
            return self.budgets(viewer, filters)
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


def _epoch_ms(day: date) -> int:
    return (day.toordinal() - date(1970, 1, 1).toordinal()) * 86_400_000


def is_reported_figure(column: str) -> bool:
    """A data_quality column the data-quality view sums per node and the page shows as a figure: the
    quarantine's (`*quarantin*`), the repeated scrapes' (`repeated_scrape_*`) and the GPU-seconds whose holder
    could not be told from the scrape target (`holder_unverified_*`), whichever the stored marts have (days
    metered by an older version lack the newer ones)."""
    name = column.lower()
    return "quarantin" in name or name.startswith(("repeated_scrape", "holder_unverified"))


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
    if isinstance(value, float):  # hours and ratios, never money: 9 places, without binary residue
        return repr(round(value, 9) + 0.0)
    if isinstance(value, int | bool | date):
        return str(value)
    return neutralize(str(value))


__all__ = [
    "AccessDenied",
    "Filters",
    "Options",
    "ProvisionalDay",
    "Viewer",
    "ViewerError",
    "Views",
    "config_for",
    "frame_csv",
    "local_viewer",
    "provisional_label",
    "viewer_for_identity",
]
