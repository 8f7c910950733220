"""What the dashboard reads, scoped to who reads it: `Views`, every read of the pages and the CLI, one class
made of the groups of reads by what they read (charges.py, capacity.py, quality.py) over one `Session`
(session.py: the DuckDB session, the read cache, the viewer's scope).

Every query takes a `Viewer` (identity.py) and adds the viewer's tenant scope itself, in SQL with bound
parameters: a page cannot widen it, and no filter value is ever spliced into SQL text (filters.py).
Pool-level views (capacity, MIG layout, data quality) are refused to tenant viewers. What comes from the config
is scoped the same way: `config_for(viewer)` is the config a viewer may read, and every view that reads the
config (budgets, advice) reads that one.
"""

from __future__ import annotations

from gpumeter.config import IDLE, UNALLOCATED
from gpumeter.views.capacity import CapacityReads
from gpumeter.views.charges import ChargeReads
from gpumeter.views.filters import Options, Where
from gpumeter.views.identity import Viewer
from gpumeter.views.quality import QualityReads
from gpumeter.views.session import cached


class Views(ChargeReads, CapacityReads, QualityReads):
    """Scoped reads of one warehouse, cached (gpumeter/views/cache.py), and the choices the filters offer."""

    # --- filter choices ------------------------------------------------------------------------
    @cached("tenant_daily_cost")
    def options(self, viewer: Viewer) -> Options:
        scope = Where()
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
