"""The YAML text of a config read into Python data with the line of each place in it, refusing what the
config refuses of YAML itself (aliases, merge keys, repeated keys, deep nesting, huge values) while reading."""

from __future__ import annotations

from typing import Any

import yaml

from gpumeter.config.base import MAX_NAME_CHARS, MAX_TEXT_CHARS, REFUSES

# Bounds of the text itself: checked while the YAML is composed, before any Python object is built, so that a
# hostile or mistyped file is refused at once instead of running away with memory.
MAX_CONFIG_CHARS = 4 * 1024 * 1024  # a config of thousands of tenants is a few hundred kB
MAX_DEPTH = 20  # the deepest field of the models is 7 levels down
MAX_SCALAR_CHARS = 4096  # any one value or key (a path: PATH_MAX)


class _Refused(Exception):
    """A problem of the YAML text found while reading it: its place, 1-based line and message."""

    def __init__(self, place: str, line: int, message: str):
        super().__init__(message)
        self.place, self.line, self.message = place, line, message


class _TextProblems(Exception):
    """Problems of the YAML text, as ConfigError's (place, message) without the source."""

    def __init__(self, problems: list[tuple[str, str]]):
        super().__init__(problems)
        self.problems = problems


def _label(place: str, line: int) -> str:
    if not line:
        return place
    return f"{place} (line {line})" if place else f"line {line}"


class _BadValue(Exception):
    """A scalar YAML cannot make a value of (a date of year 0): the node, and why."""

    def __init__(self, node: yaml.Node, reason: str):
        super().__init__(reason)
        self.node, self.reason = node, reason


class _ConfigLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses aliases and nesting past MAX_DEPTH while composing: a billion-laughs
    document (nine levels of nine aliases) is refused at its first alias, before anything is expanded."""

    def __init__(self, text: str):
        super().__init__(text)
        self._places: list[str] = []

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:  # type: ignore[override]
        above = self._places[-1] if self._places else ""
        if parent is None or index is None:  # the document, or a key: the key is placed at its mapping
            place = above
        elif isinstance(index, int):
            place = f"{above}[{index}]"
        else:
            key = getattr(index, "value", index)
            place = f"{above}.{key}" if above else str(key)
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _Refused(
                place,
                event.start_mark.line + 1,
                f"YAML alias *{event.anchor}: the config refuses aliases (a few lines of them can expand to "
                f"gigabytes); write the value out in full where it is used, and remove the anchor &{event.anchor}",
            )
        if len(self._places) >= MAX_DEPTH:
            event = self.peek_event()
            raise _Refused(
                place,
                event.start_mark.line + 1,
                f"nested more than {MAX_DEPTH} levels deep, which no field of the config is: a YAML mistake? ({REFUSES})",
            )
        self._places.append(place)
        try:
            return super().compose_node(parent, index)  # type: ignore[no-any-return, arg-type]
        finally:
            self._places.pop()

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as exc:  # YAML errors pass; _BadValue is neither
            raise _BadValue(node, str(exc)) from None


def _key_of(loader: _ConfigLoader, key: yaml.Node) -> object:
    """What a mapping key is once read: `on` and `true` are one key (YAML 1.1's true), `1` and `01` another."""
    if isinstance(key, yaml.ScalarNode):
        try:
            value = loader.construct_object(key, deep=True)
            hash(value)
            return (type(value).__name__, value)
        except (_BadValue, yaml.YAMLError, TypeError):
            loader.recursive_objects.pop(key, None)  # left behind by a failed construction: built again below
        return (key.tag, key.value)
    return (key.tag, id(key))  # a complex key: never a repeat of another


def yaml_with_lines(text: str) -> tuple[Any, dict[str, int]]:
    """The YAML text as Python data, and the line of each place in it (`tenants[2].namespaces[0]` -> 9).
    yaml.YAMLError for text that is not YAML; _TextProblems for what the config refuses of YAML itself:
    aliases, nesting past MAX_DEPTH, values over MAX_SCALAR_CHARS, merge keys, a key given twice in one
    mapping, and scalars YAML cannot read (a date of year 0)."""
    if len(text) > MAX_CONFIG_CHARS:
        raise _TextProblems([("", _too_long_text())])
    try:
        return _compose_and_read(text)
    except _Refused as refused:
        raise _TextProblems([(_label(refused.place, refused.line), refused.message)]) from None


def _too_long_text() -> str:
    return f"is longer than {MAX_CONFIG_CHARS:,} characters, the most a config may be ({REFUSES})"


def _compose_and_read(text: str) -> tuple[Any, dict[str, int]]:
    loader = _ConfigLoader(text)
    try:
        root = loader.get_single_node()
        lines: dict[str, int] = {}
        places: dict[int, str] = {}
        problems: list[_Refused] = []

        def walk(node: yaml.Node, place: str) -> None:
            lines.setdefault(place, node.start_mark.line + 1)
            places[id(node)] = place
            if isinstance(node, yaml.ScalarNode):
                if len(node.value) > MAX_SCALAR_CHARS:
                    problems.append(
                        _Refused(
                            place,
                            node.start_mark.line + 1,
                            f"a value of {len(node.value):,} characters: the config refuses any value over "
                            f"{MAX_SCALAR_CHARS:,} (a name at most {MAX_NAME_CHARS}, a text on invoices at most "
                            f"{MAX_TEXT_CHARS}; {REFUSES})",
                        )
                    )
            elif isinstance(node, yaml.MappingNode):
                seen: dict[object, yaml.Node] = {}
                for key, value in node.value:
                    child = f"{place}.{key.value}" if place else str(key.value)
                    if isinstance(key, yaml.ScalarNode) and len(key.value) > MAX_SCALAR_CHARS:
                        child = place  # a key that long is no field: place it at its mapping
                    line = key.start_mark.line + 1
                    lines[child] = line
                    if key.tag == "tag:yaml.org,2002:merge":
                        problems.append(
                            _Refused(
                                child,
                                line,
                                "a YAML merge key `<<`: the config refuses merges (a merged field and one "
                                "written out would be one field set twice); write the fields out",
                            )
                        )
                    which = _key_of(loader, key)
                    if which in seen:
                        first = seen[which].start_mark.line + 1
                        problems.append(
                            _Refused(
                                child,
                                line,
                                f"{key.value!r} is given twice in one mapping, at line {first} and again at "
                                f"line {line}; YAML would silently keep the last one: keep one",
                            )
                        )
                    else:
                        seen[which] = key
                    walk(value, child)
            elif isinstance(node, yaml.SequenceNode):
                for index, item in enumerate(node.value):
                    walk(item, f"{place}[{index}]")

        if root is None:
            return None, lines
        walk(root, "")
        if problems:
            raise _TextProblems([(_label(p.place, p.line), p.message) for p in problems])
        try:
            return loader.construct_document(root), lines
        except _BadValue as bad:
            place = places.get(id(bad.node), "")
            line = bad.node.start_mark.line + 1
            what = getattr(bad.node, "value", "")
            shown = repr(what) if isinstance(what, str) and len(what) <= 40 else "the value"
            raise _Refused(place, line, f"{shown} is not a value YAML can read: {bad.reason}") from None
    finally:
        loader.dispose()
