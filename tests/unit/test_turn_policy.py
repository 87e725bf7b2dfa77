"""The ``turns:`` section of the policy file: validation, problems named by key and line, and the
conversion into the pure engine's types."""

from __future__ import annotations

from datetime import UTC, datetime, time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from approvals import errors, policy
from approvals.policy import TurnPolicy
from guards import turns

STAGES = ["new", "contacted", "qualified", "proposal", "negotiation", "won", "lost"]
ROLES = {"sales-lead", "support"}

SALES_YAML = """\
slack:
  reviewer_channel: C0REVIEWS
agents:
  sales-bot:
    token_env: SALES_BOT_TOKEN
    owner: {slack_user_id: U0OWNER, email: owner@example.com}
roles:
  approvers: {users: [U0ANA]}
  sales-lead: {usergroups: [S0SALESLEAD]}
  support: {usergroups: [S0SUPPORT]}
rules:
  - tool: "*"
    require: approvers
turns:
  stages: [new, contacted, qualified, proposal, negotiation, won, lost]
  tools:
    send_proposal:
      stages: {from: qualified}
      channels: [whatsapp, email, webchat]
    grant_discount:
      limits:
        - {argument: discount_pct, max: 10, over: escalate, escalate_to: sales-lead}
    issue_refund:
      operator_role: support
      limits: [{argument: amount, max: 5000}]
    book_demo:
      window: {weekdays: [mon, tue, wed, thu, fri], from: "09:00", to: "18:00", tz: Europe/Lisbon}
      per_lead: {max: 2, within: 86400}
"""


def turn_policy(tools: dict[str, Any], stages: list[str] | None = None) -> TurnPolicy:
    return TurnPolicy.model_validate({"stages": stages or STAGES, "tools": tools})


def problems_of(tools: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    return turn_policy(tools).problems(ROLES)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "countersign.yml"
    path.write_text(text, encoding="utf-8")
    return path


def line_of(text: str, needle: str) -> int:
    lines = [i for i, line in enumerate(text.splitlines(), start=1) if needle in line]
    assert len(lines) == 1, (needle, lines)
    return lines[0]


def load_problems(tmp_path: Path, text: str) -> tuple[Path, list[str]]:
    path = write(tmp_path, text)
    with pytest.raises(errors.PolicyError) as exc:
        policy.load_file(path)
    assert exc.value.problems
    return path, exc.value.problems


def only(problems: list[str], needle: str) -> str:
    found = [p for p in problems if needle in p]
    assert len(found) == 1, (needle, problems)
    return found[0]


# --- conversion -------------------------------------------------------------------------------


def test_the_sales_example_loads_and_converts(tmp_path: Path) -> None:
    parsed = policy.load_file(write(tmp_path, SALES_YAML)).policy
    assert parsed.problems() == []
    assert parsed.turns is not None
    guards = parsed.turns.guards
    assert guards.stages == tuple(STAGES)
    assert set(guards.tools) == {"send_proposal", "grant_discount", "issue_refund", "book_demo"}

    proposal = guards.tools["send_proposal"]
    assert proposal.stages == frozenset({"qualified", "proposal", "negotiation", "won", "lost"})
    assert proposal.channels == frozenset({"whatsapp", "email", "webchat"})
    assert (proposal.operator_role, proposal.window, proposal.per_lead) == (None, None, None)
    assert proposal.limits == ()

    discount = guards.tools["grant_discount"]
    assert discount.stages is None
    assert discount.channels is None
    assert discount.limits == (
        turns.Limit(argument="discount_pct", max=10, over="escalate", escalate_to="sales-lead"),
    )

    refund = guards.tools["issue_refund"]
    assert refund.operator_role == "support"
    assert refund.limits == (turns.Limit(argument="amount", max=5000),)

    demo = guards.tools["book_demo"]
    assert demo.window == turns.Window(
        weekdays=frozenset({0, 1, 2, 3, 4}),
        start=time(9, 0),
        end=time(18, 0),
        tz="Europe/Lisbon",
    )
    assert demo.per_lead == turns.PerLead(max=2, within=86400)


def test_the_converted_example_decides_like_the_readme_says(tmp_path: Path) -> None:
    parsed = policy.load_file(write(tmp_path, SALES_YAML)).policy
    assert parsed.turns is not None
    guards = parsed.turns.guards

    def verdict(tool: str, stage: str, **arguments: object) -> turns.Verdict:
        turn = turns.Turn(
            channel="whatsapp",
            lead_id="lead-1",
            tool=tool,
            arguments=arguments,
            funnel={"stage": stage},
            has_operator=True,
        )
        facts = turns.Facts(
            now=datetime(2030, 1, 2, 10, 0, tzinfo=UTC),
            operator_roles=frozenset(),
            lead_recent_calls=0,
        )
        return turns.evaluate(turn, facts, guards)

    assert verdict("send_proposal", "contacted").reason_code == "stage_not_allowed"
    assert verdict("send_proposal", "qualified").verdict == "allow"
    assert verdict("grant_discount", "new", discount_pct=10).verdict == "allow"
    escalated = verdict("grant_discount", "new", discount_pct=15)
    assert (escalated.verdict, escalated.escalate_to) == ("escalate", "sales-lead")
    assert verdict("issue_refund", "won", amount=10).reason_code == "operator_not_permitted"
    assert verdict("book_demo", "new").verdict == "allow"  # Wed 10:00 in Lisbon


@pytest.mark.parametrize(
    ("stages", "expected"),
    [
        ({"from": "qualified"}, {"qualified", "proposal", "negotiation", "won", "lost"}),
        ({"from": "new"}, set(STAGES)),
        ({"from": "lost"}, {"lost"}),
        ({"from": "contacted", "to": "proposal"}, {"contacted", "qualified", "proposal"}),
        ({"from": "won", "to": "won"}, {"won"}),
        ({"from": "new", "to": "lost"}, set(STAGES)),
        (["won", "qualified"], {"qualified", "won"}),
        ([], set()),
        (None, None),
    ],
    ids=[
        "from-qualified-and-every-later-stage",
        "from-the-first-is-every-stage",
        "from-the-last-is-only-the-last",
        "from-to",
        "from-to-same-stage",
        "from-first-to-last",
        "list-as-given",
        "empty-list-no-stage",
        "absent-any-stage",
    ],
)
def test_stage_rules_convert(stages: Any, expected: set[str] | None) -> None:
    tools: dict[str, Any] = {"t": {} if stages is None else {"stages": stages}}
    parsed = turn_policy(tools)
    assert parsed.problems(ROLES) == []
    converted = parsed.guards.tools["t"].stages
    assert converted == (None if expected is None else frozenset(expected))


def test_window_defaults_are_every_day_all_day_utc() -> None:
    window = turn_policy({"t": {"window": {}}}).guards.tools["t"].window
    assert window == turns.Window(
        weekdays=frozenset(range(7)), start=time(0, 0), end=time(23, 59, 59), tz="UTC"
    )


def test_weekday_names_map_to_monday_zero() -> None:
    window = turn_policy({"t": {"window": {"weekdays": ["sun", "mon"]}}}).guards.tools["t"].window
    assert window is not None
    assert window.weekdays == frozenset({6, 0})


def test_limit_defaults_to_refuse() -> None:
    [limit] = turn_policy({"t": {"limits": [{"argument": "a", "min": 1}]}}).guards.tools["t"].limits
    assert limit == turns.Limit(argument="a", min=1, max=None, over="refuse", escalate_to=None)


def test_a_valid_turns_section_has_no_problems() -> None:
    assert problems_of({}) == []
    tools = {
        "t": {
            "operator_role": "support",
            "limits": [
                {"argument": "a", "max": 1, "over": "escalate", "escalate_to": "sales-lead"}
            ],
            "stages": {"from": "contacted", "to": "won"},
        }
    }
    assert problems_of(tools) == []


# --- problems(): cross-field checks, each with its key ---------------------------------------

PROBLEMS = [
    (
        "undefined-operator-role",
        {"refund": {"operator_role": "suport"}},
        ("turns", "tools", "refund", "operator_role"),
        "role 'suport' is not defined",
    ),
    (
        "undefined-escalate-to-role",
        {
            "discount": {
                "limits": [
                    {"argument": "pct", "max": 10, "over": "escalate", "escalate_to": "boss"}
                ]
            }
        },
        ("turns", "tools", "discount", "limits", 0, "escalate_to"),
        "role 'boss' is not defined",
    ),
    (
        "escalate-without-escalate-to",
        {"discount": {"limits": [{"argument": "pct", "max": 10, "over": "escalate"}]}},
        ("turns", "tools", "discount", "limits", 0, "escalate_to"),
        "over: escalate needs escalate_to",
    ),
    (
        "limit-without-max-or-min",
        {"discount": {"limits": [{"argument": "pct"}]}},
        ("turns", "tools", "discount", "limits", 0, "max"),
        "a limit needs max or min",
    ),
    (
        "second-limit-is-named-by-its-index",
        {"discount": {"limits": [{"argument": "pct", "max": 10}, {"argument": "amount"}]}},
        ("turns", "tools", "discount", "limits", 1, "max"),
        "a limit needs max or min",
    ),
    (
        "stage-list-not-in-stages",
        {"proposal": {"stages": ["qualified", "qualifed"]}},
        ("turns", "tools", "proposal", "stages"),
        "stage 'qualifed' is not in turns.stages",
    ),
    (
        "stage-range-from-not-in-stages",
        {"proposal": {"stages": {"from": "hot"}}},
        ("turns", "tools", "proposal", "stages"),
        "stage 'hot' is not in turns.stages",
    ),
    (
        "stage-range-to-not-in-stages",
        {"proposal": {"stages": {"from": "new", "to": "closed"}}},
        ("turns", "tools", "proposal", "stages"),
        "stage 'closed' is not in turns.stages",
    ),
]


@pytest.mark.parametrize(
    ("tools", "loc", "message"), [p[1:] for p in PROBLEMS], ids=[p[0] for p in PROBLEMS]
)
def test_problems_name_the_key(
    tools: dict[str, Any], loc: tuple[str | int, ...], message: str
) -> None:
    assert problems_of(tools) == [(loc, message)]


def test_escalate_without_escalate_to_and_without_bounds_reports_both() -> None:
    found = problems_of({"d": {"limits": [{"argument": "pct", "over": "escalate"}]}})
    assert found == [
        (("turns", "tools", "d", "limits", 0, "max"), "a limit needs max or min"),
        (("turns", "tools", "d", "limits", 0, "escalate_to"), "over: escalate needs escalate_to"),
    ]


def test_policy_problems_include_the_turn_problems(tmp_path: Path) -> None:
    parsed = policy.load_file(write(tmp_path, SALES_YAML)).policy
    broken = parsed.model_dump(by_alias=True)
    broken["turns"]["tools"]["issue_refund"]["operator_role"] = "refunds"
    assert policy.Policy.model_validate(broken).problems() == [
        (("turns", "tools", "issue_refund", "operator_role"), "role 'refunds' is not defined")
    ]


def test_roles_come_from_the_policy_roles() -> None:
    tools = {"t": {"operator_role": "support"}}
    assert turn_policy(tools).problems({"support"}) == []
    assert turn_policy(tools).problems(set()) == [
        (("turns", "tools", "t", "operator_role"), "role 'support' is not defined")
    ]


@pytest.mark.parametrize(
    ("tools", "loc"),
    [
        ({"t": {"window": {"tz": "Mars/Olympus"}}}, ("tools", "t", "window", "tz")),
        ({"t": {"window": {"tz": "../etc/passwd"}}}, ("tools", "t", "window", "tz")),
        ({"t": {"window": {"tz": ""}}}, ("tools", "t", "window", "tz")),
        ({"t": {"window": {"weekdays": ["monday"]}}}, ("tools", "t", "window", "weekdays", 0)),
        ({"t": {"window": {"from": "25:00"}}}, ("tools", "t", "window", "from")),
        ({"t": {"channels": ["telegram"]}}, ("tools", "t", "channels", 0)),
        ({"t": {"per_lead": {"max": 0, "within": 60}}}, ("tools", "t", "per_lead", "max")),
        ({"t": {"per_lead": {"max": 1, "within": 0}}}, ("tools", "t", "per_lead", "within")),
        (
            {"t": {"limits": [{"argument": "a", "over": "ask"}]}},
            ("tools", "t", "limits", 0, "over"),
        ),
        ({"t": {"limits": [{"max": 1}]}}, ("tools", "t", "limits", 0, "argument")),
        ({"t": {"limit": [{"argument": "a", "max": 1}]}}, ("tools", "t", "limit")),
        ({"t": {"stages": {"to": "won"}}}, ("tools", "t", "stages", "StageRange", "from")),
    ],
    ids=[
        "unknown-tz",
        "tz-path-traversal",
        "empty-tz",
        "weekday-not-abbreviated",
        "time-out-of-range",
        "unknown-channel",
        "per-lead-max-zero",
        "per-lead-within-zero",
        "over-not-refuse-or-escalate",
        "limit-without-argument",
        "typo-in-a-key",
        "range-without-from",
    ],
)
def test_field_errors(tools: dict[str, Any], loc: tuple[str | int, ...]) -> None:
    with pytest.raises(ValidationError) as exc:
        turn_policy(tools)
    locs = [e["loc"] for e in exc.value.errors()]
    assert loc in locs, locs


def test_unknown_tz_message_names_the_zone() -> None:
    with pytest.raises(ValidationError) as exc:
        turn_policy({"t": {"window": {"tz": "Mars/Olympus"}}})
    assert "unknown time zone 'Mars/Olympus'" in str(exc.value)


def test_stages_must_not_be_empty() -> None:
    with pytest.raises(ValidationError) as exc:
        TurnPolicy.model_validate({"stages": [], "tools": {}})
    assert [e["loc"] for e in exc.value.errors()] == [("stages",)]


# --- the same problems through load_file: file, line and key ----------------------------------


def test_escalate_without_escalate_to_names_file_line_key(tmp_path: Path) -> None:
    needle = "{argument: discount_pct, max: 10, over: escalate, escalate_to: sales-lead}"
    text = SALES_YAML.replace(needle, "{argument: discount_pct, max: 10, over: escalate}")
    path, problems = load_problems(tmp_path, text)
    line = line_of(text, "argument: discount_pct")
    assert problems == [
        f"{path}:{line}: turns.tools.grant_discount.limits.0.escalate_to: "
        "over: escalate needs escalate_to"
    ]


def test_undefined_escalate_to_role_names_its_line(tmp_path: Path) -> None:
    text = SALES_YAML.replace("escalate_to: sales-lead}", "escalate_to: sales-boss}")
    path, problems = load_problems(tmp_path, text)
    line = line_of(text, "escalate_to: sales-boss")
    assert problems == [
        f"{path}:{line}: turns.tools.grant_discount.limits.0.escalate_to: "
        "role 'sales-boss' is not defined"
    ]


def test_undefined_operator_role_names_its_line(tmp_path: Path) -> None:
    text = SALES_YAML.replace("operator_role: support", "operator_role: refunds")
    path, problems = load_problems(tmp_path, text)
    line = line_of(text, "operator_role: refunds")
    assert problems == [
        f"{path}:{line}: turns.tools.issue_refund.operator_role: role 'refunds' is not defined"
    ]


def test_limit_without_max_or_min_names_the_limit_line(tmp_path: Path) -> None:
    text = SALES_YAML.replace(
        "limits: [{argument: amount, max: 5000}]", "limits: [{argument: amount}]"
    )
    path, problems = load_problems(tmp_path, text)
    line = line_of(text, "limits: [{argument: amount}]")
    assert problems == [
        f"{path}:{line}: turns.tools.issue_refund.limits.0.max: a limit needs max or min"
    ]


def test_stage_not_in_turns_stages_names_its_line(tmp_path: Path) -> None:
    text = SALES_YAML.replace("stages: {from: qualified}", "stages: {from: qualifed}")
    path, problems = load_problems(tmp_path, text)
    line = line_of(text, "stages: {from: qualifed}")
    assert problems == [
        f"{path}:{line}: turns.tools.send_proposal.stages: stage 'qualifed' is not in turns.stages"
    ]


def test_bad_tz_names_its_line(tmp_path: Path) -> None:
    text = SALES_YAML.replace("tz: Europe/Lisbon", "tz: Europe/Lisboa")
    path, problems = load_problems(tmp_path, text)
    line = line_of(text, "tz: Europe/Lisboa")
    problem = only(problems, "turns.tools.book_demo.window.tz")
    assert problem.startswith(f"{path}:{line}: turns.tools.book_demo.window.tz: ")
    assert "unknown time zone 'Europe/Lisboa'" in problem


def test_every_turn_problem_is_reported_at_once(tmp_path: Path) -> None:
    text = (
        SALES_YAML.replace("operator_role: support", "operator_role: refunds")
        .replace("escalate_to: sales-lead}", "escalate_to: nobody}")
        .replace("stages: {from: qualified}", "stages: {from: hot}")
    )
    path, problems = load_problems(tmp_path, text)
    assert len(problems) == 3, problems
    only(problems, f"{path}:{line_of(text, 'operator_role: refunds')}: turns.tools.issue_refund")
    only(problems, f"{path}:{line_of(text, 'escalate_to: nobody')}: turns.tools.grant_discount")
    only(problems, f"{path}:{line_of(text, 'from: hot')}: turns.tools.send_proposal.stages")


def test_a_typo_in_a_turn_key_names_its_line(tmp_path: Path) -> None:
    text = SALES_YAML.replace("per_lead: {max: 2", "per_leed: {max: 2")
    path, problems = load_problems(tmp_path, text)
    problem = only(problems, "turns.tools.book_demo.per_leed")
    assert problem.startswith(
        f"{path}:{line_of(text, 'per_leed')}: turns.tools.book_demo.per_leed:"
    )
    assert "Extra inputs" in problem


def test_an_unknown_channel_names_its_line(tmp_path: Path) -> None:
    text = SALES_YAML.replace("channels: [whatsapp, email, webchat]", "channels: [whatsapp, fax]")
    path, problems = load_problems(tmp_path, text)
    problem = only(problems, "turns.tools.send_proposal.channels.1")
    assert problem.startswith(f"{path}:{line_of(text, 'channels: [whatsapp, fax]')}: ")


def test_a_policy_without_turns_is_still_valid(tmp_path: Path) -> None:
    text = SALES_YAML.split("turns:\n", 1)[0]
    parsed = policy.load_file(write(tmp_path, text)).policy
    assert parsed.turns is None


# --- bugs found -------------------------------------------------------------------------------


def test_an_unquoted_window_time_is_read_as_that_time_or_refused(tmp_path: Path) -> None:
    text = SALES_YAML.replace('to: "18:00"', "to: 18:00")
    path = write(tmp_path, text)
    try:
        parsed = policy.load_file(path).policy
    except errors.PolicyError as exc:
        only(exc.problems, f"{path}:{line_of(text, 'to: 18:00')}: turns.tools.book_demo.window.to")
        return
    assert parsed.turns is not None
    window = parsed.turns.guards.tools["book_demo"].window
    assert window is not None
    assert window.end == time(18, 0)


def test_a_window_time_with_an_offset_is_refused_or_works() -> None:
    try:
        parsed = turn_policy({"t": {"window": {"from": "09:00Z", "to": "18:00+01:00"}}})
    except ValidationError:
        return
    if parsed.problems(ROLES):
        return
    turn = turns.Turn(
        channel="sms",
        lead_id="l",
        tool="t",
        arguments={},
        funnel={"stage": "new"},
        has_operator=False,
    )
    verdict = turns.evaluate(
        turn, turns.Facts(now=datetime(2030, 1, 2, 10, tzinfo=UTC)), parsed.guards
    )
    assert verdict.verdict in ("allow", "refuse")


def test_a_reversed_stage_range_is_a_problem() -> None:
    found = problems_of({"p": {"stages": {"from": "proposal", "to": "contacted"}}})
    assert [loc for loc, _ in found] == [("turns", "tools", "p", "stages")]


def test_a_limit_with_min_above_max_is_a_problem() -> None:
    found = problems_of({"t": {"limits": [{"argument": "a", "min": 10, "max": 1}]}})
    assert [loc[:5] for loc, _ in found] == [("turns", "tools", "t", "limits", 0)]


def test_a_nan_limit_is_refused() -> None:
    with pytest.raises(ValidationError):
        turn_policy({"t": {"limits": [{"argument": "a", "max": float("nan")}]}})


def test_a_window_ending_before_it_starts_is_a_problem_or_wraps_midnight() -> None:
    parsed = turn_policy({"t": {"window": {"from": "22:00", "to": "06:00"}}})
    if parsed.problems(ROLES):
        return
    turn = turns.Turn(
        channel="sms",
        lead_id="l",
        tool="t",
        arguments={},
        funnel={"stage": "new"},
        has_operator=False,
    )
    at_23 = turns.Facts(now=datetime(2030, 1, 2, 23, tzinfo=UTC))
    assert turns.evaluate(turn, at_23, parsed.guards).verdict == "allow"
