"""The lead-facing turn guards as a decision table: one row per rule type and boundary.

Each row is a tool guard, a turn and the facts the edge fetched; the expected verdict names the
deciding rule, its reason code, the message the agent may paraphrase and the explanation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta, timezone

import pytest

from approvals.policy import TurnPolicy
from guards.turns import (
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

STAGES = ("new", "contacted", "qualified", "proposal", "negotiation", "won", "lost")
TOOL = "grant_discount"
WEDNESDAY_10_UTC = datetime(2030, 1, 2, 10, 0, tzinfo=UTC)
MISSING = object()  # funnel.stage absent

# 09:00-18:00 New York, Monday to Friday (UTC-5 in January, UTC-4 in July)
NY_OFFICE = Window(
    weekdays=frozenset(range(5)), start=time(9, 0), end=time(18, 0), tz="America/New_York"
)
# all day, Monday to Friday, in Tokyo (UTC+9): the weekday is Tokyo's, not UTC's
TOKYO_WEEKDAYS = Window(weekdays=frozenset(range(5)), tz="Asia/Tokyo")


def make_turn(
    *,
    tool: str = TOOL,
    channel: str = "whatsapp",
    stage: object = "qualified",
    arguments: Mapping[str, object] | None = None,
    has_operator: bool = True,
) -> Turn:
    funnel: dict[str, object] = {"deal_value": 12000}
    if stage is not MISSING:
        funnel["stage"] = stage
    return Turn(
        channel=channel,
        lead_id="lead-42",
        tool=tool,
        arguments={} if arguments is None else arguments,
        funnel=funnel,
        has_operator=has_operator,
    )


def policy_with(guard: ToolGuard, tool: str = TOOL) -> GuardPolicy:
    return GuardPolicy(stages=STAGES, tools={tool: guard})


@dataclass(frozen=True)
class Row:
    id: str
    guard: ToolGuard
    expected: str  # allow | refuse | escalate
    reason_code: str
    rule: str  # the deciding rule, after "tools.grant_discount."
    detail: str  # the deciding check's explanation
    stage: object = "qualified"
    channel: str = "whatsapp"
    arguments: Mapping[str, object] = field(default_factory=dict)
    has_operator: bool = True
    now: datetime = WEDNESDAY_10_UTC
    roles: frozenset[str] | None = frozenset()
    recent: int | None = 0
    escalate_to: str | None = None


CAP = Limit(argument="discount_pct", max=10)
CAP_ESCALATE = Limit(argument="discount_pct", max=10, over="escalate", escalate_to="sales-lead")
FLOOR = Limit(argument="amount", min=1)
FLOOR_ESCALATE = Limit(argument="amount", min=1, over="escalate", escalate_to="finance")
AMOUNT_CAP = Limit(argument="amount", max=5000)
RANGE = Limit(argument="qty", min=1, max=3)
TWICE_A_DAY = PerLead(max=2, within=86400)
ALL_PASSED = "every rule passed"

ROWS = [
    # --- no rules: any known stage, any channel --------------------------------------------
    Row("no-rules-known-stage-allows", ToolGuard(), "allow", "allowed", "all", ALL_PASSED),
    # --- channels ----------------------------------------------------------------------
    Row(
        "channel-allowed",
        ToolGuard(channels=frozenset({"whatsapp", "email"})),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
    ),
    Row(
        "channel-not-allowed",
        ToolGuard(channels=frozenset({"whatsapp", "email"})),
        "refuse",
        "channel_not_allowed",
        "channels",
        "channel sms",
        channel="sms",
    ),
    Row(
        "channel-empty-set-refuses-every-channel",
        ToolGuard(channels=frozenset()),
        "refuse",
        "channel_not_allowed",
        "channels",
        "channel webchat",
        channel="webchat",
    ),
    # --- stages (a list) ------------------------------------------------------------------
    Row(
        "stage-in-list",
        ToolGuard(stages=frozenset({"qualified", "proposal"})),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
        stage="proposal",
    ),
    Row(
        "stage-not-in-list-names-the-allowed-in-funnel-order",
        ToolGuard(stages=frozenset({"proposal", "qualified"})),
        "refuse",
        "stage_not_allowed",
        "stages",
        "funnel.stage new (allowed: qualified, proposal)",
        stage="new",
    ),
    Row(
        "unknown-stage-with-stage-rule",
        ToolGuard(stages=frozenset({"qualified"})),
        "refuse",
        "unknown_stage",
        "stages",
        "funnel.stage 'closed' is not a known stage",
        stage="closed",
    ),
    Row(
        "unknown-stage-without-stage-rule",
        ToolGuard(),
        "refuse",
        "unknown_stage",
        "stages",
        "funnel.stage 'Qualified' is not a known stage",
        stage="Qualified",  # stage names are case-sensitive
    ),
    Row(
        "stage-missing",
        ToolGuard(),
        "refuse",
        "missing_fact",
        "stages",
        "funnel.stage is missing",
        stage=MISSING,
    ),
    Row(
        "stage-empty-string",
        ToolGuard(stages=frozenset({"qualified"})),
        "refuse",
        "missing_fact",
        "stages",
        "funnel.stage is missing",
        stage="",
    ),
    Row(
        "stage-not-a-string",
        ToolGuard(),
        "refuse",
        "missing_fact",
        "stages",
        "funnel.stage is missing",
        stage=3,
    ),
    Row(
        "stage-null",
        ToolGuard(),
        "refuse",
        "missing_fact",
        "stages",
        "funnel.stage is missing",
        stage=None,
    ),
    # --- window (clock passed in, named time zone) ----------------------------------------
    Row(
        "window-inside",
        ToolGuard(window=NY_OFFICE),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
        now=datetime(2030, 1, 2, 15, 0, tzinfo=UTC),  # Wed 10:00 in New York
    ),
    Row(
        "window-exactly-at-start",
        ToolGuard(window=NY_OFFICE),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
        now=datetime(2030, 1, 2, 14, 0, tzinfo=UTC),  # Wed 09:00 in New York
    ),
    Row(
        "window-one-second-before-start",
        ToolGuard(window=NY_OFFICE),
        "refuse",
        "outside_window",
        "window",
        "at 2030-01-02T08:59-05:00",
        now=datetime(2030, 1, 2, 13, 59, 59, tzinfo=UTC),
    ),
    Row(
        "window-exactly-at-end",
        ToolGuard(window=NY_OFFICE),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
        now=datetime(2030, 1, 2, 23, 0, tzinfo=UTC),  # Wed 18:00 in New York
    ),
    Row(
        "window-one-second-after-end",
        ToolGuard(window=NY_OFFICE),
        "refuse",
        "outside_window",
        "window",
        "at 2030-01-02T18:00-05:00",
        now=datetime(2030, 1, 2, 23, 0, 1, tzinfo=UTC),
    ),
    Row(
        "window-start-follows-daylight-saving",
        ToolGuard(window=NY_OFFICE),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
        now=datetime(2030, 7, 3, 13, 0, tzinfo=UTC),  # Wed 09:00 EDT
    ),
    Row(
        "window-before-start-in-summer",
        ToolGuard(window=NY_OFFICE),
        "refuse",
        "outside_window",
        "window",
        "at 2030-07-03T08:59-04:00",
        now=datetime(2030, 7, 3, 12, 59, tzinfo=UTC),
    ),
    Row(
        "window-weekend-refused",
        ToolGuard(window=NY_OFFICE),
        "refuse",
        "outside_window",
        "window",
        "at 2030-01-05T10:00-05:00",
        now=datetime(2030, 1, 5, 15, 0, tzinfo=UTC),  # Sat 10:00 in New York
    ),
    Row(
        "window-weekday-is-local-friday-utc-is-saturday-tokyo",
        ToolGuard(window=TOKYO_WEEKDAYS),
        "refuse",
        "outside_window",
        "window",
        "at 2030-01-05T05:00+09:00",
        now=datetime(2030, 1, 4, 20, 0, tzinfo=UTC),  # Fri in UTC, Sat in Tokyo
    ),
    Row(
        "window-weekday-is-local-sunday-utc-is-monday-tokyo",
        ToolGuard(window=TOKYO_WEEKDAYS),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
        now=datetime(2030, 1, 6, 20, 0, tzinfo=UTC),  # Sun in UTC, Mon in Tokyo
    ),
    Row(
        "window-clock-in-another-offset-is-converted",
        ToolGuard(window=NY_OFFICE),
        "refuse",
        "outside_window",
        "window",
        "at 2030-01-02T08:30-05:00",
        # 15:30 at +02:00 is 13:30 UTC, 08:30 in New York
        now=datetime(2030, 1, 2, 15, 30, tzinfo=timezone(timedelta(hours=2))),
    ),
    # --- operator_role -----------------------------------------------------------------
    Row(
        "operator-role-held",
        ToolGuard(operator_role="support"),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
        roles=frozenset({"support"}),
    ),
    Row(
        "operator-role-not-held",
        ToolGuard(operator_role="support"),
        "refuse",
        "operator_not_permitted",
        "operator_role",
        "operator does not hold role support",
        roles=frozenset({"sales"}),
    ),
    Row(
        "operator-holds-no-roles",
        ToolGuard(operator_role="support"),
        "refuse",
        "operator_not_permitted",
        "operator_role",
        "operator does not hold role support",
        roles=frozenset(),
    ),
    Row(
        "no-operator",
        ToolGuard(operator_role="support"),
        "refuse",
        "missing_fact",
        "operator_role",
        "operator is missing",
        has_operator=False,
        roles=frozenset({"support"}),
    ),
    Row(
        "operator-roles-unknown",
        ToolGuard(operator_role="support"),
        "refuse",
        "missing_fact",
        "operator_role",
        "operator roles could not be fetched",
        roles=None,
    ),
    Row(
        "no-operator-needed-without-the-rule",
        ToolGuard(),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
        has_operator=False,
        roles=None,
    ),
    # --- per_lead ----------------------------------------------------------------------
    Row(
        "per-lead-below-max",
        ToolGuard(per_lead=TWICE_A_DAY),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
        recent=1,
    ),
    Row(
        "per-lead-exactly-at-max-refused",
        ToolGuard(per_lead=TWICE_A_DAY),
        "refuse",
        "per_lead_limit",
        "per_lead",
        "2 of 2 within 1 day, 0:00:00",
        recent=2,
    ),
    Row(
        "per-lead-above-max",
        ToolGuard(per_lead=TWICE_A_DAY),
        "refuse",
        "per_lead_limit",
        "per_lead",
        "5 of 2 within 1 day, 0:00:00",
        recent=5,
    ),
    Row(
        "per-lead-count-unknown",
        ToolGuard(per_lead=TWICE_A_DAY),
        "refuse",
        "missing_fact",
        "per_lead",
        "the lead's recent calls could not be counted",
        recent=None,
    ),
    Row(
        "per-lead-count-unneeded-without-the-rule",
        ToolGuard(),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
        recent=None,
    ),
    # --- limits: max -------------------------------------------------------------------
    Row(
        "max-below",
        ToolGuard(limits=(CAP,)),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
        arguments={"discount_pct": 9},
    ),
    Row(
        "max-exactly-at-limit-allowed",
        ToolGuard(limits=(CAP,)),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
        arguments={"discount_pct": 10},
    ),
    Row(
        "max-exactly-at-limit-as-float-allowed",
        ToolGuard(limits=(CAP,)),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
        arguments={"discount_pct": 10.0},
    ),
    Row(
        "max-just-over-refused",
        ToolGuard(limits=(CAP,)),
        "refuse",
        "over_limit",
        "limits[0].discount_pct",
        "arguments.discount_pct 10.5 > 10",
        arguments={"discount_pct": 10.5},
    ),
    Row(
        "max-over-refused",
        ToolGuard(limits=(CAP,)),
        "refuse",
        "over_limit",
        "limits[0].discount_pct",
        "arguments.discount_pct 15 > 10",
        arguments={"discount_pct": 15},
    ),
    Row(
        "max-over-escalated",
        ToolGuard(limits=(CAP_ESCALATE,)),
        "escalate",
        "over_limit",
        "limits[0].discount_pct",
        "arguments.discount_pct 15 > 10",
        arguments={"discount_pct": 15},
        escalate_to="sales-lead",
    ),
    Row(
        "max-exactly-at-limit-not-escalated",
        ToolGuard(limits=(CAP_ESCALATE,)),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
        arguments={"discount_pct": 10},
    ),
    Row(
        "amount-exactly-at-5000-allowed",
        ToolGuard(limits=(AMOUNT_CAP,)),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
        arguments={"amount": 5000},
    ),
    Row(
        "amount-one-over-5000-refused",
        ToolGuard(limits=(AMOUNT_CAP,)),
        "refuse",
        "over_limit",
        "limits[0].amount",
        "arguments.amount 5001 > 5000",
        arguments={"amount": 5001},
    ),
    Row(
        "amount-infinite-refused",
        ToolGuard(limits=(AMOUNT_CAP,)),
        "refuse",
        "missing_fact",
        "limits[0].amount",
        "arguments.amount is not a finite number",
        arguments={"amount": float("inf")},
    ),
    # --- limits: min -------------------------------------------------------------------
    Row(
        "min-exactly-at-limit-allowed",
        ToolGuard(limits=(FLOOR,)),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
        arguments={"amount": 1},
    ),
    Row(
        "min-just-under-refused",
        ToolGuard(limits=(FLOOR,)),
        "refuse",
        "over_limit",
        "limits[0].amount",
        "arguments.amount 0.5 < 1",
        arguments={"amount": 0.5},
    ),
    Row(
        "min-negative-refused",
        ToolGuard(limits=(FLOOR,)),
        "refuse",
        "over_limit",
        "limits[0].amount",
        "arguments.amount -3 < 1",
        arguments={"amount": -3},
    ),
    Row(
        "min-under-escalated",
        ToolGuard(limits=(FLOOR_ESCALATE,)),
        "escalate",
        "over_limit",
        "limits[0].amount",
        "arguments.amount 0 < 1",
        arguments={"amount": 0},
        escalate_to="finance",
    ),
    Row(
        "range-inside",
        ToolGuard(limits=(RANGE,)),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
        arguments={"qty": 2},
    ),
    Row(
        "range-at-both-ends-allowed-max",
        ToolGuard(limits=(RANGE,)),
        "allow",
        "allowed",
        "all",
        ALL_PASSED,
        arguments={"qty": 3},
    ),
    Row(
        "range-above",
        ToolGuard(limits=(RANGE,)),
        "refuse",
        "over_limit",
        "limits[0].qty",
        "arguments.qty 4 > 3",
        arguments={"qty": 4},
    ),
    Row(
        "range-below",
        ToolGuard(limits=(RANGE,)),
        "refuse",
        "over_limit",
        "limits[0].qty",
        "arguments.qty 0 < 1",
        arguments={"qty": 0},
    ),
    # --- limits: missing or non-numeric arguments fail closed ------------------------------
    Row(
        "limit-argument-missing",
        ToolGuard(limits=(CAP_ESCALATE,)),
        "refuse",
        "missing_fact",
        "limits[0].discount_pct",
        "arguments.discount_pct is missing",
        arguments={"discount": 15},
    ),
    Row(
        "limit-argument-numeric-string",
        ToolGuard(limits=(CAP,)),
        "refuse",
        "missing_fact",
        "limits[0].discount_pct",
        "arguments.discount_pct is not a finite number",
        arguments={"discount_pct": "5"},
    ),
    Row(
        "limit-argument-bool-true",
        ToolGuard(limits=(CAP,)),
        "refuse",
        "missing_fact",
        "limits[0].discount_pct",
        "arguments.discount_pct is not a finite number",
        arguments={"discount_pct": True},
    ),
    Row(
        "limit-argument-bool-false",
        ToolGuard(limits=(FLOOR,)),
        "refuse",
        "missing_fact",
        "limits[0].amount",
        "arguments.amount is not a finite number",
        arguments={"amount": False},
    ),
    Row(
        "limit-argument-null",
        ToolGuard(limits=(CAP,)),
        "refuse",
        "missing_fact",
        "limits[0].discount_pct",
        "arguments.discount_pct is not a finite number",
        arguments={"discount_pct": None},
    ),
    Row(
        "limit-argument-list",
        ToolGuard(limits=(CAP,)),
        "refuse",
        "missing_fact",
        "limits[0].discount_pct",
        "arguments.discount_pct is not a finite number",
        arguments={"discount_pct": [5]},
    ),
    # --- precedence: first refusal decides, a refusal beats an escalation -----------------
    Row(
        "refusal-beats-escalation-from-an-earlier-rule",
        ToolGuard(channels=frozenset({"email"}), limits=(CAP_ESCALATE,)),
        "refuse",
        "channel_not_allowed",
        "channels",
        "channel whatsapp",
        arguments={"discount_pct": 15},
    ),
    Row(
        "refusal-beats-escalation-listed-before-it",
        ToolGuard(limits=(CAP_ESCALATE, AMOUNT_CAP)),
        "refuse",
        "over_limit",
        "limits[1].amount",
        "arguments.amount 6000 > 5000",
        arguments={"discount_pct": 15, "amount": 6000},
    ),
    Row(
        "missing-fact-beats-escalation",
        ToolGuard(limits=(CAP_ESCALATE, AMOUNT_CAP)),
        "refuse",
        "missing_fact",
        "limits[1].amount",
        "arguments.amount is missing",
        arguments={"discount_pct": 15},
    ),
    Row(
        "first-refusal-decides-channel-before-stage",
        ToolGuard(channels=frozenset({"email"}), stages=frozenset({"won"})),
        "refuse",
        "channel_not_allowed",
        "channels",
        "channel whatsapp",
    ),
    Row(
        "first-refusal-decides-stage-before-operator",
        ToolGuard(stages=frozenset({"won"}), operator_role="support"),
        "refuse",
        "stage_not_allowed",
        "stages",
        "funnel.stage qualified (allowed: won)",
        roles=None,
    ),
    Row(
        "first-refusal-decides-operator-before-per-lead",
        ToolGuard(operator_role="support", per_lead=TWICE_A_DAY),
        "refuse",
        "operator_not_permitted",
        "operator_role",
        "operator does not hold role support",
        recent=9,
    ),
    Row(
        "first-escalation-decides-among-escalations",
        ToolGuard(limits=(FLOOR_ESCALATE, CAP_ESCALATE)),
        "escalate",
        "over_limit",
        "limits[0].amount",
        "arguments.amount 0 < 1",
        arguments={"discount_pct": 15, "amount": 0},
        escalate_to="finance",
    ),
    Row(
        "second-limit-escalates-when-the-first-passes",
        ToolGuard(limits=(FLOOR_ESCALATE, CAP_ESCALATE)),
        "escalate",
        "over_limit",
        "limits[1].discount_pct",
        "arguments.discount_pct 15 > 10",
        arguments={"discount_pct": 15, "amount": 100},
        escalate_to="sales-lead",
    ),
]


def run(row: Row) -> Verdict:
    turn = make_turn(
        stage=row.stage, channel=row.channel, arguments=row.arguments, has_operator=row.has_operator
    )
    facts = Facts(now=row.now, operator_roles=row.roles, lead_recent_calls=row.recent)
    return evaluate(turn, facts, policy_with(row.guard))


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_decision_table(row: Row) -> None:
    verdict = run(row)
    assert verdict.verdict == row.expected
    assert verdict.reason_code == row.reason_code
    assert verdict.rule == f"tools.{TOOL}.{row.rule}"
    assert verdict.escalate_to == row.escalate_to
    assert verdict.missing_fact is (row.reason_code == "missing_fact")
    message_key = "escalated" if row.expected == "escalate" else row.reason_code
    assert verdict.message == LEAD_MESSAGES[message_key]
    if row.expected != "allow":
        assert verdict.message, "a refusal or escalation always tells the agent what to say"
    # the deciding check is listed, with the explanation
    decided = [c for c in verdict.evaluated if f"tools.{TOOL}.{c.rule}" == verdict.rule]
    if row.expected == "allow":
        assert decided == []
        assert row.detail == ALL_PASSED
        assert all(c.outcome == "allow" for c in verdict.evaluated)
        assert all(c.reason_code == "allowed" for c in verdict.evaluated)
    else:
        assert len(decided) == 1
        [check] = decided
        assert check.outcome == row.expected
        assert check.reason_code == row.reason_code
        assert check.detail == row.detail


# --- stage ranges, through the policy file's conversion -------------------------------------


def range_guards(stages: object) -> GuardPolicy:
    return TurnPolicy.model_validate(
        {"stages": list(STAGES), "tools": {TOOL: {"stages": stages}}}
    ).guards


RANGES = [
    ("from-qualified-at-the-start", {"from": "qualified"}, "qualified", "allow"),
    ("from-qualified-later-stage", {"from": "qualified"}, "won", "allow"),
    ("from-qualified-last-stage", {"from": "qualified"}, "lost", "allow"),
    ("from-qualified-earlier-stage", {"from": "qualified"}, "contacted", "refuse"),
    ("from-qualified-first-stage", {"from": "qualified"}, "new", "refuse"),
    ("from-to-inside", {"from": "contacted", "to": "proposal"}, "qualified", "allow"),
    ("from-to-exactly-at-to", {"from": "contacted", "to": "proposal"}, "proposal", "allow"),
    ("from-to-exactly-at-from", {"from": "contacted", "to": "proposal"}, "contacted", "allow"),
    ("from-to-after-to", {"from": "contacted", "to": "proposal"}, "negotiation", "refuse"),
    ("from-to-before-from", {"from": "contacted", "to": "proposal"}, "new", "refuse"),
    ("list-in", ["qualified", "won"], "won", "allow"),
    ("list-gap-not-a-range", ["qualified", "won"], "proposal", "refuse"),
]


@pytest.mark.parametrize(
    ("stages", "stage", "expected"),
    [r[1:] for r in RANGES],
    ids=[r[0] for r in RANGES],
)
def test_stage_rules_from_the_policy_file(stages: object, stage: str, expected: str) -> None:
    verdict = evaluate(make_turn(stage=stage), Facts(now=WEDNESDAY_10_UTC), range_guards(stages))
    assert verdict.verdict == expected
    if expected == "refuse":
        assert (verdict.rule, verdict.reason_code) == (
            f"tools.{TOOL}.stages",
            "stage_not_allowed",
        )
        assert verdict.message == LEAD_MESSAGES["stage_not_allowed"]
    else:
        assert [c.rule for c in verdict.evaluated] == ["stages"]


def test_range_refusal_names_the_allowed_stages_in_funnel_order() -> None:
    verdict = evaluate(
        make_turn(stage="new"), Facts(now=WEDNESDAY_10_UTC), range_guards({"from": "proposal"})
    )
    [check] = verdict.evaluated
    assert check.detail == "funnel.stage new (allowed: proposal, negotiation, won, lost)"


def test_unknown_stage_is_refused_even_where_a_range_would_start() -> None:
    verdict = evaluate(
        make_turn(stage="closed-won"),
        Facts(now=WEDNESDAY_10_UTC),
        range_guards({"from": "qualified"}),
    )
    assert (verdict.verdict, verdict.reason_code) == ("refuse", "unknown_stage")


# --- unknown tool ---------------------------------------------------------------------------


def test_unknown_tool_is_refused() -> None:
    policy = policy_with(ToolGuard())
    verdict = evaluate(make_turn(tool="wire_money"), Facts(now=WEDNESDAY_10_UTC), policy)
    assert verdict.verdict == "refuse"
    assert verdict.rule == "tools"
    assert verdict.reason_code == "unknown_tool"
    assert verdict.message == LEAD_MESSAGES["unknown_tool"]
    assert verdict.escalate_to is None
    [check] = verdict.evaluated
    assert (check.rule, check.outcome, check.detail) == (
        "tools",
        "refuse",
        "no guard for tool 'wire_money'",
    )


def test_unknown_tool_is_refused_whatever_the_facts() -> None:
    # no guards at all (a policy without a turns: section): every tool is unknown
    empty = GuardPolicy(stages=(), tools={})
    verdict = evaluate(
        make_turn(stage=MISSING, has_operator=False),
        Facts(now=WEDNESDAY_10_UTC, operator_roles=None, lead_recent_calls=None),
        empty,
    )
    assert (verdict.verdict, verdict.reason_code) == ("refuse", "unknown_tool")


def test_tool_names_are_matched_exactly_not_as_globs() -> None:
    policy = GuardPolicy(stages=STAGES, tools={"grant_*": ToolGuard()})
    verdict = evaluate(make_turn(tool=TOOL), Facts(now=WEDNESDAY_10_UTC), policy)
    assert verdict.reason_code == "unknown_tool"


# --- explainability: every check is evaluated and listed, in order --------------------------

FULL = ToolGuard(
    channels=frozenset({"whatsapp"}),
    stages=frozenset({"qualified"}),
    window=NY_OFFICE,
    operator_role="support",
    per_lead=TWICE_A_DAY,
    limits=(CAP_ESCALATE, AMOUNT_CAP),
)


def test_every_check_is_listed_in_order_when_all_pass() -> None:
    verdict = evaluate(
        make_turn(arguments={"discount_pct": 5, "amount": 100}),
        Facts(
            now=datetime(2030, 1, 2, 15, 0, tzinfo=UTC),
            operator_roles=frozenset({"support"}),
            lead_recent_calls=0,
        ),
        policy_with(FULL),
    )
    assert verdict.verdict == "allow"
    assert verdict.rule == f"tools.{TOOL}.all"
    assert verdict.message == ""
    assert [c.rule for c in verdict.evaluated] == [
        "channels",
        "stages",
        "window",
        "operator_role",
        "per_lead",
        "limits[0].discount_pct",
        "limits[1].amount",
    ]
    assert {c.outcome for c in verdict.evaluated} == {"allow"}


def test_every_check_is_listed_even_after_the_deciding_refusal() -> None:
    verdict = evaluate(
        make_turn(channel="sms", stage="new", arguments={"discount_pct": 15}),
        Facts(
            now=datetime(2030, 1, 5, 15, 0, tzinfo=UTC), operator_roles=None, lead_recent_calls=0
        ),
        policy_with(FULL),
    )
    assert (verdict.verdict, verdict.rule) == ("refuse", f"tools.{TOOL}.channels")
    outcomes = {c.rule: (c.outcome, c.reason_code) for c in verdict.evaluated}
    assert outcomes == {
        "channels": ("refuse", "channel_not_allowed"),
        "stages": ("refuse", "stage_not_allowed"),
        "window": ("refuse", "outside_window"),
        "operator_role": ("refuse", "missing_fact"),
        "per_lead": ("allow", "allowed"),
        "limits[0].discount_pct": ("escalate", "over_limit"),
        "limits[1].amount": ("refuse", "missing_fact"),
    }


def test_same_inputs_same_verdict() -> None:
    turn = make_turn(arguments={"discount_pct": 15, "amount": 100})
    facts = Facts(
        now=datetime(2030, 1, 2, 15, 0, tzinfo=UTC),
        operator_roles=frozenset({"support"}),
        lead_recent_calls=1,
    )
    first = evaluate(turn, facts, policy_with(FULL))
    assert first.verdict == "escalate"
    assert all(evaluate(turn, facts, policy_with(FULL)) == first for _ in range(3))


def test_the_lead_id_does_not_change_the_verdict() -> None:
    base = make_turn(arguments={"discount_pct": 15})
    other = Turn(
        channel=base.channel,
        lead_id="someone-else",
        tool=base.tool,
        arguments=base.arguments,
        funnel=base.funnel,
        has_operator=base.has_operator,
    )
    facts = Facts(now=WEDNESDAY_10_UTC)
    policy = policy_with(ToolGuard(limits=(CAP_ESCALATE,)))
    assert evaluate(base, facts, policy) == evaluate(other, facts, policy)


# --- bugs found -------------------------------------------------------------------------------


def test_nan_argument_never_passes_a_limit() -> None:
    verdict = evaluate(
        make_turn(arguments={"discount_pct": float("nan")}),
        Facts(now=WEDNESDAY_10_UTC),
        policy_with(ToolGuard(limits=(CAP_ESCALATE,))),
    )
    assert verdict.verdict != "allow"
    assert verdict.reason_code == "missing_fact"


def test_huge_integer_argument_is_refused_not_a_crash() -> None:
    verdict = evaluate(
        make_turn(arguments={"amount": 10**400}),
        Facts(now=WEDNESDAY_10_UTC),
        policy_with(ToolGuard(limits=(AMOUNT_CAP,))),
    )
    assert verdict.verdict == "refuse"


def test_explanation_shows_the_argument_as_sent() -> None:
    verdict = evaluate(
        make_turn(arguments={"amount": 1234567}),
        Facts(now=WEDNESDAY_10_UTC),
        policy_with(ToolGuard(limits=(AMOUNT_CAP,))),
    )
    [check] = verdict.evaluated
    assert check.detail == "arguments.amount 1234567 > 5000"


def test_explanation_of_a_value_just_over_the_limit_is_not_contradictory() -> None:
    verdict = evaluate(
        make_turn(arguments={"discount_pct": 10.0000001}),
        Facts(now=WEDNESDAY_10_UTC),
        policy_with(ToolGuard(limits=(CAP,))),
    )
    assert verdict.verdict == "refuse"
    [check] = verdict.evaluated
    assert check.detail != "arguments.discount_pct 10 > 10"


def test_escalation_to_nobody_is_not_an_escalation() -> None:
    limit = Limit(argument="discount_pct", max=10, over="escalate")
    verdict = evaluate(
        make_turn(arguments={"discount_pct": 15}),
        Facts(now=WEDNESDAY_10_UTC),
        policy_with(ToolGuard(limits=(limit,))),
    )
    assert verdict.verdict != "escalate" or verdict.escalate_to is not None
