"""The models of sql/: what each is, in which layer, what it reads, and their order.

SQL models live in sql/<layer>/<model>.sql (staging -> intermediate -> marts, one model per file). A model's
dependencies are the other models (and raw tables) its text names, so the order is derived, never listed by
hand. A model whose header has `-- materialized: ephemeral` (as in dbt) is a view its readers query, never a
stored table nor an asset. Two intermediate models are Python (gpumeter.models.python_models).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from graphlib import TopologicalSorter
from importlib.resources import files
from importlib.resources.abc import Traversable

from gpumeter.ingest.schema import RAW_TABLES

SQL_DIR: Traversable = files("gpumeter.models") / "sql"
LAYERS = ("staging", "intermediate", "marts")
MACROS = SQL_DIR / "macros.sql"  # expressions the models share, created before they run


class AccountingError(RuntimeError):
    """The day cannot be metered; the message names the cause and what to do."""


@dataclass(frozen=True)
class Model:
    name: str
    layer: str
    deps: tuple[str, ...]
    sql: str | None = None  # None for a Python model
    description: str = ""
    # "ephemeral" (a `-- materialized: ephemeral` line, as in dbt): a view its readers query, never a table,
    # never stored and not an asset of its own; its readers stand on its dependencies.
    materialized: str = "table"

    @property
    def ephemeral(self) -> bool:
        return self.materialized == "ephemeral"

    @property
    def table(self) -> str:
        """Name of the stored table: marts drop their prefix (mart_device_seconds -> device_seconds)."""
        return self.name.removeprefix("mart_") if self.layer == "marts" else self.name


_MATERIALIZED = re.compile(r"^--\s*materialized:\s*(table|ephemeral)\s*$")


def _header(sql: str) -> tuple[str, str]:
    """(description, materialization) from a model's leading comment lines."""
    lines, materialized = [], "table"
    for line in sql.splitlines():
        if not line.startswith("--"):
            break
        if found := _MATERIALIZED.match(line):
            materialized = found.group(1)
        else:
            lines.append(line.removeprefix("--").strip())
    return " ".join(lines), materialized


PYTHON_MODELS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "int_device_classes": (
        "intermediate",
        ("stg_dcgm_series",),
        "Weight (R3) and price (R8) of every (modelName, MIG profile) seen in the day.",
    ),
    "int_holder_tenants": (
        "intermediate",
        ("int_device_holders", "int_pod_label_periods"),
        "The tenant of every holder (R7) for each period of its pod labels (R1a: a pod relabelled at noon is "
        "the new tenant's from noon): pod label rules, then vCluster, then namespace.",
    ),
}


@cache
def load_models(sql_dir: Traversable = SQL_DIR) -> tuple[Model, ...]:
    """Every model in dependency order."""
    texts: dict[str, tuple[str, str]] = {}
    for layer in LAYERS:
        for path in sorted((sql_dir / layer).iterdir(), key=lambda p: p.name):
            if path.name.endswith(".sql"):
                texts[path.name.removesuffix(".sql")] = (layer, path.read_text(encoding="utf-8"))
    names = set(texts) | set(PYTHON_MODELS) | set(RAW_TABLES)
    models: dict[str, Model] = {}
    for name, (layer, sql) in texts.items():
        code = "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
        referenced = set(re.findall(r"\b([a-z][a-z0-9_]*)\b", code)) & names
        models[name] = Model(name, layer, tuple(sorted(referenced - {name})), sql, *_header(sql))
    for name, (layer, deps, description) in PYTHON_MODELS.items():
        models[name] = Model(name, layer, deps, None, description)
    graph = {name: [d for d in model.deps if d in models] for name, model in models.items()}
    order = list(TopologicalSorter(graph).static_order())
    return tuple(models[name] for name in order)


def lineage_deps(model: Model) -> tuple[str, ...]:
    """What a model stands on as assets: its dependencies, an ephemeral one replaced by its own."""
    models = {m.name: m for m in load_models()}
    deps: set[str] = set()
    pending = list(model.deps)
    while pending:
        dep = pending.pop()
        if dep in models and models[dep].ephemeral:
            pending.extend(models[dep].deps)
        else:
            deps.add(dep)
    return tuple(sorted(deps))
