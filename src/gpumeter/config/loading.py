"""A config file to a Config: where it comes from when none is named, every problem with its place and line
in pydantic's words made plain, relative paths resolved; the warnings of `gpumeter config check`; the JSON
Schema."""

from __future__ import annotations

import difflib
import fnmatch
import os
import re
from collections.abc import Iterable
from datetime import date
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from gpumeter.config.base import MAX_BUDGET, MAX_PRICE, REFUSES, ConfigError, _preview, tenant_slug
from gpumeter.config.model import Config
from gpumeter.config.tenants import _BUCKET_SLUGS, DatedRules, Tenant, _slug_clash
from gpumeter.config.yaml_text import MAX_CONFIG_CHARS, _TextProblems, yaml_with_lines

# Where a config comes from when none is named: $GPUMETER_CONFIG, else the demo's (`gpumeter demo` writes it),
# else the example shipped in the package.
CONFIG_ENV = "GPUMETER_CONFIG"
DEMO_DIR = Path(".gpumeter") / "demo"
EXAMPLE_CONFIG: Traversable = files("gpumeter.examples") / "demo-config.yaml"


# Bounds whose pydantic message ("less than or equal to 1000000000") is told with what it means.
_AMOUNT_BOUNDS = {
    MAX_PRICE: "a price (per GPU-hour, MIG instance-hour or kWh)",
    MAX_BUDGET: "a monthly budget",
}


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """The field names of the section an unknown key `loc` was found in (loc's last part is the key)."""
    models: list[type[BaseModel]] = [Config]
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        inner = [
            m
            for model in models
            if (f := model.model_fields.get(str(part)))
            for m in _models_in(f.annotation)
        ]
        if inner:
            models = inner
            continue
        # The tag pydantic puts in the place of a union's member (`parquet`), or a key of a mapping.
        tagged = [m for m in models if "kind" in m.model_fields and m.model_fields["kind"].default == part]
        models = tagged or models
    return sorted({name for model in models for name in model.model_fields})


def _message(err: ErrorDetails) -> str:
    """A pydantic error's message, saying what to do where pydantic's does not."""
    kind, ctx, given = err["type"], err.get("ctx") or {}, err.get("input")
    shown = _preview(given) if isinstance(given, str) else repr(given)
    if kind == "extra_forbidden" and err["loc"]:
        close = difflib.get_close_matches(str(err["loc"][-1]), _fields_at(err["loc"]), n=1)
        if close:  # a typo of a field of the same section
            return f"{err['msg']}: not a field here; did you mean `{close[0]}`?"
        return f"{err['msg']}: not a field here (docs/config.md lists every field)"
    if kind == "finite_number":
        return (
            f"{shown} is not a finite number: write the number itself (.inf and .nan are refused; {REFUSES})"
        )
    if kind == "less_than_equal" and ctx.get("le") in _AMOUNT_BOUNDS:
        return (
            f"{shown} is more than {ctx['le']:,.0f}, the most {_AMOUNT_BOUNDS[ctx['le']]} may be in any "
            f"currency: a typo? write the amount in `currency` ({REFUSES})"
        )
    return err["msg"]


def _place(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("parquet", "prometheus") and out.endswith("source"):
            continue  # the discriminated-union tag pydantic inserts
        elif part == "[key]":
            continue  # a bad dict key: the key itself is the place
        else:
            out += ("." if out else "") + str(part)
    return out


def _name_problems(raw: dict[str, Any]) -> list[tuple[tuple[Any, ...], str]]:
    """Duplicate tenant and cluster names, and tenant names that read alike on invoices (R14), with the place
    of each repeat. Found on the raw data so that they are reported together with every other problem
    (pydantic runs Config's own check only on valid fields)."""
    problems: list[tuple[tuple[Any, ...], str]] = []
    for section, what in (("tenants", "tenant"), ("clusters", "cluster")):
        items = raw.get(section)
        if not isinstance(items, list):
            continue
        first: dict[str, int] = {}
        by_slug: dict[str, int] = {}
        for index, item in enumerate(items):
            name = item.get("name") if isinstance(item, dict) else None
            if not isinstance(name, str):
                continue
            if name in first:
                problems.append(
                    (
                        (section, index, "name"),
                        f"{what} {name!r} is defined twice (first at {section}[{first[name]}])",
                    )
                )
                continue
            first[name] = index
            slug = tenant_slug(name)
            if section != "tenants" or not slug or slug in _BUCKET_SLUGS:
                continue  # a bucket's look-alike is the name's own problem (Tenant._not_reserved)
            if slug in by_slug:
                j = by_slug[slug]
                other = items[j]["name"]
                problems.append(((section, index, "name"), _slug_clash(name, other, f" ({section}[{j}])")))
            else:
                by_slug[slug] = index
    return problems


def parse_config(text: str, source: str = "<config>", base_dir: Path | None = None) -> Config:
    """Parse and validate; every problem is reported with its place (and line) in the file."""
    try:
        raw, lines = yaml_with_lines(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(source, [(where, f"not valid YAML: {getattr(exc, 'problem', exc)}")]) from None
    except _TextProblems as refused:
        raise ConfigError(source, refused.problems) from None
    if not isinstance(raw, dict):
        raise ConfigError(
            source, [("", "the file must be a YAML mapping (`gpumeter config example` prints one)")]
        )
    names = _name_problems(raw)
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        found = [(err["loc"], _message(err)) for err in exc.errors()]
        if names:  # Config's own name check (no place) repeats what _name_problems found, with places
            found = [(loc, msg) for loc, msg in found if loc]
        raise ConfigError(source, _placed(lines, [*found, *names])) from None
    if base_dir is not None:
        config = _resolve_paths(config, base_dir)
    return config


def _placed(lines: dict[str, int], found: list[tuple[tuple[Any, ...], str]]) -> list[tuple[str, str]]:
    """(loc, message) -> ("place (line N)", message), in the order of the file."""
    placed: list[tuple[int, str, str]] = []
    for loc, msg in found:
        place = _place(loc)
        line = lines.get(place)
        if line is None:  # a missing field: point at its parent
            parent = re.sub(r"(\.[^.\[\]]+|\[\d+\])$", "", place)
            line = lines.get(parent if parent != place else "")
        label = f"{place} (line {line})" if line else place
        placed.append((line or 0, label, msg.removeprefix("Value error, ")))
    placed.sort(key=lambda item: item[0])  # stable: problems of one line keep pydantic's order
    return [(label, msg) for _, label, msg in placed]


def _resolve_paths(config: Config, base_dir: Path) -> Config:
    """Relative paths in the file are relative to the file, so a config works from any directory."""

    def resolve(path: str | None) -> str | None:
        if path is None or "://" in path:
            return path
        expanded = os.path.expanduser(path)
        if os.path.isabs(expanded):
            return expanded
        return str((base_dir / expanded).resolve())

    clusters = [
        cluster.model_copy(update={"source": cluster.source.with_paths(resolve)})
        for cluster in config.clusters
    ]
    warehouse = config.warehouse.model_copy(update={"path": resolve(config.warehouse.path)})
    return config.model_copy(update={"clusters": clusters, "warehouse": warehouse})


def default_config_path() -> Path:
    """The config to use when none is named: $GPUMETER_CONFIG, else the demo's if `gpumeter demo` ran here,
    else the example shipped in the package (its relative paths are then relative to the package)."""
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    demo = DEMO_DIR / "config.yaml"
    if demo.exists():
        return demo.resolve()
    return Path(str(EXAMPLE_CONFIG))


def load_config(path: str | os.PathLike[str]) -> Config:
    file = Path(path)
    try:
        with file.open(encoding="utf-8") as handle:  # no more than parse_config takes, however large the file
            text = handle.read(MAX_CONFIG_CHARS + 1)
    except FileNotFoundError:
        raise ConfigError(
            str(file), [("", "file not found; `gpumeter demo` writes an example config")]
        ) from None
    except IsADirectoryError:
        raise ConfigError(str(file), [("", "is a directory, not a config file")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(str(file), [("", f"not UTF-8 text ({exc.reason} at byte {exc.start})")]) from None
    except OSError as exc:
        raise ConfigError(str(file), [("", f"cannot be read: {exc.strerror or exc}")]) from None
    return parse_config(text, source=str(file), base_dir=file.resolve().parent)


def config_warnings(config: Config) -> list[tuple[str, str]]:
    """Problems that do not stop a run but that finance should know of (R7 overlaps, R8 premiums)."""
    warnings: list[tuple[str, str]] = []
    # R7: within one rule kind the first tenant in file order wins; an overlap is a warning, where the two rules
    # are in effect on a common day.
    rule_sets = [list(_tenant_rule_sets(i, tenant)) for i, tenant in enumerate(config.tenants)]
    for i, first in enumerate(config.tenants):
        for j in range(i + 1, len(config.tenants)):
            for place_a, period_a, rules_a in rule_sets[i]:
                for place_b, period_b, rules_b in rule_sets[j]:
                    if _periods_meet(period_a, period_b):
                        warnings.extend(_rule_overlaps(first.name, place_a, rules_a, place_b, rules_b))
    for m, model in enumerate(config.rate_card.models):
        if model.price_per_gpu_hour is None and config.rate_card.price_source == "rate_card":
            said = "no price: GPUs of this model stop the run"
            if model.price_changes:
                first = model.price_changes[0].effective_from
                said = f"no price before {first}: GPUs of this model stop days before it"
            warnings.append((f"rate_card.models[{m}].price_per_gpu_hour", said))
    return warnings


_Period = tuple[date | None, date | None]


def _tenant_rule_sets(index: int, tenant: Tenant) -> Iterable[tuple[str, _Period, Tenant | DatedRules]]:
    """A tenant's rules for every day, then each of its dated rule sets, with its place and its days."""
    yield f"tenants[{index}]", (None, None), tenant
    for k, rules in enumerate(tenant.dated_rules):
        yield f"tenants[{index}].dated_rules[{k}]", (rules.effective_from, rules.effective_until), rules


def _periods_meet(a: _Period, b: _Period) -> bool:
    starts = [d for d in (a[0], b[0]) if d is not None]
    ends = [d for d in (a[1], b[1]) if d is not None]
    return not starts or not ends or max(starts) < min(ends)


def _rule_overlaps(
    winner: str, place_a: str, a: Tenant | DatedRules, place_b: str, b: Tenant | DatedRules
) -> Iterable[tuple[str, str]]:
    """Warnings for the rules of `b` (a later tenant's) that `a` (tenant `winner`'s) can take a holder from."""
    for x, pa_ in enumerate(a.namespaces):
        for y, pb in enumerate(b.namespaces):
            if _globs_overlap(pa_, pb):
                yield (
                    f"{place_b}.namespaces[{y}]",
                    f"{pb!r} overlaps {pa_!r} of tenant {winner!r} ({place_a}.namespaces[{x}]), "
                    "which wins for the namespaces both match",
                )
    for y, vc in enumerate(b.vclusters):
        if vc in a.vclusters:
            yield (f"{place_b}.vclusters[{y}]", f"vCluster {vc!r} is also tenant {winner!r}'s, which wins")
    for y, rule in enumerate(b.pod_labels):
        for other in a.pod_labels:
            if rule.metric_label == other.metric_label and _globs_overlap(rule.value, other.value):
                yield (
                    f"{place_b}.pod_labels[{y}]",
                    f"{rule.key}={rule.value} overlaps {other.key}={other.value} of tenant {winner!r}, which wins",
                )


def _globs_overlap(a: str, b: str) -> bool:
    """Whether two shell globs can match one name: exact for literals, conservative for two globs."""
    a_glob, b_glob = any(c in a for c in "*?["), any(c in b for c in "*?[")
    if not a_glob and not b_glob:
        return a == b
    if not a_glob:
        return fnmatch.fnmatchcase(a, b)
    if not b_glob:
        return fnmatch.fnmatchcase(b, a)
    # Both globs: compare their literal prefixes; overlapping prefixes can match a common name.
    pa_, pb = re.split(r"[*?\[]", a, maxsplit=1)[0], re.split(r"[*?\[]", b, maxsplit=1)[0]
    return pa_.startswith(pb) or pb.startswith(pa_)


def config_schema() -> dict[str, Any]:
    return Config.model_json_schema()
