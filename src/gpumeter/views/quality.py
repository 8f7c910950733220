"""How complete and trustworthy the metered data is, for finance and ops (refused to tenant viewers): coverage
per node, the days not metered yet, and namespaces that matched no tenant."""

from __future__ import annotations

from datetime import timedelta

import polars as pl

from gpumeter.config import UNALLOCATED
from gpumeter.ingest.contract import utc_today
from gpumeter.views.filters import Filters
from gpumeter.views.identity import Viewer
from gpumeter.views.session import Session, cached


class QualityReads(Session):
    """The reads of data_quality, pool_daily_cost and device_seconds about what was metered."""

    @cached("data_quality")
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

    @cached("pool_daily_cost")
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

    @cached("device_seconds")
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
