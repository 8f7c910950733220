"""The models of sql/, declared the way dbt projects declare them: what each is, in which layer, what it reads,
what it outputs, the invariants checked after it, and their order.

    sql/project.yml              each layer's materialization (dbt_project.yml's `models:` block)
    sql/<layer>/<model>.sql      a SQL model, one per file; its dependencies are the models and raw tables its
                                 text names, so the order is derived, never listed by hand
    sql/<layer>/schema.yml       every model of the layer, SQL or Python: description, grain, columns, a
                                 materialization other than the layer's, the assertions run after it
    sql/assertions/<name>.sql    an invariant as a query returning the rows that break it, with a `message`

An ephemeral model is a view its readers query: never a stored table nor an asset. Python models
(gpumeter.models.python_models) are declared in schema.yml with `language: python` and their `depends_on`.
The files are read with importlib.resources: the package works installed from a wheel.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from graphlib import CycleError, TopologicalSorter
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from gpumeter.ingest.schema import RAW_TABLES

SQL_DIR: Traversable = files("gpumeter.models") / "sql"
LAYERS = ("staging", "intermediate", "marts")
MACROS = SQL_DIR / "macros.sql"  # expressions the models share, created before they run
PROJECT_FILE = "project.yml"
SCHEMA_FILE = "schema.yml"
ASSERTIONS = "assertions"
# The session variable naming a folder of the session's own (gpumeter.models.runner), where a Python model may
# keep files its tables are read from; it is removed with the session.
SESSION_FOLDER = "session_folder"

Materialization = Literal["table", "ephemeral"]
Identifier = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class AccountingError(RuntimeError):
    """The day cannot be metered; the message names the cause and what to do."""


class ProjectError(AccountingError):
    """The models' files and declarations disagree; the message names the file and the model."""


# --- the declarations, as written in the yml files ---------------------------------------------------------


class _Declaration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_D = TypeVar("_D", bound=_Declaration)


class ColumnDeclaration(_Declaration):
    name: Identifier
    data_type: Text  # DuckDB's name of the type, as `describe` shows it
    description: Text


class ModelDeclaration(_Declaration):
    name: Identifier
    description: Text
    grain: list[Identifier]  # the columns that identify a row; [] for a model of one row
    language: Literal["sql", "python"] = "sql"
    depends_on: list[Identifier] = []  # a Python model's inputs (a SQL model's are read from its text)
    materialized: Materialization | None = None  # only where it differs from the layer's
    columns: list[ColumnDeclaration] = Field(min_length=1)
    assertions: list[Identifier] = []

    @model_validator(mode="after")
    def _consistent(self) -> ModelDeclaration:
        names = [c.name for c in self.columns]
        if twice := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"column(s) declared twice: {', '.join(twice)}")
        if unknown := [g for g in self.grain if g not in names]:
            raise ValueError(f"grain column(s) {', '.join(unknown)} are not among the declared columns")
        if self.language == "python" and not self.depends_on:
            raise ValueError("a Python model declares what it reads under depends_on")
        if self.language == "sql" and self.depends_on:
            raise ValueError("a SQL model's dependencies are read from its SQL: remove depends_on")
        return self


class LayerSchema(_Declaration):
    models: list[ModelDeclaration]


class LayerConfig(_Declaration):
    materialized: Materialization


class ProjectConfig(_Declaration):
    models: dict[str, LayerConfig]

    @model_validator(mode="after")
    def _every_layer(self) -> ProjectConfig:
        if missing := [layer for layer in LAYERS if layer not in self.models]:
            raise ValueError(f"no materialization for layer(s) {', '.join(missing)}")
        if unknown := sorted(set(self.models) - set(LAYERS)):
            raise ValueError(f"no layer {', '.join(unknown)} (the layers: {', '.join(LAYERS)})")
        return self


# --- the models, as the runner and the assets use them ------------------------------------------------------


@dataclass(frozen=True)
class Column:
    name: str
    data_type: str
    description: str


@dataclass(frozen=True)
class Assertion:
    """A query returning the rows that break an invariant, each with a `message` saying what is wrong."""

    name: str
    sql: str
    deps: tuple[str, ...]  # the models (and raw tables) it reads

    @property
    def path(self) -> str:
        return f"sql/{ASSERTIONS}/{self.name}.sql"


@dataclass(frozen=True)
class Model:
    name: str
    layer: str
    deps: tuple[str, ...]
    sql: str | None = None  # None for a Python model
    description: str = ""
    # "ephemeral": a view its readers query, never a table, never stored and not an asset of its own; its
    # readers stand on its dependencies.
    materialized: str = "table"
    grain: tuple[str, ...] = ()
    columns: tuple[Column, ...] = ()
    assertions: tuple[Assertion, ...] = ()

    @property
    def ephemeral(self) -> bool:
        return self.materialized == "ephemeral"

    @property
    def table(self) -> str:
        """Name of the stored table: marts drop their prefix (mart_device_seconds -> device_seconds)."""
        return self.name.removeprefix("mart_") if self.layer == "marts" else self.name

    @property
    def path(self) -> str:
        """The file that defines the model (a Python model: its declaration)."""
        return f"sql/{self.layer}/{self.name}.sql" if self.sql is not None else self.schema_path

    @property
    def schema_path(self) -> str:
        return f"sql/{self.layer}/{SCHEMA_FILE}"


def _read_yaml(path: Traversable, where: str) -> Any:
    if not path.is_file():
        raise ProjectError(f"{where} is missing")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ProjectError(f"{where} is not valid YAML: {exc}") from None


def _validation_message(where: str, raw: Any, exc: ValidationError) -> str:
    """One line per problem, each naming the file and the model (by its name where it has one)."""
    entries = raw.get("models") if isinstance(raw, dict) else None
    lines = []
    for error in exc.errors():
        loc = list(error["loc"])
        subject = ""
        if len(loc) >= 2 and loc[0] == "models" and isinstance(loc[1], int) and isinstance(entries, list):
            entry = entries[loc[1]] if loc[1] < len(entries) else None
            name = entry.get("name") if isinstance(entry, dict) else None
            subject = f"model {name}" if name else f"model #{loc[1] + 1}"
            loc = loc[2:]
            if len(loc) >= 2 and loc[0] == "columns" and isinstance(loc[1], int) and isinstance(entry, dict):
                columns = entry.get("columns")
                column = columns[loc[1]] if isinstance(columns, list) and loc[1] < len(columns) else None
                label = column.get("name") if isinstance(column, dict) else None
                subject += f", column {label}" if label else f", column #{loc[1] + 1}"
                loc = loc[2:]
        field = ".".join(str(part) for part in loc)
        parts = [where, subject, field]
        lines.append(": ".join(p for p in parts if p) + f": {error['msg']}")
    return "\n".join(lines)


def _validate(kind: type[_D], raw: Any, where: str) -> _D:
    try:
        return kind.model_validate(raw)
    except ValidationError as exc:
        raise ProjectError(_validation_message(where, raw, exc)) from None


def _sql_files(folder: Traversable) -> dict[str, str]:
    if not folder.is_dir():
        return {}
    return {
        path.name.removesuffix(".sql"): path.read_text(encoding="utf-8")
        for path in sorted(folder.iterdir(), key=lambda p: p.name)
        if path.name.endswith(".sql")
    }


_NAME = re.compile(r"\b([a-z][a-z0-9_]*)\b")


def _referenced(sql: str, names: set[str]) -> set[str]:
    """The models and raw tables a query names, comments left out."""
    code = "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
    return set(_NAME.findall(code)) & names


def _declarations(sql_dir: Traversable) -> dict[str, tuple[str, ModelDeclaration]]:
    """{model: (layer, its declaration)} from every layer's schema.yml."""
    declared: dict[str, tuple[str, ModelDeclaration]] = {}
    for layer in LAYERS:
        where = f"sql/{layer}/{SCHEMA_FILE}"
        schema = _validate(LayerSchema, _read_yaml(sql_dir / layer / SCHEMA_FILE, where), where)
        for entry in schema.models:
            if entry.name in declared:
                first = declared[entry.name][0]
                raise ProjectError(f"{where}: model {entry.name} is declared again (first in sql/{first}/)")
            declared[entry.name] = (layer, entry)
    return declared


@cache
def load_models(sql_dir: Traversable = SQL_DIR) -> tuple[Model, ...]:
    """Every model in dependency order (an assertion's reads count as its model's, for the order)."""
    where = f"sql/{PROJECT_FILE}"
    project = _validate(ProjectConfig, _read_yaml(sql_dir / PROJECT_FILE, where), where)
    declared = _declarations(sql_dir)
    texts: dict[str, tuple[str, str]] = {}
    for layer in LAYERS:
        for name, sql in _sql_files(sql_dir / layer).items():
            texts[name] = (layer, sql)
            schema = f"sql/{layer}/{SCHEMA_FILE}"
            if name not in declared:
                raise ProjectError(
                    f"sql/{layer}/{name}.sql: model {name} has no entry in {schema}; declare it there "
                    "(description, grain, columns)"
                )
            if declared[name][0] != layer:
                raise ProjectError(f"sql/{declared[name][0]}/{SCHEMA_FILE}: model {name} is in sql/{layer}/")
            if declared[name][1].language != "sql":
                raise ProjectError(
                    f"{schema}: model {name} is declared {declared[name][1].language} but has a .sql file"
                )
    for name, (layer, entry) in declared.items():
        if entry.language == "sql" and name not in texts:
            raise ProjectError(
                f"sql/{layer}/{SCHEMA_FILE}: model {name} is declared, but there is no sql/{layer}/{name}.sql"
            )
    assertion_texts = _sql_files(sql_dir / ASSERTIONS)
    used = {a for _, entry in declared.values() for a in entry.assertions}
    if unused := sorted(set(assertion_texts) - used):
        raise ProjectError(
            f"sql/{ASSERTIONS}/{unused[0]}.sql: assertion {unused[0]} is run by no model; list it under a "
            "model's assertions in its schema.yml"
        )

    names = set(declared) | set(RAW_TABLES)
    models: dict[str, Model] = {}
    # SQL models in layer and file order, then the Python ones: the order ties are broken in.
    for name in [*texts, *(n for n in declared if n not in texts)]:
        layer, entry = declared[name]
        schema = f"sql/{layer}/{SCHEMA_FILE}"
        if unknown := sorted(set(entry.depends_on) - names):
            raise ProjectError(f"{schema}: model {name}: depends_on names no model: {', '.join(unknown)}")
        assertions = []
        for assertion in entry.assertions:
            if assertion not in assertion_texts:
                raise ProjectError(
                    f"{schema}: model {name}: assertion {assertion} has no file sql/{ASSERTIONS}/{assertion}.sql"
                )
            text = assertion_texts[assertion]
            assertions.append(Assertion(assertion, text, tuple(sorted(_referenced(text, names)))))
        sql = texts[name][1] if name in texts else None
        deps = _referenced(sql, names) - {name} if sql is not None else set(entry.depends_on)
        models[name] = Model(
            name=name,
            layer=layer,
            deps=tuple(sorted(deps)),
            sql=sql,
            description=entry.description,
            materialized=entry.materialized or project.models[layer].materialized,
            grain=tuple(entry.grain),
            columns=tuple(Column(c.name, c.data_type, c.description) for c in entry.columns),
            assertions=tuple(assertions),
        )
    return _ordered(models)


def _ordered(models: Mapping[str, Model]) -> tuple[Model, ...]:
    graph: dict[str, list[str]] = {}
    for name, model in models.items():
        reads = set(model.deps).union(*(a.deps for a in model.assertions)) - {name}
        graph[name] = sorted(dep for dep in reads if dep in models)  # sorted: the same order in every process
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        cycle = " -> ".join(exc.args[1])
        raise ProjectError(f"the models read each other in a circle: {cycle}") from None
    return tuple(models[name] for name in order)


def reads(model: Model, models: Sequence[Model]) -> set[str]:
    """Everything the model and its assertions read when they run: an ephemeral model (a view) is read through,
    its own dependencies included."""
    by_name = {m.name: m for m in models}
    found: set[str] = set()
    pending = [*model.deps, *(d for a in model.assertions for d in a.deps if d != model.name)]
    while pending:
        dep = pending.pop()
        if dep in found:
            continue
        found.add(dep)
        if dep in by_name and by_name[dep].ephemeral:
            pending.extend(by_name[dep].deps)
    return found


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
