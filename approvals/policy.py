"""The policy file's model: agents, roles, rules. Pure: loading YAML is the edge's job.

The keys of DESIGN.md's example are the contract; later features add keys beside them.
Rules are matched in order, first match wins, and a catch-all is required so an unknown tool
still needs a human (fail closed).
"""

from __future__ import annotations

import fnmatch
from functools import cached_property
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from approvals import hashing, turn_policy

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
    users: tuple[Annotated[str, StringConstraints(pattern=r"^[UW][A-Z0-9]{2,30}$")], ...] = ()
    usergroups: tuple[Annotated[str, StringConstraints(pattern=r"^S[A-Z0-9]{2,30}$")], ...] = ()


class Rule(_Strict):
    tool: Annotated[str, StringConstraints(min_length=1)]
    require: str
    max_expires_in: Annotated[int, Field(ge=1)] | None = None


class Expiry(_Strict):
    default: Annotated[int, Field(ge=1)] = 3600
    max: Annotated[int, Field(ge=1)] = 86400


class MatchedRule(BaseModel):
    model_config = ConfigDict(frozen=True)
    index: int
    rule: Rule

    @property
    def name(self) -> str:
        return f"rules[{self.index}] tool={self.rule.tool}"


class Policy(_Strict):
    slack: SlackSettings
    agents: dict[Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]*$")], AgentPolicy]
    roles: dict[str, Role]
    rules: Annotated[tuple[Rule, ...], Field(min_length=1)]
    expiry: Expiry = Expiry()
    turns: turn_policy.TurnPolicy | None = None

    def problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        """Cross-field problems, each with the path of the key it is about.

        Kept out of field validation so each problem can name its own key and line."""
        found: list[tuple[tuple[str | int, ...], str]] = [
            (("rules", i, "require"), f"role {rule.require!r} is not defined under roles")
            for i, rule in enumerate(self.rules)
            if rule.require not in self.roles
        ]
        if self.rules[-1].tool != "*":
            found.append(
                (
                    ("rules", len(self.rules) - 1, "tool"),
                    'the last rule must be tool: "*" so that an unknown tool still needs a '
                    "human to decide",
                )
            )
        if self.expiry.default > self.expiry.max:
            found.append((("expiry", "default"), "longer than expiry.max"))
        if self.turns is not None:
            found.extend(self.turns.problems(set(self.roles)))
        for name, agent in self.agents.items():
            if agent.owner is not None and not (agent.owner.slack_user_id or agent.owner.email):
                found.append((("agents", name, "owner"), "owner needs slack_user_id or email"))
        return found

    @cached_property
    def version(self) -> str:
        """Hash of the normalised policy, stamped on every approval and decision."""
        normalised: dict[str, Any] = self.model_dump(mode="json")
        return "pol_" + hashing.sha256_hex(hashing.canonical_json(normalised))[:16]

    def match(self, tool_name: str) -> MatchedRule:
        """The first rule whose glob matches the tool name (the catch-all guarantees one)."""
        for index, rule in enumerate(self.rules):
            if fnmatch.fnmatchcase(tool_name, rule.tool):
                return MatchedRule(index=index, rule=rule)
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
