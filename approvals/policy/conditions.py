"""The ``when:`` of a rule, as the file writes it, turned into the matcher's own types."""

from __future__ import annotations

import re

from guards import matcher

__all__ = ["parse_condition"]


def parse_condition(data: object) -> matcher.Condition:
    """``{field, <op>: value}`` | ``{all: [...]}`` | ``{any: [...]}`` → the matcher's types."""
    if not isinstance(data, dict):
        raise ValueError(
            "a condition is a mapping: {field: ..., gt: ...}, {all: [...]} or {any: [...]}"
        )
    if set(data) in ({"all"}, {"any"}):
        ((key, parts),) = data.items()
        if not isinstance(parts, list) or not parts:
            raise ValueError(f"{key} needs a non-empty list of conditions")
        nested = tuple(parse_condition(p) for p in parts)
        return (
            matcher.AllOf(conditions=nested) if key == "all" else matcher.AnyOf(conditions=nested)
        )
    ops = [k for k in data if k in matcher.OPERATORS]
    field = data.get("field")
    unknown = set(data) - {"field", *matcher.OPERATORS}
    if unknown or len(ops) != 1 or not isinstance(field, str):
        raise ValueError(
            "a comparison is {field: <arguments.x | context.x>, <one of "
            + " ".join(matcher.OPERATORS)
            + ">: value}"
            + (f"; unknown keys: {', '.join(sorted(map(str, unknown)))}" if unknown else "")
        )
    if not field.startswith(("arguments.", "context.")):
        raise ValueError(f"field {field!r} must start with arguments. or context.")
    op, value = ops[0], data[ops[0]]
    if op in ("in", "not_in") and not isinstance(value, list):
        raise ValueError(f"{op} needs a list")
    if op == "matches":
        try:
            re.compile(str(value))
        except re.error as exc:
            raise ValueError(f"matches: not a regular expression ({exc})") from None
    return matcher.Compare(field=field, op=op, value=value)
