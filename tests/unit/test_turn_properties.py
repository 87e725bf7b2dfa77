"""Properties of the lead-facing turn guards over generated turns, facts and guard policies.

(a) the verdict is a function of its inputs; (b) nothing said to the lead asks them to approve,
confirm or authorise; (c) missing facts never yield ``allow``; (d) an escalation always names who
decides. (e), through the service on PostgreSQL, is tests/integration/test_turn_escalations.py.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Literal
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guards.turns import (
    CHANNELS,
    LEAD_MESSAGES,
    Facts,
    GuardPolicy,
    Limit,
    PerLead,
    ToolGuard,
    Turn,
    Verdict,
    Window,
    evaluate,
)

# --- strategies over the engine's own types ------------------------------------------------

ALPHABET = ("a", "b", "c", "d", "e")
TOOL_NAMES = ("t1", "t2", "t3")
ARGUMENT_NAMES = ("x", "y", "z")
ROLE_NAMES = ("support", "sales", "finance")
ZONES = ("UTC", "Europe/Lisbon", "America/New_York", "Asia/Tokyo", "Australia/Lord_Howe")
MISSING = "<missing>"  # funnel.stage absent (a sentinel the stage strategy may draw)

bounds = st.none() | st.integers(-50, 50).map(float) | st.floats(-1e6, 1e6, allow_nan=False)


@st.composite
def limits(draw: st.DrawFn) -> Limit:
    overs: tuple[Literal["refuse", "escalate"], ...] = ("refuse", "escalate")
    over = draw(st.sampled_from(overs))
    return Limit(
        argument=draw(st.sampled_from(ARGUMENT_NAMES)),
        max=draw(bounds),
        min=draw(bounds),
        over=over,
        # a validated policy always names who decides past an escalating limit
        escalate_to=draw(
            st.sampled_from(ROLE_NAMES)
            if over == "escalate"
            else st.none() | st.sampled_from(ROLE_NAMES)
        ),
    )


windows = st.builds(
    Window,
    weekdays=st.frozensets(st.integers(0, 6)),
    start=st.times(),
    end=st.times(),
    tz=st.sampled_from(ZONES),
)
tool_guards = st.builds(
    ToolGuard,
    stages=st.none() | st.frozensets(st.sampled_from((*ALPHABET, "zz"))),
    channels=st.none() | st.frozensets(st.sampled_from(CHANNELS)),
    operator_role=st.none() | st.sampled_from(ROLE_NAMES),
    window=st.none() | windows,
    per_lead=st.none() | st.builds(PerLead, max=st.integers(1, 4), within=st.integers(1, 10**6)),
    limits=st.lists(limits(), max_size=2).map(tuple),
)
guard_policies = st.builds(
    GuardPolicy,
    stages=st.lists(st.sampled_from(ALPHABET), unique=True, min_size=1).map(tuple),
    tools=st.dictionaries(st.sampled_from(TOOL_NAMES), tool_guards, max_size=2),
)
argument_values = st.one_of(
    st.integers(-(10**9), 10**9),
    st.floats(allow_nan=False),
    st.booleans(),
    st.text(max_size=4),
    st.none(),
    st.lists(st.integers(0, 9), max_size=2),
)
stages_drawn = st.one_of(
    st.sampled_from(ALPHABET),
    st.sampled_from(("zz", "", MISSING)),
    st.none(),
    st.integers(0, 3),
)


@st.composite
def lead_turns(draw: st.DrawFn) -> Turn:
    stage = draw(stages_drawn)
    funnel: dict[str, object] = draw(
        st.dictionaries(st.sampled_from(("deal_value", "source")), st.integers(0, 10**5))
    )
    if stage != MISSING:
        funnel["stage"] = stage
    return Turn(
        channel=draw(st.sampled_from(CHANNELS)),
        lead_id=draw(st.text(min_size=1, max_size=8)),
        tool=draw(st.sampled_from((*TOOL_NAMES, "unknown_tool"))),
        arguments=draw(
            st.dictionaries(st.sampled_from((*ARGUMENT_NAMES, "w")), argument_values, max_size=4)
        ),
        funnel=funnel,
        has_operator=draw(st.booleans()),
    )


facts_drawn = st.builds(
    Facts,
    now=st.datetimes(
        min_value=datetime(2000, 1, 1),
        max_value=datetime(2100, 1, 1),
        timezones=st.sampled_from([UTC, *(ZoneInfo(z) for z in ZONES[1:])]),
        allow_imaginary=False,
    ),
    operator_roles=st.none() | st.frozensets(st.sampled_from(ROLE_NAMES)),
    lead_recent_calls=st.none() | st.integers(0, 6),
)


@st.composite
def cases(draw: st.DrawFn) -> tuple[Turn, Facts, GuardPolicy]:
    """A turn, facts and a policy; the turn's tool is guarded most of the time."""
    guard_policy = draw(guard_policies)
    turn = draw(lead_turns())
    if guard_policy.tools and draw(st.integers(0, 4)) > 0:
        tool = draw(st.sampled_from(sorted(guard_policy.tools)))
        turn = rebuilt(turn, tool=tool)
    return turn, draw(facts_drawn), guard_policy


def rebuilt(turn: Turn, *, tool: str | None = None, reverse: bool = False) -> Turn:
    """An equal turn built from fresh dicts (optionally with the keys in the other order)."""

    def fresh(mapping: Mapping[str, object]) -> dict[str, object]:
        items = list(mapping.items())
        return dict(reversed(items) if reverse else items)

    return Turn(
        channel=str(turn.channel),
        lead_id=str(turn.lead_id),
        tool=turn.tool if tool is None else tool,
        arguments=fresh(turn.arguments),
        funnel=fresh(turn.funnel),
        has_operator=turn.has_operator,
    )


def deciding_check_rules(verdict: Verdict, tool: str) -> list[str]:
    return [c.rule for c in verdict.evaluated if f"tools.{tool}.{c.rule}" == verdict.rule]


PURE = settings(max_examples=150, deadline=None)

# --- (a) the verdict is a function of its inputs --------------------------------------------


@PURE
@given(cases())
def test_verdict_is_a_function_of_its_inputs(case: tuple[Turn, Facts, GuardPolicy]) -> None:
    turn, facts, guard_policy = case
    arguments_before = dict(turn.arguments)
    first = evaluate(turn, facts, guard_policy)
    assert evaluate(turn, facts, guard_policy) == first
    assert dict(turn.arguments) == arguments_before  # inputs are not mutated
    assert evaluate(rebuilt(turn), facts, guard_policy) == first
    assert evaluate(rebuilt(turn, reverse=True), facts, guard_policy) == first
    same_policy = GuardPolicy(
        stages=tuple(guard_policy.stages), tools=dict(reversed(list(guard_policy.tools.items())))
    )
    assert evaluate(turn, facts, same_policy) == first
    # the same instant on another clock face
    same_instant = Facts(
        now=facts.now.astimezone(UTC),
        operator_roles=facts.operator_roles,
        lead_recent_calls=facts.lead_recent_calls,
    )
    assert evaluate(turn, same_instant, guard_policy) == first


@PURE
@given(cases(), st.text(min_size=1, max_size=8))
def test_the_lead_id_never_changes_the_verdict(
    case: tuple[Turn, Facts, GuardPolicy], other_lead: str
) -> None:
    turn, facts, guard_policy = case
    other = Turn(
        channel=turn.channel,
        lead_id=other_lead,
        tool=turn.tool,
        arguments=turn.arguments,
        funnel=turn.funnel,
        has_operator=turn.has_operator,
    )
    assert evaluate(other, facts, guard_policy) == evaluate(turn, facts, guard_policy)


@PURE
@given(cases())
def test_verdict_kind_follows_the_checks(case: tuple[Turn, Facts, GuardPolicy]) -> None:
    turn, facts, guard_policy = case
    verdict = evaluate(turn, facts, guard_policy)
    outcomes = [c.outcome for c in verdict.evaluated]
    if turn.tool not in guard_policy.tools:
        assert (verdict.verdict, verdict.rule, verdict.reason_code) == (
            "refuse",
            "tools",
            "unknown_tool",
        )
        return
    if "refuse" in outcomes:
        assert verdict.verdict == "refuse"
        first = next(c for c in verdict.evaluated if c.outcome == "refuse")
        assert verdict.rule == f"tools.{turn.tool}.{first.rule}"
        assert verdict.reason_code == first.reason_code
    elif "escalate" in outcomes:
        assert verdict.verdict == "escalate"
    else:
        assert verdict.verdict == "allow"
        assert (verdict.rule, verdict.reason_code) == (f"tools.{turn.tool}.all", "allowed")
    key = "escalated" if verdict.verdict == "escalate" else verdict.reason_code
    assert verdict.message == LEAD_MESSAGES[key]


# --- (b) nothing said to the lead asks them to approve, confirm or authorise ----------------

ASKS = re.compile(r"\b(?:approv|confirm|authori[sz]|permission|consent|agree|ok\b)", re.IGNORECASE)


def assert_does_not_ask(message: str) -> None:
    assert "?" not in message, message
    assert ASKS.search(message) is None, message


def test_the_asking_pattern_catches_what_it_must() -> None:
    for asking in (
        "Do you approve?",
        "Please confirm the discount.",
        "I need you to authorise this.",
        "Can you authorize it",
        "I need your permission.",
        "Do you consent to this",
        "Do you agree",
        "Is that OK",
        "ok, then.",
    ):
        with pytest.raises(AssertionError):
            assert_does_not_ask(asking)
    assert_does_not_ask("I booked the demo for you.")  # "booked" is not "ok"


@pytest.mark.parametrize("reason", sorted(LEAD_MESSAGES))
def test_no_lead_message_asks_the_lead(reason: str) -> None:
    assert_does_not_ask(LEAD_MESSAGES[reason])


@PURE
@given(cases())
def test_no_verdict_message_asks_the_lead(case: tuple[Turn, Facts, GuardPolicy]) -> None:
    verdict = evaluate(*case)
    assert_does_not_ask(verdict.message)
    assert verdict.message in LEAD_MESSAGES.values()
    assert (verdict.message == "") is (verdict.verdict == "allow")


# --- (c) missing facts never yield allow ----------------------------------------------------


def missing_facts(turn: Turn, facts: Facts, guard: ToolGuard) -> dict[str, str]:
    """The checks whose facts are missing, by rule name, with the expected explanation."""
    found: dict[str, str] = {}
    stage = turn.funnel.get("stage")
    if not isinstance(stage, str) or not stage:
        found["stages"] = "funnel.stage is missing"
    if guard.operator_role is not None:
        if not turn.has_operator:
            found["operator_role"] = "operator is missing"
        elif facts.operator_roles is None:
            found["operator_role"] = "operator roles could not be fetched"
    if guard.per_lead is not None and facts.lead_recent_calls is None:
        found["per_lead"] = "the lead's recent calls could not be counted"
    for i, limit in enumerate(guard.limits):
        rule = f"limits[{i}].{limit.argument}"
        if limit.argument not in turn.arguments:
            found[rule] = f"arguments.{limit.argument} is missing"
        else:
            value = turn.arguments[limit.argument]
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or (isinstance(value, float) and not math.isfinite(value))
            ):
                found[rule] = f"arguments.{limit.argument} is not a finite number"
    return found


@PURE
@given(cases())
def test_missing_facts_never_yield_allow(case: tuple[Turn, Facts, GuardPolicy]) -> None:
    turn, facts, guard_policy = case
    guard = guard_policy.tools.get(turn.tool)
    verdict = evaluate(turn, facts, guard_policy)
    if guard is None:
        assert verdict.verdict == "refuse"
        return
    missing = missing_facts(turn, facts, guard)
    checks = {c.rule: c for c in verdict.evaluated}
    for rule, detail in missing.items():
        assert checks[rule].outcome == "refuse"
        assert checks[rule].reason_code == "missing_fact"
        assert checks[rule].detail == detail
    if missing:
        assert verdict.verdict == "refuse"
        [decided] = deciding_check_rules(verdict, turn.tool)
        if decided in missing:
            assert verdict.reason_code == "missing_fact"
            assert verdict.missing_fact
            assert verdict.message == LEAD_MESSAGES["missing_fact"]
    # and conversely: a missing_fact check is only ever reported for a fact that is missing
    assert {r for r, c in checks.items() if c.reason_code == "missing_fact"} == set(missing)


# --- (d) an escalation always names who decides ----------------------------------------------


@PURE
@given(cases())
def test_an_escalation_names_who_decides(case: tuple[Turn, Facts, GuardPolicy]) -> None:
    turn, facts, guard_policy = case
    verdict = evaluate(turn, facts, guard_policy)
    if verdict.verdict != "escalate":
        assert verdict.escalate_to is None
        return
    assert verdict.escalate_to is not None
    assert all(c.outcome != "refuse" for c in verdict.evaluated)
    [decided] = deciding_check_rules(verdict, turn.tool)
    first = next(c for c in verdict.evaluated if c.outcome == "escalate")
    assert decided == first.rule
    assert first.reason_code == verdict.reason_code == "over_limit"
    index = [c.rule for c in verdict.evaluated if c.rule.startswith("limits[")].index(first.rule)
    assert verdict.escalate_to == guard_policy.tools[turn.tool].limits[index].escalate_to
