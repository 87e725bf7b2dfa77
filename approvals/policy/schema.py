"""The policy file's model: agents, roles, rules, expiry, on-call, tool schemas, turn guards.

The keys of DESIGN.md's example are the contract; later features add keys beside them. Rules
are matched in order, first match wins, and a catch-all is required so an unknown tool still
needs a human (fail closed).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from datetime import timedelta
from functools import cached_property
from typing import Annotated, Any, ClassVar, Literal, Self

import jsonschema
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    field_validator,
    model_validator,
)

from approvals import hashing, identity, models
from approvals.policy import conditions, contract
from approvals.policy.turn_rules import TurnPolicy
from guards import matcher

__all__ = [
    "MAX_DENY_REASONS",
    "PAGE_SERVICE_SETTINGS",
    "AgentPolicy",
    "Expiry",
    "GrantPolicy",
    "MatchedRule",
    "OnCall",
    "OpsgenieResponder",
    "OpsgenieService",
    "Owner",
    "PagerDutyService",
    "Policy",
    "Role",
    "Rule",
    "SlackSettings",
    "Step",
    "ToolContract",
    "resolve_again_after",
]

EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
# a dotted path into a call's arguments: amount, email.body, lines.0.price
EditablePath = Annotated[
    str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^.\s]+(\.[^.\s]+)*$")
]
Problems = list[tuple[tuple[str | int, ...], str]]  # (path of the key, what is wrong)


class SlackSettings(identity.Frozen):
    reviewer_channel: identity.SlackChannelId


class Owner(models.Requester):
    """Who answers for an agent: the requester of escalations when a turn names no operator."""


class AgentPolicy(identity.Frozen):
    token_env: EnvName
    callback_secret_env: EnvName | None = None
    callback_hosts: tuple[str, ...] = ()
    owner: Owner | None = None


class Role(identity.Frozen):
    model_config = ConfigDict(allow_inf_nan=False)

    users: tuple[identity.SlackUserId, ...] = ()
    usergroups: tuple[identity.SlackUsergroupId, ...] = ()
    # the most this role may approve, per argument: {amount: 50000}; above it, over_limit
    ceiling: dict[str, float] = Field(default_factory=dict)
    # guest accounts and users of another organisation (Slack Connect) may decide for it too;
    # by default they never do, whatever users or usergroups list them
    guests: bool = False


def _services(value: object) -> object:
    """``page: pagerduty`` is ``page: [pagerduty]``."""
    return (value,) if isinstance(value, str) else value


class Step(identity.Frozen):
    """One rung of an escalation ladder: ``after`` seconds from creation, do ``action``; an
    escalation may ``page`` on-call services (``oncall.pagerduty``, ``oncall.opsgenie``) as
    well as post to ``oncall.channel`` (when that is set)."""

    after: Annotated[int, Field(ge=0)]
    action: Literal["remind", "escalate"]
    page: Annotated[tuple[models.PageService, ...] | None, BeforeValidator(_services)] = None
    # its rule's severity, handed down when the rule is validated (see Rule._keep_condition)
    _severity: models.Severity = PrivateAttr("warning")

    @property
    def severity(self) -> models.Severity:
        """How loudly this step pages: its rule's ``severity``."""
        return self._severity

    @field_validator("page")
    @classmethod
    def _distinct(
        cls, value: tuple[models.PageService, ...] | None
    ) -> tuple[models.PageService, ...] | None:
        if value is not None and not value:
            raise ValueError("name at least one service (pagerduty, opsgenie), or leave page out")
        if value is not None and len(set(value)) != len(value):
            raise ValueError("names a service twice")
        return value


class GrantPolicy(identity.Frozen):
    """``grants:`` of a rule (docs/grants.md): a reviewer approving one of its calls may also
    allow more like it, for at most ``max_seconds`` and ``max_uses`` more calls, in one of
    ``scopes`` (``session``: the same agent session; ``agent``: any session of the agent)."""

    max_seconds: Annotated[int, Field(ge=60, le=30 * 86400, strict=True)]
    max_uses: Annotated[int, Field(ge=1, le=1000, strict=True)]
    scopes: Annotated[tuple[models.GrantScope, ...], Field(min_length=1)] = ("session",)

    @field_validator("scopes")
    @classmethod
    def _distinct_scopes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError("names a scope twice")
        return value


class Rule(identity.Frozen):
    tool: Annotated[str, StringConstraints(min_length=1)]
    when: dict[str, Any] | None = None  # a condition on arguments.* / context.*
    # one role, or a list: any of them may decide (none on a rule that decides by itself:
    # _no_roles_when_deciding leaves it empty there, so a rule with neither is a missing key)
    require: str | tuple[str, ...]
    # approve matching calls at once, by the policy (docs/policy.md#rules-that-approve-by-
    # themselves): instead of require, never on the catch-all
    decide: Literal["approve"] | None = None
    # with decide: one line in this channel for each call it approves (none: no line)
    log_channel: identity.SlackChannelId | None = None
    approvals: Annotated[int, Field(ge=1, le=10)] = 1  # the quorum: distinct eligible people
    deny_reason: Literal["optional", "required"] = "optional"
    # e.g. [{after: 600, action: remind}, {after: 1800, action: escalate}]; then expiry
    escalation: tuple[Step, ...] = ()
    max_expires_in: Annotated[int, Field(ge=1)] | None = None
    # where this rule's cards go (default: slack.reviewer_channel)
    channel: identity.SlackChannelId | None = None
    # how loudly an escalation of this rule pages (PagerDuty's severity; Opsgenie's priority
    # is mapped from it)
    severity: models.Severity = "warning"
    # single use: an approved call may be claimed to run within this many seconds of the
    # decision (then it lapses: ask again), and its outcome is expected within report_within
    # seconds of the claim (then the card says none was reported)
    valid_for: Annotated[int, Field(ge=1, le=30 * 86400, strict=True)] = 900
    report_within: Annotated[int, Field(ge=1, le=30 * 86400, strict=True)] = 3600
    # the argument paths a reviewer may change before approving (docs/edits.md): none unless
    # listed; each dotted as a ceiling's or a condition's path
    editable: tuple[EditablePath, ...] = ()
    # standing grants a reviewer may create on approving one of its calls (none unless set)
    grants: GrantPolicy | None = None
    # step-up (docs/step-up.md): an approval counts only once the approver confirms it with a
    # passkey whose signature covers this very call (a Slack session alone is not enough)
    verify: Literal["passkey"] | None = None
    # when: parsed as the policy is validated, and kept: every match evaluates it
    _condition: matcher.Condition | None = PrivateAttr(None)

    @model_validator(mode="before")
    @classmethod
    def _no_roles_when_deciding(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "decide" in data and "require" not in data:
            return {**data, "require": ()}
        return data

    @field_validator("when")
    @classmethod
    def _valid_condition(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        # here, a bad condition is named at its own key, beside the rule's other problems
        if value is not None:
            conditions.parse_condition(value)
        return value

    @model_validator(mode="after")
    def _keep_condition(self) -> Self:
        # parsed once, here: Rule.condition hands out this parse on every match
        if self.when is not None and self._condition is None:
            self._condition = conditions.parse_condition(self.when)
        # each step pages as loudly as its rule says (a step is parsed for one rule only)
        for step in self.escalation:
            step._severity = self.severity
        return self

    @property
    def roles(self) -> tuple[str, ...]:
        return (self.require,) if isinstance(self.require, str) else self.require

    @property
    def condition(self) -> matcher.Condition | None:
        return self._condition


# what only a person deciding uses: a rule that approves by itself may set none of them
# (require: given with decide, it names a role; _no_roles_when_deciding fills it otherwise)
_DEFAULT_RULE = {key: field.default for key, field in Rule.model_fields.items()}
_PERSON_KEYS = (
    "approvals",
    "deny_reason",
    "escalation",
    "editable",
    "grants",
    "channel",
    "severity",
    "verify",
)


def _step_up_problems(rules: tuple[Rule, ...]) -> Problems:
    """A grant approves later calls with no one present: never on a rule that asks for a
    passkey on every approval."""
    return [
        (
            ("rules", i, "grants"),
            "a rule with verify: passkey allows no grants (a grant would approve later calls "
            "without a passkey)",
        )
        for i, rule in enumerate(rules)
        if rule.verify is not None and rule.grants is not None
    ]


def _self_deciding_problems(rules: tuple[Rule, ...]) -> Problems:
    """``decide: approve`` only on a rule narrower than every tool, never on the catch-all,
    and with nothing that only a person deciding uses."""
    found: Problems = []
    for i, rule in enumerate(rules):
        if rule.decide is None:
            if rule.log_channel is not None:
                found.append((("rules", i, "log_channel"), "only a rule with decide: approve logs"))
            continue
        if i == len(rules) - 1:
            found.append((("rules", i, "decide"), "the catch-all can never approve by itself"))
        # a literal character outside *, ? and [...] sets: otherwise it may match any tool
        if not re.search(r"[^*?]", re.sub(r"\[[^\]]*\]?", "", rule.tool)):
            found.append(
                (
                    ("rules", i, "tool"),
                    "a rule that approves by itself needs a tool glob narrower than *",
                )
            )
        found += [
            (("rules", i, key), f"a rule that approves by itself (decide: approve) has no {key}")
            for key in ("require", *_PERSON_KEYS)
            # a value other than the default: the same policy dumped and read again still loads
            if (rule.roles if key == "require" else getattr(rule, key) != _DEFAULT_RULE[key])
        ]
    return found


class PagerDutyService(identity.Frozen):
    """``oncall.pagerduty``: the Events API v2 integration whose routing key is in this
    environment variable (checked at start, like an agent's ``token_env``)."""

    routing_key_env: EnvName

    # PagerDuty processes the events of one dedup_key in order: one resolve is enough
    resolve_again_after: ClassVar[timedelta | None] = None


# Opsgenie's names and ids: printable text of a sensible length (they go into a JSON body)
OpsgenieName = Annotated[
    str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")
]


class OpsgenieResponder(identity.Frozen):
    """Who an Opsgenie alert notifies, as its Alert API names them: a team, user, escalation or
    schedule, by ``id`` or ``name`` (a user by ``id`` or ``username``)."""

    type: Literal["team", "user", "escalation", "schedule"]
    id: OpsgenieName | None = None
    name: OpsgenieName | None = None
    username: OpsgenieName | None = None

    @model_validator(mode="after")
    def _one_identifier(self) -> Self:
        given = [k for k in ("id", "name", "username") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of id, name, username")
        if self.username is not None and self.type != "user":
            raise ValueError("username names a user: type must be user")
        if self.name is not None and self.type == "user":
            raise ValueError("a user is named by id or username, not name")
        return self

    def wire(self) -> dict[str, str]:
        """The responder as the Alert API takes it."""
        return self.model_dump(exclude_none=True)


class OpsgenieService(identity.Frozen):
    """``oncall.opsgenie``: an API integration whose key is in ``api_key_env``; alerts notify
    ``responders`` (none: the integration's own team)."""

    api_key_env: EnvName
    responders: tuple[OpsgenieResponder, ...] = ()

    resolve_again_after: ClassVar[timedelta | None] = timedelta(seconds=60)
    """When an alert is closed once more after a settlement. Opsgenie answers a create and a
    close with 202 and processes them later, in no promised order: a close sent as the create
    is still being processed (the approval settled as on-call was paged) finds no alert, and
    the alert then stays open. A create still on its way at a settlement comes from a trigger
    that read the approval pending before it, and leaves within that call's timeouts
    (bot/paging.py: 3 s for the card's link, 10 s for the call); a minute leaves Opsgenie ample
    time to have processed it. Sent for every settlement that paged Opsgenie (which of them
    raced cannot be told): closing a closed alert changes nothing."""


PAGE_SERVICE_SETTINGS: Mapping[models.PageService, type[PagerDutyService | OpsgenieService]] = {
    "pagerduty": PagerDutyService,
    "opsgenie": OpsgenieService,
}


def resolve_again_after(service: models.PageService) -> timedelta | None:
    """How long after a settlement ``service`` wants its incident resolved a second time (None:
    once is enough), as its settings' class declares it."""
    return PAGE_SERVICE_SETTINGS[service].resolve_again_after


class OnCall(identity.Frozen):
    """Where escalations go: a Slack channel (``usergroup`` is mentioned there), and the paging
    services an escalation step may name. At least one of them."""

    channel: identity.SlackChannelId | None = None
    usergroup: identity.SlackUsergroupId | None = None
    pagerduty: PagerDutyService | None = None
    opsgenie: OpsgenieService | None = None

    @property
    def services(self) -> tuple[models.PageService, ...]:
        """The paging services configured here."""
        return tuple(s for s in models.PAGE_SERVICES if getattr(self, s) is not None)

    def problems(self) -> Problems:
        found: Problems = []
        if self.channel is None and not self.services:
            found.append(
                (("oncall",), "needs a channel, pagerduty or opsgenie: escalations reach nobody")
            )
        elif self.channel is None and self.usergroup is not None:
            found.append(
                (
                    ("oncall", "usergroup"),
                    "is mentioned in the on-call channel's post: set oncall.channel too",
                )
            )
        return found


class Expiry(identity.Frozen):
    default: Annotated[int, Field(ge=1)] = 3600
    max: Annotated[int, Field(ge=1)] = 86400


class ToolContract(identity.Frozen):
    """``tools: {"transfer_*": {arguments: <JSON Schema>}}``: what a tool's arguments must be."""

    arguments: dict[str, Any]

    @field_validator("arguments")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        contract.check_tool_schema(value)
        return value


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


# The options a Slack static_select can hold: the Deny modal's menu of preset reasons.
MAX_DENY_REASONS = 100


class Policy(identity.Frozen):
    slack: SlackSettings
    agents: dict[identity.AgentName, AgentPolicy]
    roles: dict[str, Role]
    rules: Annotated[tuple[Rule, ...], Field(min_length=1)]
    expiry: Expiry = Expiry()
    oncall: OnCall | None = None  # where escalations go
    # preset reasons offered in the Deny modal (a free-text reason is always possible); no more
    # than its menu can offer, so that none is silently left out
    deny_reasons: Annotated[
        tuple[Annotated[str, StringConstraints(min_length=1, max_length=75)], ...],
        Field(max_length=MAX_DENY_REASONS),
    ] = ()
    turns: TurnPolicy | None = None
    # per tool glob, a JSON Schema the call's arguments must satisfy (checked at submit)
    tools: dict[Annotated[str, StringConstraints(min_length=1)], ToolContract] = Field(
        default_factory=dict
    )

    def problems(self) -> Problems:
        """Cross-field problems, each with the path of the key it is about.

        Kept out of field validation so each problem can name its own key and line."""
        found: Problems = [
            (("rules", i, "require"), f"role {role!r} is not defined under roles")
            for i, rule in enumerate(self.rules)
            for role in rule.roles
            if role not in self.roles
        ]
        found += [
            (("rules", i, "require"), "require needs at least one role")
            for i, rule in enumerate(self.rules)
            if not rule.roles and rule.decide is None
        ]
        found += _self_deciding_problems(self.rules)
        found += _step_up_problems(self.rules)
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
            found += self._step_problems(i, rule)
        if self.oncall is not None:
            found += self.oncall.problems()
        found += [
            (("rules", r.index, "when"), f"{r.field} is {r.because}")
            for r in self.requirements
            if not r.kinds
        ]
        found += contract.editable_problems(self)
        found += [
            (
                ("rules", i, "grants"),
                "grants are allowed only where one person decides (approvals: 1): a grant "
                "would let one person stand for a quorum",
            )
            for i, rule in enumerate(self.rules)
            if rule.grants is not None and rule.approvals > 1
        ]
        return found

    def _step_problems(self, index: int, rule: Rule) -> Problems:
        """An escalation step must reach someone: the on-call channel (no page), or the
        services it pages, each configured under oncall."""
        found: Problems = []
        oncall = self.oncall
        for j, step in enumerate(rule.escalation):
            at = ("rules", index, "escalation", j)
            if step.action == "remind":
                if step.page is not None:
                    found.append(((*at, "page"), "only an escalate step pages (this one reminds)"))
                continue
            if oncall is None:
                continue  # said once for the rule, above
            if step.page is None and oncall.channel is None:
                found.append(
                    (
                        at,
                        "an escalation without page: posts to oncall.channel, which is not set: "
                        "set it, or page: pagerduty | opsgenie",
                    )
                )
            for service in step.page or ():
                if getattr(oncall, service) is None:
                    key = "routing_key_env" if service == "pagerduty" else "api_key_env"
                    found.append(
                        (
                            (*at, "page"),
                            f"pages {service}, but oncall.{service} is not configured "
                            f"(oncall: {{{service}: {{{key}: …}}}})",
                        )
                    )
        return found

    @property
    def channel_keys(self) -> dict[str, str]:
        """Each key of the policy file that names a Slack channel, with its channel id: the
        reviewer channel, the on-call one, then each rule's (every key kept when several name
        one channel)."""
        keys = {"slack.reviewer_channel": self.slack.reviewer_channel}
        if self.oncall is not None and self.oncall.channel is not None:
            keys["oncall.channel"] = self.oncall.channel
        for index, rule in enumerate(self.rules):
            if rule.channel is not None:
                keys[f"rules[{index}].channel"] = rule.channel
            if rule.log_channel is not None:
                keys[f"rules[{index}].log_channel"] = rule.log_channel
        return keys

    @property
    def channels(self) -> tuple[str, ...]:
        """Every Slack channel the policy names (the bot must be a member of each), once each,
        in the order of :attr:`channel_keys`."""
        return tuple(dict.fromkeys(self.channel_keys.values()))

    @cached_property
    def requirements(self) -> tuple[contract.Requirement, ...]:
        return contract.requirements(self)

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
    ) -> list[contract.ArgumentProblem]:
        """See :func:`approvals.policy.contract.argument_problems`."""
        return contract.argument_problems(self, tool_name, arguments, context)

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
                schemas = contract.schema_globs(self, tool_name)
                return MatchedRule(index=index, rule=rule, why=outcome.why, schemas=schemas)
        raise AssertionError("the validated policy always ends with a catch-all rule")

    def expires_in(self, requested: int | None, rule: Rule) -> int:
        """The requested lifetime, defaulted and capped by the rule and the policy."""
        cap = min(rule.max_expires_in or self.expiry.max, self.expiry.max)
        return min(requested or self.expiry.default, cap)
