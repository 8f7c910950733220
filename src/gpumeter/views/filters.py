"""What a reader picks (`Filters`), the choices a page offers (`Options`), and `Where`: a WHERE clause built from
fixed SQL fragments and bound parameters only, so that no filter value is ever spliced into SQL text."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpumeter.billing.invoices import Period


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
class Where:
    """A WHERE clause built from fixed SQL fragments and bound parameters only."""

    parts: list[str] = field(default_factory=list)
    params: list[Any] = field(default_factory=list)

    def add(self, sql: str, *params: Any) -> None:
        self.parts.append(sql)
        self.params.extend(params)

    @property
    def sql(self) -> str:
        return " and ".join(self.parts) if self.parts else "true"
