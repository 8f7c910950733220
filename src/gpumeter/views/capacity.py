"""How the pool's capacity went, for finance and ops: the utilization heatmap (per GPU up to
`HEATMAP_GPU_ROWS` GPUs, per group of GPUs above it, aggregated in DuckDB), stranded capacity, the MIG layout,
idle holders and MIG right-sizing. Pool-wide reads are refused to tenant viewers; the holders' reads are
scoped to the viewer's tenant."""

from __future__ import annotations

from datetime import date

import polars as pl

from gpumeter.views.filters import Filters, Where
from gpumeter.views.identity import Viewer
from gpumeter.views.rightsizing import Advice, advise, holder_peaks
from gpumeter.views.session import Session, cached, epoch_ms
from gpumeter.views.summary import CATEGORY_SQL

# Above this many GPUs in scope the capacity heatmap draws one row per group of GPUs, not one per GPU.
HEATMAP_GPU_ROWS = 300
# How the heatmap may group GPUs: the columns of a group. Offered where the stored table has those columns.
HEATMAP_GROUPS: dict[str, tuple[str, ...]] = {
    "node": ("cluster", "node"),
    "node_pool": ("cluster", "node_pool"),
    "gpu_model": ("gpu_model",),
    "cluster": ("cluster",),
}


class CapacityReads(Session):
    """The reads of int_device_categories (per sample), stranded_capacity, mig_slice_usage and the holders of
    device_seconds."""

    # --- the utilization heatmap ---------------------------------------------------------------
    # The heatmap reads the per-sample categories: hours are finer than the daily marts.
    def _heatmap_where(self, viewer: Viewer, filters: Filters, node: tuple[str, str] | None = None) -> Where:
        self._require_all(viewer, "the utilization heatmap")
        where = self._pool_where(filters, model_col="gpu_model", by_ts_ms=True)
        if node is not None:
            where.add("cluster = ? and node = ?", *node)
        return where

    @cached("int_device_categories")
    def heatmap_gpus(self, viewer: Viewer, filters: Filters) -> int:
        """How many GPUs the heatmap would draw: whether it draws one row per GPU or per group."""
        where = self._heatmap_where(viewer, filters)
        if "int_device_categories" not in self.tables:
            return 0
        sql = f"select count(*) from (select distinct cluster, uuid from int_device_categories where {where.sql})"
        ((count,),) = self.con.execute(sql, where.params).fetchall()
        return int(count)

    @cached("int_device_categories")
    def heatmap_groupings(self, viewer: Viewer) -> list[str]:
        """The groupings of HEATMAP_GROUPS whose columns the stored per-sample table has (node pool only where
        the pipeline stores one), node first."""
        self._require_all(viewer, "the utilization heatmap")
        if "int_device_categories" not in self.tables:
            return []
        columns = {r[0] for r in self.con.execute("describe int_device_categories").fetchall()}
        return [name for name, group in HEATMAP_GROUPS.items() if set(group) <= columns]

    @cached("int_device_categories")
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

    def _per_gpu_hour(self, where: Where) -> tuple[str, list[object]]:
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

    @cached("int_device_categories")
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

    @cached("int_device_categories")
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

    # --- stranded capacity and the MIG layout --------------------------------------------------
    @cached("stranded_capacity")
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

    @cached("mig_slice_usage")
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

    # --- holders: idle ones, whole-GPU ones and their right-sizing ------------------------------
    @cached("int_device_categories", "int_device_holders", "int_device_samples", "device_seconds")
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
            "c.ts_ms >= ? and c.ts_ms < ?", epoch_ms(filters.period.start), epoch_ms(filters.period.end)
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

    @cached("device_seconds")
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

    @cached("device_seconds", "tenant_daily_cost")
    def rightsizing_advice(self, viewer: Viewer, filters: Filters) -> list[Advice]:
        """MIG right-sizing (gpumeter/views/rightsizing.py) of the whole-GPU holders in scope, at the rate
        card's prices (the same for every viewer)."""
        holders = holder_peaks(self.whole_gpu_holders(viewer, filters))
        metered = len(self.metered_days(viewer, filters))
        return advise(holders, self.config_for(viewer), metered, len(filters.period.days()))

    @cached("tenant_daily_cost")
    def metered_days(self, viewer: Viewer, filters: Filters) -> list[date]:
        """The days of the period metered in scope: what right-sizing spreads its window over."""
        where = self._where(
            viewer, filters, tenant_col=None if viewer.sees_all_tenants else "tenant", model_col=None
        )
        if "tenant_daily_cost" not in self.tables:
            return []
        rows = self.con.execute(
            f"select distinct day from tenant_daily_cost where {where.sql} order by day", where.params
        ).fetchall()
        return [r[0] for r in rows]
