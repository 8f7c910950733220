"""The machinery every scoped read shares: `Session`, the base of the read groups (charges.py, capacity.py,
quality.py, combined in scoped.py's `Views`). It holds the DuckDB session, the read cache and the viewer's scope.

Reads go through `Warehouse.connect()` (in-memory DuckDB views over the Parquet files), so the dashboard never
holds a lock the pipeline needs; a day the pipeline is rewriting is read as the old or the new file (atomic
renames), never half of one.

Reads are cached (`cached`, gpumeter/views/cache.py) per viewer scope (role and tenant), read, arguments, config
and data version (every stored file the read depends on): a cached result is never handed to another scope,
and a re-metered day is read afresh. Every query adds the viewer's tenant scope itself (`Session._where`), in
SQL with bound parameters: a page cannot widen it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable
from datetime import date
from typing import Any, ParamSpec, TypeVar

import duckdb
import polars as pl

from gpumeter.config import Config
from gpumeter.storage import paths, provisional
from gpumeter.storage.warehouse import Warehouse
from gpumeter.views.cache import READS, SESSIONS, ReadCache, files_version, stored_tables
from gpumeter.views.filters import Filters, Options, Where
from gpumeter.views.identity import AccessDenied, Viewer, config_for

P = ParamSpec("P")
R = TypeVar("R")


def cached(*tables: str, periods: bool = False) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Cache a read of `tables` (and, with `periods`, of the period's invoice lines and closed copy) per viewer
    scope, arguments, config and data version (gpumeter/views/cache.py)."""

    def wrap(read: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(read)
        def cached_read(*args: P.args, **kwargs: P.kwargs) -> R:
            self = args[0]
            assert isinstance(self, Session)
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

        return cached_read

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


class Session:
    """A warehouse read through the shared DuckDB session and the read cache, for the viewer's scope. Cheap to
    make per page render: the DuckDB session is shared, each instance reads through its own cursor of it."""

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

    # --- reading, in the viewer's scope -------------------------------------------------------
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
    ) -> Where:
        where = Where()
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

    @staticmethod
    def _pool_where(
        filters: Filters, model_col: str | None = None, prefix: str = "", by_ts_ms: bool = False
    ) -> Where:
        """Period, cluster and model filters of a pool-wide table (no tenant column)."""
        where = Where()
        if by_ts_ms:
            where.add(
                f"{prefix}ts_ms >= ? and {prefix}ts_ms < ?",
                epoch_ms(filters.period.start),
                epoch_ms(filters.period.end),
            )
        else:
            where.add(f"{prefix}day >= ? and {prefix}day < ?", filters.period.start, filters.period.end)
        if filters.clusters:
            where.add(f"list_contains(?::varchar[], {prefix}cluster)", list(filters.clusters))
        if model_col and filters.gpu_models:
            where.add(f"list_contains(?::varchar[], {model_col})", list(filters.gpu_models))
        return where

    # --- today so far: final and provisional figures, cached together ----------------------------
    def _so_far(self, name: str, viewer: Viewer | None, filters: Filters, read: Callable[[], R]) -> R:
        """A read of final and provisional figures, cached like the others and keyed also by every provisional
        file of the mart: a new hour's figures, or the nightly run removing them, are read afresh."""
        folder = provisional.zone(self.warehouse).table_dir(paths.MARTS, paths.TENANT_DAILY_COST)
        version = (self._version(("tenant_daily_cost",), None), files_version([folder]))
        key = (name, _key_part(viewer), filters, self._config_key, version)
        return _handout(self._cache.get(key, read))


def epoch_ms(day: date) -> int:
    return (day.toordinal() - date(1970, 1, 1).toordinal()) * 86_400_000
