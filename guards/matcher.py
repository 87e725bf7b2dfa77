"""Structured conditions on a tool call's facts, evaluated without ``eval``.

A condition is data: ``{"field": "arguments.amount", "gt": 10000}``, combined with
``{"all": [...]}`` or ``{"any": [...]}``. Operators: ``eq ne gt ge lt le in not_in matches``.
A field that is absent, or of a type the operator cannot compare, makes that comparison false
here; the policy never lets it get that far for a request: :func:`needs` names, for each
comparison, the field and the JSON kinds it must have, and a submission without them is refused
before any rule is chosen (a failed type comparison must never route a call to a laxer rule).
Every evaluation explains itself: ``arguments.amount 12000 > 10000``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "MISSING",
    "OPERATORS",
    "AllOf",
    "AnyOf",
    "Compare",
    "Condition",
    "Need",
    "Outcome",
    "evaluate",
    "json_kind",
    "lookup",
    "needs",
]

Op = Literal["eq", "ne", "gt", "ge", "lt", "le", "in", "not_in", "matches"]
OPERATORS: tuple[Op, ...] = ("eq", "ne", "gt", "ge", "lt", "le", "in", "not_in", "matches")
_SYMBOL = {"eq": "==", "ne": "!=", "gt": ">", "ge": ">=", "lt": "<", "le": "<="}
_MISSING = object()
MISSING = _MISSING  # what lookup returns for a path that is not there
JsonKind = Literal["number", "string", "boolean", "null", "object", "array"]


@dataclass(frozen=True, kw_only=True)
class Compare:
    field: str  # a dotted path into the facts: arguments.amount, context.environment
    op: Op
    value: object


@dataclass(frozen=True, kw_only=True)
class AllOf:
    conditions: tuple[Condition, ...]


@dataclass(frozen=True, kw_only=True)
class AnyOf:
    conditions: tuple[Condition, ...]


Condition = Compare | AllOf | AnyOf


@dataclass(frozen=True, kw_only=True)
class Outcome:
    matched: bool
    why: tuple[str, ...]  # the comparisons that decided, readable


def lookup(facts: Mapping[str, object], path: str) -> object:
    """The value at a dotted path, or a sentinel when any step is missing."""
    node: object = facts
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, Sequence) and not isinstance(node, str) and part.isdigit():
            index = int(part)
            node = node[index] if index < len(node) else _MISSING
        else:
            return _MISSING
        if node is _MISSING:
            return _MISSING
    return node


def json_kind(value: object) -> JsonKind | None:
    """The JSON type of a parsed value, or None for anything JSON cannot carry. Bools are not
    numbers, and neither are NaN and the infinities: no comparison could judge them."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number" if _number(value) is not None else None
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return None


@dataclass(frozen=True, kw_only=True)
class Need:
    """A field a comparison reads, and the JSON kinds it can be evaluated on."""

    field: str
    kinds: frozenset[JsonKind]


def _kinds_of(c: Compare) -> frozenset[JsonKind]:
    match c.op:
        case "gt" | "ge" | "lt" | "le":
            return frozenset({"number"})
        case "matches":
            return frozenset({"string"})
        case "in" | "not_in":
            options = c.value if isinstance(c.value, list | tuple) else ()
            return frozenset(k for o in options if (k := json_kind(o)) is not None)
        case "eq" | "ne":
            kind = json_kind(c.value)
            return frozenset({kind}) if kind is not None else frozenset()


def needs(condition: Condition | None) -> tuple[Need, ...]:
    """Every field ``condition`` compares, each with the kinds its comparison needs (a field
    compared twice needs a kind both comparisons accept)."""
    match condition:
        case None:
            return ()
        case Compare():
            return (Need(field=condition.field, kinds=_kinds_of(condition)),)
        case AllOf(conditions=parts) | AnyOf(conditions=parts):
            merged: dict[str, frozenset[JsonKind]] = {}
            for part in parts:
                for need in needs(part):
                    known = merged.get(need.field)
                    merged[need.field] = need.kinds if known is None else known & need.kinds
            return tuple(Need(field=f, kinds=k) for f, k in merged.items())


def _number(value: object) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _show(value: object) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _compare(c: Compare, facts: Mapping[str, object]) -> Outcome:
    actual = lookup(facts, c.field)
    if actual is _MISSING:
        return Outcome(matched=False, why=(f"{c.field} is absent",))
    match c.op:
        case "eq" | "ne":
            same = actual == c.value and isinstance(actual, bool) == isinstance(c.value, bool)
            ok = same if c.op == "eq" else not same
        case "gt" | "ge" | "lt" | "le":
            left, right = _number(actual), _number(c.value)
            if left is None or right is None:
                return Outcome(matched=False, why=(f"{c.field} {_show(actual)} is not a number",))
            ok = {
                "gt": left > right,
                "ge": left >= right,
                "lt": left < right,
                "le": left <= right,
            }[c.op]
        case "in" | "not_in":
            options = c.value if isinstance(c.value, list | tuple) else ()
            inside = any(actual == o and type(actual) is type(o) for o in options)
            ok = inside if c.op == "in" else not inside
            symbol = "in" if ok == (c.op == "in") else "not in"
            return Outcome(matched=ok, why=(f"{c.field} {_show(actual)} {symbol} {list(options)}",))
        case "matches":
            ok = isinstance(actual, str) and re.fullmatch(str(c.value), actual) is not None
            verb = "matches" if ok else "does not match"
            return Outcome(matched=ok, why=(f"{c.field} {_show(actual)} {verb} {c.value!r}",))
    symbol = _SYMBOL[c.op] if ok else f"not {_SYMBOL[c.op]}"
    return Outcome(matched=ok, why=(f"{c.field} {_show(actual)} {symbol} {_show(c.value)}",))


def evaluate(condition: Condition | None, facts: Mapping[str, object]) -> Outcome:
    """Whether ``condition`` holds for ``facts`` (``None``: always), and why."""
    match condition:
        case None:
            return Outcome(matched=True, why=())
        case Compare():
            return _compare(condition, facts)
        case AllOf(conditions=parts):
            results = [evaluate(p, facts) for p in parts]
            failed = [r for r in results if not r.matched]
            if failed:
                return Outcome(matched=False, why=failed[0].why)
            return Outcome(matched=True, why=tuple(w for r in results for w in r.why))
        case AnyOf(conditions=parts):
            results = [evaluate(p, facts) for p in parts]
            hit = next((r for r in results if r.matched), None)
            if hit is not None:
                return Outcome(matched=True, why=hit.why)
            return Outcome(matched=False, why=tuple(w for r in results for w in r.why))
