"""The argument contract of a tool: what its call must carry for the rules to judge it.

A field a rule's ``when:`` compares, or an argument a ceiling of one of its roles names, must be
there and of a JSON type it can be evaluated on, for every rule the tool's name matches
(whichever would win); a ``tools:`` JSON Schema must hold too. Whatever cannot be evaluated is
refused before any rule is chosen, never routed to a laxer one (fail closed).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema

from guards import matcher

if TYPE_CHECKING:
    # referencing documents Resolver but exports it only from its _core module
    from referencing._core import Resolver

    from approvals.policy.schema import Policy

__all__ = [
    "ArgumentProblem",
    "Requirement",
    "argument_problems",
    "check_tool_schema",
    "editable_problems",
    "requirements",
    "schema_globs",
]


@dataclass(frozen=True, kw_only=True)
class Requirement:
    """A field a rule compares (or a ceiling of a role it requires), with the JSON kinds it can
    be evaluated on: part of the contract of every tool the rule's glob matches."""

    index: int  # of the rule
    rule: str  # rules[0] tool=transfer_*
    glob: str
    field: str  # arguments.amount, context.environment
    kinds: frozenset[str]
    because: str  # "compared by its when:", "the ceiling of role 'finance'"


@dataclass(frozen=True, kw_only=True)
class ArgumentProblem:
    field: str  # as the agent wrote it: tool.arguments.amount, context.environment
    message: str


def requirements(policy: Policy) -> tuple[Requirement, ...]:
    """What each rule needs of a call its glob matches: the fields its condition compares
    and the arguments the ceilings of its roles name, each with the kinds it must have
    (one entry per rule and field: a field both compared and capped needs both)."""
    merged: dict[tuple[int, str], Requirement] = {}
    for index, rule in enumerate(policy.rules):
        found = [
            (
                need.field,
                need.kinds,
                "compared by its when: as "
                + (" or ".join(sorted(need.kinds)) if need.kinds else "no one JSON type"),
            )
            for need in matcher.needs(rule.condition)
        ] + [
            ("arguments." + argument, frozenset({"number"}), f"the ceiling of role {role!r}")
            for role in rule.roles
            if role in policy.roles
            for argument in policy.roles[role].ceiling
        ]
        for field, kinds, because in found:
            known = merged.get((index, field))
            merged[(index, field)] = Requirement(
                index=index,
                rule=f"rules[{index}] tool={rule.tool}",
                glob=rule.tool,
                field=field,
                kinds=kinds if known is None else known.kinds & kinds,
                because=because if known is None else f"{known.because}; {because}",
            )
    return tuple(merged.values())


def argument_problems(
    policy: Policy,
    tool_name: str,
    arguments: Mapping[str, object],
    context: Mapping[str, object] | None = None,
) -> list[ArgumentProblem]:
    """Why this call cannot be evaluated by the rules its tool matches (whichever would win):
    a field a condition or ceiling compares is absent or of another type, or the arguments
    fail the tool's schema. Empty: every rule can judge it on real values."""
    facts = {"arguments": arguments, "context": context or {}}
    problems = []
    for req in policy.requirements:
        if not fnmatch.fnmatchcase(tool_name, req.glob):
            continue
        value = matcher.lookup(facts, req.field)
        kind = matcher.json_kind(value)
        if kind in req.kinds:
            continue
        if value is matcher.MISSING:
            got = "it is absent"
        else:
            got = f"it is a JSON {kind}" if kind else "it is not a JSON value"
        problems.append(
            ArgumentProblem(
                field=_wire_field(req.field),
                message=f"{req.rule} needs {_kind_names(req.kinds)} here ({req.because}); {got}",
            )
        )
    for glob in schema_globs(policy, tool_name):
        problems.extend(_schema_problems(policy, glob, arguments))
    return problems


# the JSON types a form's input can hold (an editable path must be able to hold one of them)
_EDITABLE_KINDS = frozenset({"number", "string", "boolean"})
_SCHEMA_KINDS = {"integer": "number", "number": "number", "string": "string", "boolean": "boolean",
                 "object": "object", "array": "array", "null": "null"}  # fmt: skip


def editable_problems(policy: Policy) -> list[tuple[tuple[str | int, ...], str]]:
    """Each ``editable:`` path that no call of its rule could hold as a number, a string or a
    boolean, by the argument contract (a compared field or a ceiling of another type on the
    way) or by a ``tools:`` schema that applies to every tool the rule matches; and a path
    listed twice. Each named at its key (``rules[i].editable[j]``)."""
    found: list[tuple[tuple[str | int, ...], str]] = []
    for index, rule in enumerate(policy.rules):
        seen: set[str] = set()
        for j, path in enumerate(rule.editable):
            at: tuple[str | int, ...] = ("rules", index, "editable", j)
            if path in seen:
                found.append((at, f"{path!r} is listed twice"))
                continue
            seen.add(path)
            why = _contract_forbids(policy, rule.tool, path) or _schemas_forbid(
                policy, rule.tool, path
            )
            if why is not None:
                found.append((at, f"{path!r} can never be edited: {why}"))
    return found


def _contract_forbids(policy: Policy, glob: str, path: str) -> str | None:
    """Why the argument contract of the rules the rule's tools match rules ``path`` out: a
    field on its way must be a number, a string or a boolean, or the field itself must be an
    object or an array."""
    parts = path.split(".")
    for req in policy.requirements:
        if not fnmatch.fnmatchcase(glob, req.glob):
            continue
        field = req.field.removeprefix("arguments.").split(".")
        if not req.field.startswith("arguments.") or not req.kinds:
            continue
        if field == parts and not req.kinds & _EDITABLE_KINDS:
            return (
                f"{req.rule} needs arguments.{path} to be {_kind_names(req.kinds)} ({req.because})"
            )
        inside = field == parts[: len(field)] and len(field) < len(parts)
        if inside and not req.kinds & {"object", "array"}:
            return (
                f"{req.rule} needs {req.field} to be {_kind_names(req.kinds)} "
                f"({req.because}), so it holds no {'.'.join(parts[len(field) :])}"
            )
    return None


def _schemas_forbid(policy: Policy, glob: str, path: str) -> str | None:
    """Why a ``tools:`` schema that applies to every tool ``glob`` matches rules ``path`` out:
    a step the schema's properties cannot hold, or a type no form input can hold."""
    for schema_glob, tool in policy.tools.items():
        if not fnmatch.fnmatchcase(glob, schema_glob):
            continue
        why = _schema_forbids(tool.arguments, path.split("."))
        if why is not None:
            return f"tools[{schema_glob!r}] schema: {why}"
    return None


def _schema_forbids(schema: object, parts: list[str]) -> str | None:
    """Walk ``parts`` down ``schema`` by its ``properties``/``items``; what cannot be told
    (references, combinators) is taken as possible: only a sure "never" is a load error."""
    node = schema
    for depth, part in enumerate(parts):
        if not isinstance(node, dict):
            return None
        kinds = _kinds(node)
        where = ".".join(parts[:depth]) or "the arguments object"
        if part.isdigit() and kinds is not None and "array" in kinds:
            node = node.get("items", True)
            continue
        if kinds is not None and "object" not in kinds:
            return f"{where} is {' or '.join(sorted(kinds))}, so it holds no {part}"
        properties = node.get("properties")
        if isinstance(properties, dict) and part in properties:
            node = properties[part]
        elif node.get("additionalProperties") is False and not node.get("patternProperties"):
            return f"{where} has no property {part} (additionalProperties: false)"
        else:
            return None
    if node is False:
        return "the schema forbids it"
    kinds = _kinds(node) if isinstance(node, dict) else None
    if kinds is not None and not kinds & _EDITABLE_KINDS:
        return f"it is {' or '.join(sorted(kinds))}: only numbers, strings and booleans are edited"
    return None


def _kinds(node: dict[str, Any]) -> set[str] | None:
    """The JSON kinds a schema's ``type`` allows; None when it does not say."""
    declared = node.get("type")
    names = [declared] if isinstance(declared, str) else declared
    if not isinstance(names, list):
        return None
    return {_SCHEMA_KINDS[n] for n in names if n in _SCHEMA_KINDS}


def schema_globs(policy: Policy, tool_name: str) -> tuple[str, ...]:
    """The ``tools:`` globs whose schema applies to ``tool_name``."""
    return tuple(g for g in policy.tools if fnmatch.fnmatchcase(tool_name, g))


def _wire_field(field: str) -> str:
    return "tool." + field if field.startswith("arguments.") else field


def _kind_names(kinds: frozenset[str]) -> str:
    return " or ".join(f"a JSON {k}" for k in sorted(kinds)) or "nothing (the policy conflicts)"


def _schema_problems(
    policy: Policy, glob: str, arguments: Mapping[str, object]
) -> list[ArgumentProblem]:
    """One problem per error of the ``tools:`` schema of ``glob``, each at its field."""
    try:
        errors = list(policy.schema_validators[glob].iter_errors(arguments))
    except RecursionError:
        # a recursive schema walks nested arguments with several frames a level: what it
        # cannot walk to the end it cannot vouch for (refused, and no 500)
        return [
            ArgumentProblem(
                field="tool.arguments",
                message=f"tools[{glob!r}] schema: nested too deeply to be checked",
            )
        ]
    return [
        ArgumentProblem(
            field="tool.arguments" + "".join(f".{p}" for p in error.absolute_path),
            message=f"tools[{glob!r}] schema: {error.message}",
        )
        for error in errors
    ]


def check_tool_schema(schema: dict[str, Any]) -> None:
    """Raise ValueError unless ``schema`` is a JSON Schema (2020-12) whose references all
    resolve inside it."""
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise ValueError(
            f"not a valid JSON Schema (2020-12){' at ' + where if where else ''}: {exc.message}"
        ) from None
    unresolved = _unresolved_refs(schema)
    if unresolved:
        raise ValueError(
            "a reference must point inside the schema itself (nothing is fetched); "
            + ", ".join(unresolved)
            + " does not resolve"
        )


# keywords whose values are data to compare with, not schemas: a "$ref" in them is no reference
_DATA_KEYWORDS = frozenset({"const", "default", "enum", "examples"})


def _unresolved_refs(schema: dict[str, Any]) -> list[str]:
    """Every ``$ref``/``$dynamicRef`` in ``schema`` that does not resolve within it.

    check_schema accepts any URI there, but resolving it at submit would need a fetch (never
    done) or find nothing: each such call would fail to evaluate. Refused when the policy loads.
    """
    root = referencing.jsonschema.DRAFT202012.create_resource(schema)
    unresolved: list[str] = []

    def walk(node: object, resolver: Resolver[Any]) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, resolver)
            return
        if not isinstance(node, dict):
            return
        if node is not schema and isinstance(node.get("$id"), str):
            # a nested $id moves the base that the references below it are resolved against
            subresource = referencing.jsonschema.DRAFT202012.create_resource(node)
            resolver = resolver.in_subresource(subresource)
        for keyword in ("$ref", "$dynamicRef"):
            reference = node.get(keyword)
            if isinstance(reference, str):
                try:
                    resolver.lookup(reference)
                except referencing.exceptions.Unresolvable:
                    unresolved.append(f"{keyword} {reference!r}")
        for key, value in node.items():
            if key not in _DATA_KEYWORDS:
                walk(value, resolver)

    walk(schema, referencing.Registry().resolver_with_root(root))
    return unresolved
