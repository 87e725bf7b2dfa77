"""The policy model: first-match rules, the catch-all, expiry caps, version, callback hosts."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from pydantic import ValidationError

from approvals import models
from approvals.policy import Policy, Rule, callback_allowed, conditions

BASE: dict[str, Any] = {
    "slack": {"reviewer_channel": "C0REVIEWS"},
    "agents": {
        "sales-bot": {
            "token_env": "SALES_BOT_TOKEN",
            "callback_secret_env": "SALES_BOT_SIGNING",
            "callback_hosts": ["127.0.0.1:8088", "agent.internal"],
        },
        "ops-bot": {"token_env": "OPS_BOT_TOKEN"},
    },
    "roles": {
        "approvers": {"users": ["U0ANA", "U0BEN"], "usergroups": ["S0APPROVERS"]},
        "finance": {"usergroups": ["S0FINANCE"]},
        "ops": {"users": ["U0OPS"]},
    },
    "rules": [
        {"tool": "transfer_*", "require": "finance"},
        {"tool": "transfer_small", "require": "approvers"},  # shadowed by rule 0
        {"tool": "deploy_[ps]*", "require": "ops"},
        {"tool": "delete_?", "require": "ops"},
        {"tool": "*", "require": "approvers"},
    ],
}


def make_policy(**changes: Any) -> Policy:
    data = copy.deepcopy(BASE)
    data.update(changes)
    return Policy.model_validate(data)


@pytest.mark.parametrize(
    ("tool", "index", "role"),
    [
        ("transfer_money", 0, "finance"),
        ("transfer_", 0, "finance"),
        ("transfer_small", 0, "finance"),  # first match wins, not the most specific
        ("deploy_prod", 2, "ops"),
        ("deploy_staging", 2, "ops"),
        ("deploy_dev", 4, "approvers"),
        ("delete_x", 3, "ops"),
        ("delete_xy", 4, "approvers"),
        ("send_proposal", 4, "approvers"),  # unknown tool: a human still decides
        ("", 4, "approvers"),
        ("xtransfer_money", 4, "approvers"),
    ],
)
def test_match_first_match_wins(tool: str, index: int, role: str) -> None:
    matched = make_policy().match(tool)
    assert matched.index == index
    assert matched.rule.require == role
    assert matched.name == f"rules[{index}] tool={BASE['rules'][index]['tool']}"


def test_valid_policy_has_no_problems() -> None:
    assert make_policy().problems() == []


def test_undefined_role_is_a_problem_at_its_key() -> None:
    rules = [{"tool": "transfer_*", "require": "finanse"}, {"tool": "*", "require": "nobody"}]
    problems = make_policy(rules=rules).problems()
    assert [loc for loc, _ in problems] == [("rules", 0, "require"), ("rules", 1, "require")]
    assert "'finanse'" in problems[0][1]
    assert "not defined" in problems[0][1]


@pytest.mark.parametrize(
    "rules",
    [
        [{"tool": "transfer_*", "require": "finance"}],
        [{"tool": "*", "require": "approvers"}, {"tool": "transfer_*", "require": "finance"}],
        [{"tool": "transfer_*", "require": "finance"}, {"tool": "**", "require": "approvers"}],
    ],
    ids=["no-catch-all", "catch-all-not-last", "other-glob-last"],
)
def test_last_rule_must_be_the_catch_all(rules: list[dict[str, str]]) -> None:
    problems = make_policy(rules=rules).problems()
    assert (("rules", len(rules) - 1, "tool"), problems[0][1]) in problems
    assert any('"*"' in message and "human" in message for _, message in problems)


def test_problems_are_all_reported() -> None:
    policy = make_policy(
        rules=[{"tool": "x", "require": "ghost"}], expiry={"default": 7200, "max": 3600}
    )
    assert sorted(str(loc) for loc, _ in policy.problems()) == sorted(
        str(loc) for loc in [("rules", 0, "require"), ("rules", 0, "tool"), ("expiry", "default")]
    )


@pytest.mark.parametrize(
    ("changes", "where"),
    [
        ({"rules": []}, "rules"),
        ({"rules": [{"tool": "", "require": "approvers"}]}, "rules.0.tool"),
        ({"rules": [{"tool": "*", "requir": "approvers"}]}, "rules.0.requir"),
        ({"slack": {"reviewer_channel": "#reviews"}}, "slack.reviewer_channel"),
        ({"agents": {"Sales Bot": {"token_env": "X"}}}, "agents"),
        ({"agents": {"a": {"token_env": "1-BAD"}}}, "agents.a.token_env"),
        ({"roles": {"r": {"users": ["ana"]}}}, "roles.r.users.0"),
        ({"roles": {"r": {"usergroups": ["U0ANA"]}}}, "roles.r.usergroups.0"),
        ({"expiry": {"default": 0}}, "expiry.default"),
        ({"surprise": True}, "surprise"),
    ],
)
def test_field_validation_names_the_key(changes: dict[str, Any], where: str) -> None:
    with pytest.raises(ValidationError) as exc:
        make_policy(**changes)
    locs = [".".join(str(p) for p in e["loc"]) for e in exc.value.errors()]
    assert any(loc.startswith(where) for loc in locs), locs


@pytest.mark.parametrize(
    ("requested", "rule_max", "expiry", "expected"),
    [
        (None, None, {}, 3600),  # the default
        (60, None, {}, 60),
        (86400, None, {}, 86400),
        (10**9, None, {}, 86400),  # capped by expiry.max
        (None, 600, {}, 600),  # the default is capped by the rule too
        (7200, 600, {}, 600),
        (300, 600, {}, 300),
        (10**9, 10**9, {}, 86400),  # a rule cannot raise the policy's cap
        (None, None, {"default": 120, "max": 900}, 120),
        (5000, None, {"default": 120, "max": 900}, 900),
    ],
)
def test_expires_in(
    requested: int | None, rule_max: int | None, expiry: dict[str, int], expected: int
) -> None:
    policy = make_policy(expiry=expiry) if expiry else make_policy()
    rule = Rule(tool="*", require="approvers", max_expires_in=rule_max)
    assert policy.expires_in(requested, rule) == expected


def test_version_is_stable_for_equal_policies() -> None:
    one = make_policy()
    reordered = copy.deepcopy(BASE)
    reordered["agents"] = dict(reversed(list(reordered["agents"].items())))
    reordered["roles"] = dict(reversed(list(reordered["roles"].items())))
    other = Policy.model_validate(dict(reversed(list(reordered.items()))))
    assert re.fullmatch(r"pol_[0-9a-f]{16}", one.version)
    assert one.version == other.version
    assert one.version == make_policy().version


@pytest.mark.parametrize(
    "changes",
    [
        {"slack": {"reviewer_channel": "C0OTHER"}},
        {"roles": {**BASE["roles"], "finance": {"usergroups": ["S0FINANCE", "S0CFO"]}}},
        {"rules": [BASE["rules"][4]]},
        {"rules": [BASE["rules"][1], BASE["rules"][0], *BASE["rules"][2:]]},  # order matters
        {"expiry": {"default": 60}},
        {"agents": {"sales-bot": {**BASE["agents"]["sales-bot"], "callback_hosts": []}}},
    ],
    ids=["channel", "role-members", "rules", "rule-order", "expiry", "callback-hosts"],
)
def test_version_differs_for_different_policies(changes: dict[str, Any]) -> None:
    assert make_policy(**changes).version != make_policy().version


HOSTS = ("127.0.0.1:8088", "agent.internal", "[::1]:8443", "Hooks.Example.COM", "[fd00::7]")


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        # exact host:port
        ("http://127.0.0.1:8088/approvals", True),
        ("https://127.0.0.1:8088/approvals", True),
        ("http://127.0.0.1:8089/approvals", False),
        ("http://127.0.0.1/approvals", False),
        ("http://127.0.0.2:8088/", False),
        # a bare host: the scheme's default port only
        ("https://agent.internal/approvals", True),
        ("http://agent.internal/approvals?x=1#f", True),
        ("https://agent.internal:443/", True),
        ("http://agent.internal:80/", True),
        ("https://agent.internal:8443/", False),
        ("http://agent.internal:443/", False),
        ("https://agent.internal:80/", False),
        ("http://agent.internal:6379/", False),
        # http and https only
        ("ftp://agent.internal/", False),
        ("gopher://agent.internal:70/", False),
        ("file:///etc/passwd", False),
        ("javascript:alert(1)", False),
        ("//agent.internal/approvals", False),
        # userinfo: a listed name in front of @ is not the host
        ("http://agent.internal@evil.example/", False),
        ("http://agent.internal:80@evil.example/", False),
        ("http://user:pw@agent.internal/", False),
        ("http://evil.example\\@agent.internal/", False),
        # look-alikes
        ("http://agent.internal.evil.example/", False),
        ("http://evilagent.internal/", False),
        ("http://evil.example/agent.internal", False),
        ("http://evil.example/?u=http://agent.internal/", False),
        ("http://agent.internal./", False),
        ("http://аgent.internal/", False),  # Cyrillic а
        ("http://0x7f.0.0.1:8088/", False),
        ("http://127.1:8088/", False),
        # IPv6 literals
        ("http://[::1]:8443/cb", True),
        ("https://[::1]:8443/cb", True),
        ("http://[::1]/cb", False),
        ("http://[::1]:8444/cb", False),
        ("https://[fd00::7]/", True),
        ("https://[fd00::7]:8443/", False),
        # case-insensitive host, entry and URL
        ("https://AGENT.INTERNAL/x", True),
        ("HTTPS://Agent.Internal/x", True),
        ("https://hooks.example.com/", True),
        # garbage
        ("http://[::1", False),
        ("http://agent.internal:99999/", False),
        ("http://agent.internal:abc/", False),
        ("http:///path", False),
        ("not a url", False),
        ("", False),
    ],
)
def test_callback_allowed(url: str, allowed: bool) -> None:
    assert callback_allowed(url, HOSTS) is allowed


def test_callback_allowed_with_empty_allow_list() -> None:
    assert callback_allowed("https://agent.internal/", ()) is False


def test_a_policy_with_integers_past_2_53_still_has_a_version() -> None:
    # the version is a label over the file as the operator wrote it: RFC 8785's range (a wire
    # rule for agents' arguments) must not make a valid policy crash at start
    data = copy.deepcopy(BASE)
    data["expiry"] = {"default": 3600, "max": 10**20}
    assert Policy.model_validate(data).version.startswith("pol_")


def test_a_rules_condition_is_parsed_once_not_on_every_match(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rules = [
        {"tool": "refund", "when": {"field": "arguments.amount", "gt": 100}, "require": "finance"},
        {"tool": "*", "require": "approvers"},
    ]
    policy = make_policy(rules=rules)
    rule = policy.rules[0]
    first = rule.condition
    assert first is not None
    parses: list[object] = []
    monkeypatch.setattr(conditions, "parse_condition", parses.append)
    for amount in (50, 500, 5000):
        policy.match("refund", {"amount": amount})
    assert rule.condition is first
    assert parses == []


def test_a_rule_without_when_has_no_condition() -> None:
    assert make_policy().rules[0].condition is None


@pytest.mark.parametrize(
    ("oncall", "keys", "channels"),
    [
        (None, {"slack.reviewer_channel": "C0REVIEWS"}, ("C0REVIEWS",)),
        (
            {"channel": "C0ONCALL"},
            {"slack.reviewer_channel": "C0REVIEWS", "oncall.channel": "C0ONCALL"},
            ("C0REVIEWS", "C0ONCALL"),
        ),
        (
            {"channel": "C0REVIEWS", "usergroup": "S0ONCALL"},
            {"slack.reviewer_channel": "C0REVIEWS", "oncall.channel": "C0REVIEWS"},
            ("C0REVIEWS",),
        ),
    ],
    ids=["reviewer-only", "reviewer-and-oncall", "one-channel-for-both"],
)
def test_every_channel_the_policy_names(
    oncall: dict[str, str] | None, keys: dict[str, str], channels: tuple[str, ...]
) -> None:
    current = make_policy(oncall=oncall)
    assert current.channel_keys == keys
    assert list(current.channel_keys) == list(keys)  # reviewer first: problems come in this order
    assert current.channels == channels


def test_channel_keys_are_the_policy_files_own_paths() -> None:
    # each key is the dotted path of a key in the file: following it finds the channel id
    data = copy.deepcopy(BASE) | {"oncall": {"channel": "C0ONCALL"}}
    for key, channel in Policy.model_validate(data).channel_keys.items():
        node: Any = data
        for part in key.split("."):
            node = node[part]
        assert node == channel


def test_an_owner_is_a_requester_and_needs_an_identity() -> None:
    agents = copy.deepcopy(BASE["agents"])
    agents["sales-bot"]["owner"] = {"email": "Sales-Team@Example.com", "name": "Sales team"}
    owner = make_policy(agents=agents).agents["sales-bot"].owner
    assert isinstance(owner, models.Requester)
    assert owner.email == "sales-team@example.com"  # one spelling, as for every requester
    agents["sales-bot"]["owner"] = {"name": "Nobody in particular"}
    with pytest.raises(ValidationError) as caught:
        make_policy(agents=agents)
    [error] = caught.value.errors()
    assert error["loc"] == ("agents", "sales-bot", "owner")
    assert "owner needs slack_user_id or email" in error["msg"]
