"""The policy file's model: agents, roles, rules. Pure: loading YAML is the edge's job.

The keys of DESIGN.md's example are the contract; later features add keys beside them.
Rules are matched in order, first match wins, and a catch-all is required so an unknown tool
still needs a human (fail closed).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlsplit

import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from approvals import hashing, models, turn_policy
from guards import matcher

if TYPE_CHECKING:
    # referencing documents Resolver but exports it only from its _core module
    from referencing._core import Resolver

__all__ = [
    "AgentPolicy",
    "ArgumentProblem",
    "Expiry",
    "MatchedRule",
    "Owner",
    "Policy",
    "Requirement",
    "Role",
    "Rule",
    "ToolContract",
    "callback_allowed",
]

EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SlackSettings(_Strict):
    reviewer_channel: Annotated[str, StringConstraints(pattern=r"^[CG][A-Z0-9]{2,30}$")]


class Owner(_Strict):
    """Who answers for an agent: the requester of escalations when a turn names no operator."""

    slack_user_id: Annotated[str, StringConstraints(pattern=r"^[UW][A-Z0-9]{2,30}$")] | None = None
    email: Annotated[str, StringConstraints(pattern=models.EMAIL_PATTERN)] | None = None
    name: Annotated[str, StringConstraints(max_length=200)] | None = None


class AgentPolicy(_Strict):
    token_env: EnvName
    callback_secret_env: EnvName | None = None
    callback_hosts: tuple[str, ...] = ()
    owner: Owner | None = None


class Role(_Strict):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    users: tuple[Annotated[str, StringConstraints(pattern=r"^[UW][A-Z0-9]{2,30}$")], ...] = ()
    usergroups: tuple[Annotated[str, StringConstraints(pattern=r"^S[A-Z0-9]{2,30}$")], ...] = ()
    # the most this role may approve, per argument: {amount: 50000}; above it, over_limit
    ceiling: dict[str, float] = Field(default_factory=dict)


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


class Rule(_Strict):
    tool: Annotated[str, StringConstraints(min_length=1)]
    when: dict[str, Any] | None = None  # a condition on arguments.* / context.*
    require: str | tuple[str, ...]  # one role, or a list: any of them may decide
    approvals: Annotated[int, Field(ge=1, le=10)] = 1  # the quorum: distinct eligible people
    deny_reason: Literal["optional", "required"] = "optional"
    # e.g. [{after: 600, action: remind}, {after: 1800, action: escalate}]; then expiry
    escalation: tuple[Step, ...] = ()
    max_expires_in: Annotated[int, Field(ge=1)] | None = None

    @field_validator("when")
    @classmethod
    def _valid_condition(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            parse_condition(value)
        return value

    @property
    def roles(self) -> tuple[str, ...]:
        return (self.require,) if isinstance(self.require, str) else self.require

    @property
    def condition(self) -> matcher.Condition | None:
        return None if self.when is None else parse_condition(self.when)


class Step(_Strict):
    """One rung of an escalation ladder: ``after`` seconds from creation, do ``action``."""

    after: Annotated[int, Field(ge=0)]
    action: Literal["remind", "escalate"]


class OnCall(_Strict):
    channel: Annotated[str, StringConstraints(pattern=r"^[CG][A-Z0-9]{2,30}$")]
    usergroup: Annotated[str, StringConstraints(pattern=r"^S[A-Z0-9]{2,30}$")] | None = None


class Expiry(_Strict):
    default: Annotated[int, Field(ge=1)] = 3600
    max: Annotated[int, Field(ge=1)] = 86400


class ToolContract(_Strict):
    """``tools: {"transfer_*": {arguments: <JSON Schema>}}``: what a tool's arguments must be."""

    arguments: dict[str, Any]

    @field_validator("arguments")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            jsonschema.Draft202012Validator.check_schema(value)
        except jsonschema.SchemaError as exc:
            where = "/".join(str(p) for p in exc.path)
            raise ValueError(
                f"not a valid JSON Schema (2020-12){' at ' + where if where else ''}: {exc.message}"
            ) from None
        unresolved = _unresolved_refs(value)
        if unresolved:
            raise ValueError(
                "a reference must point inside the schema itself (nothing is fetched); "
                + ", ".join(unresolved)
                + " does not resolve"
            )
        return value


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


def _wire_field(field: str) -> str:
    return "tool." + field if field.startswith("arguments.") else field


def _kind_names(kinds: frozenset[str]) -> str:
    return " or ".join(f"a JSON {k}" for k in sorted(kinds)) or "nothing (the policy conflicts)"


class MatchedRule(BaseModel):
    model_config = ConfigDict(frozen=True)
    index: int
    rule: Rule
    why: tuple[str, ...] = ()  # the comparisons that made it match
    schemas: tuple[str, ...] = ()  # the tools: globs whose schema applies (submit checks it first)

    @property
    def explanation(self) -> str:
        return "; ".join(self.why)

    @property
    def name(self) -> str:
        return f"rules[{self.index}] tool={self.rule.tool}"


class Policy(_Strict):
    slack: SlackSettings
    agents: dict[Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]*$")], AgentPolicy]
    roles: dict[str, Role]
    rules: Annotated[tuple[Rule, ...], Field(min_length=1)]
    expiry: Expiry = Expiry()
    oncall: OnCall | None = None  # where escalations go
    # preset reasons offered in the Deny modal (a free-text reason is always possible)
    deny_reasons: tuple[Annotated[str, StringConstraints(min_length=1, max_length=75)], ...] = ()
    turns: turn_policy.TurnPolicy | None = None
    # per tool glob, a JSON Schema the call's arguments must satisfy (checked at submit)
    tools: dict[Annotated[str, StringConstraints(min_length=1)], ToolContract] = Field(
        default_factory=dict
    )

    def problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        """Cross-field problems, each with the path of the key it is about.

        Kept out of field validation so each problem can name its own key and line."""
        found: list[tuple[tuple[str | int, ...], str]] = [
            (("rules", i, "require"), f"role {role!r} is not defined under roles")
            for i, rule in enumerate(self.rules)
            for role in rule.roles
            if role not in self.roles
        ]
        found += [
            (("rules", i, "require"), "require needs at least one role")
            for i, rule in enumerate(self.rules)
            if not rule.roles
        ]
        if self.rules[-1].tool != "*" or self.rules[-1].when is not None:
            found.append(
                (
                    ("rules", len(self.rules) - 1, "tool"),
                    'the last rule must be tool: "*" with no when: so that an unknown tool '
                    "still needs a human to decide",
                )
            )
        if self.expiry.default > self.expiry.max:
            found.append((("expiry", "default"), "longer than expiry.max"))
        if self.turns is not None:
            found.extend(self.turns.problems(set(self.roles)))
        for i, rule in enumerate(self.rules):
            if any(s.action == "escalate" for s in rule.escalation) and self.oncall is None:
                found.append((("rules", i, "escalation"), "escalation needs oncall: {channel: C…}"))
        for name, agent in self.agents.items():
            if agent.owner is not None and not (agent.owner.slack_user_id or agent.owner.email):
                found.append((("agents", name, "owner"), "owner needs slack_user_id or email"))
        found += [
            (("rules", r.index, "when"), f"{r.field} is {r.because}")
            for r in self.requirements
            if not r.kinds
        ]
        return found

    @cached_property
    def requirements(self) -> tuple[Requirement, ...]:
        """What each rule needs of a call its glob matches: the fields its condition compares
        and the arguments the ceilings of its roles name, each with the kinds it must have
        (one entry per rule and field: a field both compared and capped needs both)."""
        merged: dict[tuple[int, str], Requirement] = {}
        for index, rule in enumerate(self.rules):
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
                for argument in self.roles.get(role, Role()).ceiling
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

    @cached_property
    def schema_validators(self) -> dict[str, jsonschema.Draft202012Validator]:
        return {
            glob: jsonschema.Draft202012Validator(t.arguments) for glob, t in self.tools.items()
        }

    def argument_problems(
        self,
        tool_name: str,
        arguments: Mapping[str, object],
        context: Mapping[str, object] | None = None,
    ) -> list[ArgumentProblem]:
        """Why this call cannot be evaluated by the rules its tool matches (whichever would
        win): a field a condition or ceiling compares is absent or of another type, or the
        arguments fail the tool's schema. Empty: every rule can judge it on real values."""
        facts = {"arguments": arguments, "context": context or {}}
        problems = []
        for req in self.requirements:
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
                    message=f"{req.rule} needs {_kind_names(req.kinds)} here ({req.because}); "
                    f"{got}",
                )
            )
        for glob in self._schema_globs(tool_name):
            problems.extend(self._schema_problems(glob, arguments))
        return problems

    def _schema_problems(self, glob: str, arguments: Mapping[str, object]) -> list[ArgumentProblem]:
        """One problem per error of the ``tools:`` schema of ``glob``, each at its field."""
        try:
            errors = list(self.schema_validators[glob].iter_errors(arguments))
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

    def _schema_globs(self, tool_name: str) -> tuple[str, ...]:
        return tuple(g for g in self.tools if fnmatch.fnmatchcase(tool_name, g))

    @cached_property
    def version(self) -> str:
        """Hash of the normalised policy, stamped on every approval and decision. A label, not
        a wire contract: sorted compact JSON, which (unlike RFC 8785) takes any integer an
        operator writes in the file."""
        normalised: dict[str, Any] = self.model_dump(mode="json")
        text = hashing.legacy_canonical_text(normalised)
        return "pol_" + hashing.sha256_hex(text.encode("utf-8"))[:16]

    def match(
        self,
        tool_name: str,
        arguments: Mapping[str, object] | None = None,
        context: Mapping[str, object] | None = None,
    ) -> MatchedRule:
        """The first rule whose glob matches the tool name and whose condition holds (the
        unconditional catch-all guarantees one), with why it matched."""
        facts = {"arguments": arguments or {}, "context": context or {}}
        for index, rule in enumerate(self.rules):
            if not fnmatch.fnmatchcase(tool_name, rule.tool):
                continue
            outcome = matcher.evaluate(rule.condition, facts)
            if outcome.matched:
                return MatchedRule(
                    index=index, rule=rule, why=outcome.why, schemas=self._schema_globs(tool_name)
                )
        raise AssertionError("the validated policy always ends with a catch-all rule")

    def expires_in(self, requested: int | None, rule: Rule) -> int:
        """The requested lifetime, defaulted and capped by the rule and the policy."""
        cap = min(rule.max_expires_in or self.expiry.max, self.expiry.max)
        return min(requested or self.expiry.default, cap)


def callback_allowed(url: str, hosts: tuple[str, ...]) -> bool:
    """Whether ``url`` is http(s) to an allowed host.

    An entry ``host:port`` allows exactly that port; a bare ``host`` allows that host on the
    scheme's default port only, so a listed name cannot be used to reach another service.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username:
        return False
    host = parts.hostname.lower()
    default_port = 443 if parts.scheme == "https" else 80
    effective = port or default_port
    for entry in hosts:
        allowed_host, _, allowed_port = entry.lower().rpartition(":")
        if not allowed_host or not allowed_port.isdigit():
            allowed_host, allowed_port = entry.lower(), str(default_port)
        if allowed_host.strip("[]") == host and int(allowed_port) == effective:
            return True
    return False
