"""Deterministic guards for lead-facing turns: a pure function of the turn, the facts and the
policy.

A sales agent talking to a lead (an outside party) must never ask that lead "approve?": the lead
would be authorising themselves. Instead the pending tool call is checked here, in code, before
the tool acts: allowed channels, funnel stage, time window, operator permission, per-lead limits
over time and value limits on arguments. The verdict is ``allow``, ``refuse`` (with a message the
agent may paraphrase to the lead) or ``escalate`` (an internal approval; the lead gets a holding
message). A missing fact is a refusal naming the fact: fail closed.

Every check is evaluated and listed; the first refusal decides, else the first escalation, else
the turn is allowed. No ``eval``, no templates: the rules are data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

__all__ = [
    "CHANNELS",
    "LEAD_MESSAGES",
    "Check",
    "Facts",
    "GuardPolicy",
    "Limit",
    "PerLead",
    "ToolGuard",
    "Turn",
    "Verdict",
    "Window",
    "evaluate",
]

CHANNELS = ("whatsapp", "sms", "webchat", "email")
VerdictKind = Literal["allow", "refuse", "escalate"]

# What the agent may tell the lead, by reason. Statements, never questions asking the lead to
# approve, confirm or authorise anything (a property test holds every message to that).
LEAD_MESSAGES: dict[str, str] = {
    "allowed": "",
    "unknown_tool": "That is not something I can do in this conversation.",
    "channel_not_allowed": "I can't do that over this channel; a colleague will follow up.",
    "stage_not_allowed": "We are not at the point where I can offer that yet.",
    "unknown_stage": "I can't do that right now; a colleague will follow up.",
    "outside_window": "I can do that during business hours; a colleague will follow up then.",
    "operator_not_permitted": "I can't do that myself; a colleague will follow up.",
    "per_lead_limit": "I have already done that for you recently, so I can't repeat it now.",
    "over_limit": "That is beyond what I can offer.",
    "missing_fact": "I can't do that right now; a colleague will follow up.",
    "escalated": "I'm checking this with my team and will get back to you shortly.",
}


@dataclass(frozen=True, kw_only=True)
class Limit:
    """A bound on a numeric argument; past it the turn is refused or escalated."""

    argument: str
    max: float | None = None
    min: float | None = None
    over: Literal["refuse", "escalate"] = "refuse"
    escalate_to: str | None = None  # the role that may approve past the limit


@dataclass(frozen=True, kw_only=True)
class Window:
    """When the tool may act, in the policy's time zone (weekdays 0 = Monday)."""

    weekdays: frozenset[int] = frozenset(range(7))
    start: time = time(0, 0)
    end: time = time(23, 59, 59)
    tz: str = "UTC"


@dataclass(frozen=True, kw_only=True)
class PerLead:
    """At most ``max`` allowed calls of the tool per lead within ``within`` seconds."""

    max: int
    within: int


@dataclass(frozen=True, kw_only=True)
class ToolGuard:
    stages: frozenset[str] | None = None  # None: any known stage
    channels: frozenset[str] | None = None  # None: any channel
    operator_role: str | None = None
    window: Window | None = None
    per_lead: PerLead | None = None
    limits: tuple[Limit, ...] = ()


@dataclass(frozen=True, kw_only=True)
class GuardPolicy:
    stages: tuple[str, ...]  # the funnel's known stages, in order
    tools: Mapping[str, ToolGuard]


@dataclass(frozen=True, kw_only=True)
class Turn:
    """The pending tool call of a lead-facing turn, with the facts the agent holds."""

    channel: str
    lead_id: str
    tool: str
    arguments: Mapping[str, object]
    funnel: Mapping[str, object]
    has_operator: bool


@dataclass(frozen=True, kw_only=True)
class Facts:
    """Facts the edge fetched; ``None`` means it could not be known (fail closed)."""

    now: datetime
    operator_roles: frozenset[str] | None = None
    lead_recent_calls: int | None = None


@dataclass(frozen=True, kw_only=True)
class Check:
    rule: str
    outcome: VerdictKind
    reason_code: str
    detail: str


@dataclass(frozen=True, kw_only=True)
class Verdict:
    verdict: VerdictKind
    rule: str
    reason_code: str
    message: str
    evaluated: tuple[Check, ...] = field(default=())
    escalate_to: str | None = None

    @property
    def missing_fact(self) -> bool:
        return self.reason_code == "missing_fact"


def _number(value: object) -> int | float | None:
    """A finite number, or None. Ints stay ints: Python compares them with float limits
    exactly, with no overflow for huge values; NaN and infinities are not numbers here (every
    comparison with NaN is false, so a NaN would pass any limit)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _show(value: int | float) -> str:
    """A number as the agent or the policy wrote it: 10 not 10.0, 1234567 not 1.23457e+06."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _check_limit(index: int, limit: Limit, arguments: Mapping[str, object]) -> Check:
    rule = f"limits[{index}].{limit.argument}"
    if limit.argument not in arguments:
        return Check(
            rule=rule,
            outcome="refuse",
            reason_code="missing_fact",
            detail=f"arguments.{limit.argument} is missing",
        )
    value = _number(arguments[limit.argument])
    if value is None:
        return Check(
            rule=rule,
            outcome="refuse",
            reason_code="missing_fact",
            detail=f"arguments.{limit.argument} is not a finite number",
        )
    if limit.max is not None and value > limit.max:
        detail = f"arguments.{limit.argument} {_show(value)} > {_show(limit.max)}"
    elif limit.min is not None and value < limit.min:
        detail = f"arguments.{limit.argument} {_show(value)} < {_show(limit.min)}"
    else:
        return Check(rule=rule, outcome="allow", reason_code="allowed", detail="within the limit")
    if limit.over == "escalate" and limit.escalate_to is None:
        # an escalation to nobody is no escalation: fail closed
        detail += " (and no role to escalate to)"
        return Check(rule=rule, outcome="refuse", reason_code="over_limit", detail=detail)
    return Check(rule=rule, outcome=limit.over, reason_code="over_limit", detail=detail)


def _in_window(window: Window, now: datetime) -> bool:
    local = now.astimezone(ZoneInfo(window.tz))
    return local.weekday() in window.weekdays and window.start <= local.time() <= window.end


def _check(rule: str, ok: bool, code: str, detail: str) -> Check:
    """A yes/no rule: allowed, or refused with ``code``."""
    return Check(
        rule=rule,
        outcome="allow" if ok else "refuse",
        reason_code="allowed" if ok else code,
        detail=detail,
    )


def _channel_check(turn: Turn, guard: ToolGuard) -> Check | None:
    if guard.channels is None:
        return None
    return _check(
        "channels", turn.channel in guard.channels, "channel_not_allowed", f"channel {turn.channel}"
    )


def _stage_check(turn: Turn, guard: ToolGuard, policy: GuardPolicy) -> Check | None:
    """Checked even when any stage will do: an unknown or missing stage is a refusal."""
    stage = turn.funnel.get("stage")
    if not isinstance(stage, str) or not stage:
        return _check("stages", False, "missing_fact", "funnel.stage is missing")
    if stage not in policy.stages:
        return _check(
            "stages", False, "unknown_stage", f"funnel.stage {stage!r} is not a known stage"
        )
    if guard.stages is None:
        return None
    allowed = ", ".join(s for s in policy.stages if s in guard.stages)
    return _check(
        "stages",
        stage in guard.stages,
        "stage_not_allowed",
        f"funnel.stage {stage} (allowed: {allowed})",
    )


def _window_check(facts: Facts, guard: ToolGuard) -> Check | None:
    if guard.window is None:
        return None
    local = facts.now.astimezone(ZoneInfo(guard.window.tz))
    return _check(
        "window",
        _in_window(guard.window, facts.now),
        "outside_window",
        f"at {local.isoformat(timespec='minutes')}",
    )


def _operator_check(turn: Turn, facts: Facts, guard: ToolGuard) -> Check | None:
    role = guard.operator_role
    if role is None:
        return None
    if not turn.has_operator:
        return _check("operator_role", False, "missing_fact", "operator is missing")
    if facts.operator_roles is None:
        return _check("operator_role", False, "missing_fact", "operator roles could not be fetched")
    holds = role in facts.operator_roles
    detail = f"operator holds role {role}" if holds else f"operator does not hold role {role}"
    return _check("operator_role", holds, "operator_not_permitted", detail)


def _per_lead_check(facts: Facts, guard: ToolGuard) -> Check | None:
    per_lead = guard.per_lead
    if per_lead is None:
        return None
    if facts.lead_recent_calls is None:
        return _check(
            "per_lead", False, "missing_fact", "the lead's recent calls could not be counted"
        )
    return _check(
        "per_lead",
        facts.lead_recent_calls < per_lead.max,
        "per_lead_limit",
        f"{facts.lead_recent_calls} of {per_lead.max} within {timedelta(seconds=per_lead.within)}",
    )


def _checks(turn: Turn, facts: Facts, guard: ToolGuard, policy: GuardPolicy) -> list[Check]:
    """Every rule the tool's guard names, in a fixed order (the verdict lists them so)."""
    rules = (
        _channel_check(turn, guard),
        _stage_check(turn, guard, policy),
        _window_check(facts, guard),
        _operator_check(turn, facts, guard),
        _per_lead_check(facts, guard),
    )
    limits = (_check_limit(i, limit, turn.arguments) for i, limit in enumerate(guard.limits))
    return [*(c for c in rules if c is not None), *limits]


def evaluate(turn: Turn, facts: Facts, policy: GuardPolicy) -> Verdict:
    """The verdict for ``turn``: deterministic for the same turn, facts and policy."""
    guard = policy.tools.get(turn.tool)
    if guard is None:
        check = Check(
            rule="tools",
            outcome="refuse",
            reason_code="unknown_tool",
            detail=f"no guard for tool {turn.tool!r}",
        )
        return _verdict(turn, check, (check,), None)
    checks = tuple(_checks(turn, facts, guard, policy))
    refusal = next((c for c in checks if c.outcome == "refuse"), None)
    if refusal is not None:
        return _verdict(turn, refusal, checks, None)
    escalation = next((c for c in checks if c.outcome == "escalate"), None)
    if escalation is not None:
        index = int(escalation.rule.split("[", 1)[1].split("]", 1)[0])
        return _verdict(turn, escalation, checks, guard.limits[index].escalate_to)
    decided = Check(rule="all", outcome="allow", reason_code="allowed", detail="every rule passed")
    return _verdict(turn, decided, checks, None)


def _verdict(
    turn: Turn, decided: Check, checks: tuple[Check, ...], escalate_to: str | None
) -> Verdict:
    code = "escalated" if decided.outcome == "escalate" else decided.reason_code
    return Verdict(
        verdict=decided.outcome,
        rule=f"tools.{turn.tool}.{decided.rule}" if decided.rule != "tools" else "tools",
        reason_code=decided.reason_code,
        message=LEAD_MESSAGES[code],
        evaluated=checks,
        escalate_to=escalate_to,
    )
