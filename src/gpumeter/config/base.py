"""What every section of the config shares: the reserved bucket names and how a tenant name reads on invoices,
ISO 4217 minor units, the bounds of values, the validators of names and invoice texts, ConfigError and the base
model of every section."""

from __future__ import annotations

import re

import iso4217
from pydantic import BaseModel, ConfigDict

RESERVED_BUCKETS = ("__idle__", "__unallocated__")
IDLE = "__idle__"
UNALLOCATED = "__unallocated__"


def tenant_slug(name: str) -> str:
    """How a tenant name reads on invoices (the readable part of its invoice id): capitals, every run of
    other characters one `-`. `team-a`, `team.a` and `TEAM_A` all read TEAM-A; `__idle__` reads IDLE."""
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").upper()


# R12 rounds to the currency's minor unit. The ISO 4217 list comes from the `iso4217` package, which ships
# the maintenance agency's own published table (a hand-written table goes stale and missed XOF, IQD, ...).
ISO_4217_PUBLISHED = iso4217.__published__


def iso_minor_unit(code: str) -> int | None:
    """ISO 4217 minor unit of `code`; None for a code without one (gold XAU, the test code XTS, ...).
    KeyError for a code that is not on the list."""
    try:
        return iso4217.Currency(code).exponent
    except ValueError:
        raise KeyError(code) from None


# Bounds of the values (docs/config.md, "What the config refuses"). Far above anything real in any currency,
# far below what would overflow the exact money arithmetic (R12) or a file system: a value past them is a typo.
MAX_PRICE = 1e9  # per GPU-hour, MIG instance-hour or kWh
MAX_BUDGET = 1e15  # a tenant's monthly budget
MAX_NAME_CHARS = 63  # a name that becomes part of file and folder names (Kubernetes' DNS label limit)
MAX_TEXT_CHARS = 128  # a free text shown on invoices (pool, cost center, GPU model)
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
REFUSES = 'docs/config.md, "What the config refuses"'


def _preview(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:24] + "…")


def _at_most(value: str, what: str, limit: int, because: str) -> None:
    """ValueError where `value` is longer than `limit` characters, saying why the limit is there."""
    if len(value) > limit:
        raise ValueError(
            f"{what} {_preview(value)} is {len(value):,} characters long; at most {limit} are accepted, "
            f"as {because}: shorten it"
        )


def _file_name_part(value: object, what: str) -> object:
    """A name that becomes part of file and folder names (invoice files, `cluster=<c>` partitions): at most
    MAX_NAME_CHARS of letters, digits, `.`, `_` and `-`, starting with a letter or digit."""
    if not isinstance(value, str):
        return value
    _at_most(value, what, MAX_NAME_CHARS, "it becomes part of file and folder names")
    if not _FILE_NAME.match(value):
        bad = sorted({c for c in value if c in "/\\" or not c.isprintable()})
        why = (
            f" ({', '.join(repr(c) for c in bad)} in a file name would be a folder or end the name)"
            if bad
            else ""
        )
        raise ValueError(
            f"{what} {_preview(value)} may hold only letters, digits, '.', '_' and '-', starting with a letter "
            f"or digit: it becomes part of file and folder names{why}"
        )
    return value


def _invoice_text(value: object, what: str) -> object:
    """A free text printed on invoices: at most MAX_TEXT_CHARS, no control characters (a newline or NUL)."""
    if not isinstance(value, str):
        return value
    _at_most(value, what, MAX_TEXT_CHARS, "it is printed on invoices")
    if any(not c.isprintable() for c in value):
        raise ValueError(
            f"{what} {_preview(value)} holds a control character (a newline, tab or NUL); it is printed on "
            "invoices as one line: remove it"
        )
    return value


class ConfigError(ValueError):
    """A configuration problem. `problems` lists each one as (place, message)."""

    def __init__(self, source: str, problems: list[tuple[str, str]]):
        self.source = source
        self.problems = problems
        lines = [f"{source}: {place}: {msg}" if place else f"{source}: {msg}" for place, msg in problems]
        super().__init__("\n".join(lines))


class _Model(BaseModel):
    # Every float field is finite: `.inf` and `.nan` are refused (docs/config.md, "What the config refuses").
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
