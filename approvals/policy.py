"""The policy file's model: agents, roles, rules. Pure: loading YAML is the edge's job.

The keys of DESIGN.md's example are the contract; later features add keys beside them.
Rules are matched in order, first match wins, and a catch-all is required so an unknown tool
still needs a human (fail closed).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from functools import cached_property
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from approvals import hashing, turn_policy
from guards import matcher

__all__ = [
    "AgentPolicy",
    "Expiry",
    "MatchedRule",
    "Owner",
    "Policy",
    "Role",
    "Rule",
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
    email: Annotated[str, StringConstraints(pattern=r"^[^@\s]{1,64}@[^@\s]{1,255}$")] | None = None
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


class MatchedRule(BaseModel):
    model_config = ConfigDict(frozen=True)
    index: int
    rule: Rule
    why: tuple[str, ...] = ()  # the comparisons that made it match

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
        return found

    @cached_property
    def version(self) -> str:
        """Hash of the normalised policy, stamped on every approval and decision."""
        normalised: dict[str, Any] = self.model_dump(mode="json")
        return "pol_" + hashing.sha256_hex(hashing.canonical_json(normalised))[:16]

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
                return MatchedRule(index=index, rule=rule, why=outcome.why)
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
