"""Edits of a call's arguments by a reviewer: which fields a form offers, and what an edit makes
of the arguments. Pure: values in, a result or the problems out; nothing here does I/O.

A rule lists the argument paths reviewers may change (``editable: [amount, email.body]``,
dotted as ceilings and conditions are). A field is offered when its path is editable and holds
a number, a string or a boolean in the arguments; an edit may set only such fields, each to a
value of the same JSON type. Anything else a submission carries (a path not offered, another
type, a value RFC 8785 cannot write) is a problem, and the whole edit is refused: nothing of it
applies. Whether the edited call may run at all (the tool's schema, the argument contract, the
rule it now matches and who may approve that) is the service's business, on the result.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast

from pydantic import JsonValue

from approvals import hashing
from guards import matcher

__all__ = [
    "MAX_ARGUMENTS_BYTES",
    "Change",
    "Field",
    "FieldKind",
    "Problem",
    "Result",
    "apply",
    "changes",
    "dotted",
    "editable_fields",
    "json_pointer",
    "kind_of",
    "note_problems",
]

FieldKind = Literal["number", "string", "boolean"]
# an edited call's arguments, as RFC 8785 text, may be no larger than a request's whole body
MAX_ARGUMENTS_BYTES = 64 * 1024


@dataclass(frozen=True, kw_only=True)
class Field:
    """One field a reviewer may change: its dotted path, its current value and JSON type."""

    path: str
    value: JsonValue
    kind: FieldKind


@dataclass(frozen=True, kw_only=True)
class Problem:
    """What is wrong with an edit: at ``path`` (None: with the edit as a whole). ``forged``: no
    form of ours could have sent it (a path not offered, a value of another JSON type than the
    form's input gives), as opposed to a value the reviewer typed that does not hold."""

    path: str | None
    message: str
    forged: bool = False


@dataclass(frozen=True, kw_only=True)
class Result:
    """An edit that applies: the edited arguments, their RFC 8785 bytes and the JSON Patch
    (RFC 6902) from the requested arguments to them."""

    arguments: dict[str, JsonValue]
    canonical: bytes
    patch: tuple[dict[str, JsonValue], ...]


def kind_of(value: object) -> FieldKind | None:
    """The editable JSON type of ``value``; None for what no form input can hold (objects,
    arrays, null, and numbers that are not finite)."""
    kind = matcher.json_kind(value)
    return kind if kind == "number" or kind == "string" or kind == "boolean" else None


def editable_fields(arguments: Mapping[str, JsonValue], editable: Sequence[str]) -> list[Field]:
    """The fields a form offers, in the order the rule lists their paths: each editable path
    that holds a number, a string or a boolean in ``arguments``."""
    fields = []
    for path in dict.fromkeys(editable):
        value = matcher.lookup(arguments, path)
        kind = kind_of(value)
        if kind is not None:
            fields.append(Field(path=path, value=value, kind=kind))  # type: ignore[arg-type]
    return fields


def apply(
    requested: Mapping[str, JsonValue],
    current: Mapping[str, JsonValue],
    editable: Sequence[str],
    changes: Mapping[str, object],
) -> Result | list[Problem]:
    """``current`` (the arguments as they stand: requested, or a previous edit's) with the
    fields of ``changes`` set, or every problem found. ``changes`` maps dotted paths to values;
    a field left out keeps its value."""
    offered = {f.path: f for f in editable_fields(current, editable)}
    problems = [
        Problem(path=path, message="this field may not be edited", forged=True)
        for path in changes
        if path not in offered
    ]
    for path, value in changes.items():
        field = offered.get(path)
        if field is not None:
            problems += _value_problems(field, value)
    if problems:
        return problems
    edited = copy.deepcopy(dict(current))
    for path, value in changes.items():
        _set(edited, path, value)  # type: ignore[arg-type]
    if _same(edited, current):
        return [Problem(path=None, message="nothing was changed: use Approve instead")]
    try:
        canonical = hashing.canonical_json(edited)
    except hashing.NotCanonical as exc:
        return [Problem(path=None, message=str(exc))]
    if len(canonical) > MAX_ARGUMENTS_BYTES:
        return [
            Problem(
                path=None,
                message=f"the edited arguments would be {len(canonical)} bytes; "
                f"at most {MAX_ARGUMENTS_BYTES} are accepted",
            )
        ]
    patch: tuple[dict[str, JsonValue], ...] = tuple(
        {"op": "replace", "path": json_pointer(path), "value": value}
        for path, value in _changed(requested, edited, editable)
    )
    return Result(arguments=edited, canonical=canonical, patch=patch)


def _value_problems(field: Field, value: object) -> list[Problem]:
    """A value of another JSON type than the field's is forged (the form's input for a field
    gives its type); a number that is not finite or past I-JSON's range, or text that is not
    valid Unicode, is refused at the field."""
    kind = kind_of(value)
    if kind != field.kind:
        got = matcher.json_kind(value) or "not a JSON value"
        return [
            Problem(
                path=field.path, message=f"must be a {field.kind}, not a {got}", forged=kind is None
            )
        ]
    too_large = isinstance(value, int) and abs(value) > hashing.MAX_SAFE_INTEGER
    if too_large and not isinstance(value, bool):
        return [Problem(path=field.path, message="this number is too large to be exact")]
    if isinstance(value, float) and not math.isfinite(value):
        return [Problem(path=field.path, message="must be a finite number")]
    if isinstance(value, str):
        text_problem = _text_problem(value)
        if text_problem is not None:
            return [Problem(path=field.path, message=text_problem)]
    return []


def _text_problem(text: str) -> str | None:
    """Why ``text`` cannot be hashed or stored exactly (as intake refuses it), or None."""
    if "\x00" in text:
        return "contains NUL, which cannot be stored"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid text (a lone surrogate)"
    return None


def note_problems(note: str | None) -> list[Problem]:
    """An edit's note must be text that can be stored (no NUL, no lone surrogate)."""
    problem = _text_problem(note) if note else None
    return [] if problem is None else [Problem(path=None, message=f"the note {problem}")]


def _set(arguments: dict[str, JsonValue], path: str, value: JsonValue) -> None:
    """Set the value at a dotted path that :func:`editable_fields` found (so every step exists)."""
    *parents, last = path.split(".")
    node: object = arguments
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]  # type: ignore[index]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value  # type: ignore[index]


def _changed(
    requested: Mapping[str, JsonValue], edited: Mapping[str, JsonValue], editable: Sequence[str]
) -> list[tuple[str, JsonValue]]:
    """The editable fields (paths holding a number, a string or a boolean: only those can be
    edited) whose value in ``edited`` differs from the requested one."""
    changed = []
    for path in dict.fromkeys(editable):
        before, after = matcher.lookup(requested, path), matcher.lookup(edited, path)
        if kind_of(after) is not None and not _same(before, after):
            changed.append((path, cast(JsonValue, after)))
    return changed


def _same(one: object, other: object) -> bool:
    """Equal as JSON: by their RFC 8785 bytes (``1`` and ``1.0`` are one number, ``true`` is
    not ``1``)."""
    if one is matcher.MISSING or other is matcher.MISSING:
        return one is other
    try:
        return hashing.canonical_json(one) == hashing.canonical_json(other)
    except hashing.NotCanonical:
        return False


def json_pointer(path: str) -> str:
    """The RFC 6901 pointer of a dotted path (``~`` and ``/`` in a key escaped)."""
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in path.split("."))


def dotted(op: Mapping[str, object]) -> str:
    """The dotted path a JSON Patch operation of :func:`apply` names (for people to read)."""
    pointer = str(op.get("path", ""))
    parts = pointer.split("/")[1:]
    return ".".join(p.replace("~1", "/").replace("~0", "~") for p in parts)


@dataclass(frozen=True, kw_only=True)
class Change:
    """One change of an edit as people read it: the path, its value as requested (``absent``
    when it had none), and the edited value."""

    path: str
    before: object
    absent: bool
    after: object


def changes(
    requested: Mapping[str, JsonValue], patch: Sequence[Mapping[str, object]]
) -> list[Change]:
    """The changes a patch of :func:`apply` makes to the requested arguments."""
    out = []
    for op in patch:
        path = dotted(op)
        before = matcher.lookup(requested, path)
        absent = before is matcher.MISSING
        out.append(
            Change(
                path=path, before=None if absent else before, absent=absent, after=op.get("value")
            )
        )
    return out
