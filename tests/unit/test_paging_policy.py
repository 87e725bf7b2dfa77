"""On-call paging in the policy and the configuration: ``oncall.pagerduty``, ``oncall.opsgenie``,
an escalation step's ``page`` and a rule's ``severity``; every problem named by its key (and
file and line), every unset key by its variable; the paging edge's pure parts. What the service
makes of them (the timers that page, the resolves a settlement queues, an escalation that goes
nowhere) is tested on PostgreSQL in tests/integration/test_paging_ladder.py."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from approvals import errors, models
from approvals.policy import Policy
from bot import config, paging
from tests.support import records

PD_KEY = "0123456789abcdef0123456789abcdef"
T0 = datetime(2026, 1, 1, tzinfo=UTC)

BASE: dict[str, Any] = {
    "slack": {"reviewer_channel": "C0REVIEWS"},
    "agents": {"sales-bot": {"token_env": "SALES_BOT_TOKEN"}},
    "roles": {"approvers": {"users": ["U0ANA"]}, "nobody": {}},
    "oncall": {
        "channel": "C0ONCALL",
        "pagerduty": {"routing_key_env": "PD_ROUTING_KEY"},
        "opsgenie": {
            "api_key_env": "OPSGENIE_API_KEY",
            "responders": [
                {"type": "team", "name": "platform"},
                {"type": "user", "username": "a@b.c"},
            ],
        },
    },
    "rules": [
        {
            "tool": "deploy_*",
            "require": "approvers",
            "severity": "critical",
            "escalation": [
                {"after": 300, "action": "remind"},
                {"after": 600, "action": "escalate", "page": "pagerduty"},
                {"after": 900, "action": "escalate", "page": ["pagerduty", "opsgenie"]},
            ],
        },
        {"tool": "launch_*", "require": "nobody"},
        {"tool": "*", "require": "approvers"},
    ],
}


def data(**oncall: Any) -> dict[str, Any]:
    copied = copy.deepcopy(BASE)
    if oncall:
        copied["oncall"] = oncall
    return copied


def with_steps(*steps: dict[str, Any], **oncall: Any) -> dict[str, Any]:
    copied = data(**oncall)
    copied["rules"][0]["escalation"] = list(steps)
    return copied


def problems(raw: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    return Policy.model_validate(raw).problems()


# --- the keys ------------------------------------------------------------------------------


def test_the_keys_parse() -> None:
    current = Policy.model_validate(data() | {})
    assert current.problems() == []
    ladder = current.rules[0].escalation
    assert [s.page for s in ladder] == [None, ("pagerduty",), ("pagerduty", "opsgenie")]
    assert [s.severity for s in ladder] == ["critical"] * 3  # the rule's, handed down
    assert current.rules[2].severity == "warning"  # the default
    assert current.oncall is not None
    assert current.oncall.services == ("pagerduty", "opsgenie")
    assert current.oncall.opsgenie is not None
    assert [r.wire() for r in current.oncall.opsgenie.responders] == [
        {"type": "team", "name": "platform"},
        {"type": "user", "username": "a@b.c"},
    ]


@pytest.mark.parametrize(
    ("page", "message"),
    [
        (["pagerduty", "pagerduty"], "names a service twice"),
        ([], "name at least one service"),
        ("slack", "Input should be 'pagerduty' or 'opsgenie'"),
    ],
)
def test_a_bad_page_is_named_at_its_key(page: Any, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Policy.model_validate(with_steps({"after": 1, "action": "escalate", "page": page}))
    [error] = caught.value.errors()
    assert error["loc"][:5] == ("rules", 0, "escalation", 0, "page")
    assert message in error["msg"]


@pytest.mark.parametrize(
    ("responder", "message"),
    [
        ({"type": "team"}, "exactly one of id, name, username"),
        ({"type": "team", "id": "x", "name": "y"}, "exactly one of id, name, username"),
        ({"type": "team", "username": "x"}, "type must be user"),
        ({"type": "user", "name": "x"}, "not name"),
        ({"type": "squad", "name": "x"}, "'team', 'user', 'escalation' or 'schedule'"),
        ({"type": "team", "name": "a\nb"}, "String should match pattern"),
    ],
)
def test_a_bad_opsgenie_responder_is_refused(responder: dict[str, str], message: str) -> None:
    raw = data()
    raw["oncall"]["opsgenie"]["responders"] = [responder]
    with pytest.raises(ValidationError) as caught:
        Policy.model_validate(raw)
    assert message in str(caught.value)
    assert caught.value.errors()[0]["loc"][:4] == ("oncall", "opsgenie", "responders", 0)


def test_a_step_paging_a_service_not_configured_is_named() -> None:
    raw = with_steps(
        {"after": 1, "action": "escalate", "page": ["pagerduty", "opsgenie"]},
        channel="C0ONCALL",
        pagerduty={"routing_key_env": "PD"},
    )
    assert problems(raw) == [
        (
            ("rules", 0, "escalation", 0, "page"),
            "pages opsgenie, but oncall.opsgenie is not configured "
            "(oncall: {opsgenie: {api_key_env: …}})",
        )
    ]


def test_only_an_escalation_pages() -> None:
    raw = with_steps({"after": 1, "action": "remind", "page": "pagerduty"})
    assert problems(raw) == [
        (("rules", 0, "escalation", 0, "page"), "only an escalate step pages (this one reminds)")
    ]


def test_the_channel_is_optional_when_every_escalation_pages() -> None:
    raw = with_steps(
        {"after": 1, "action": "escalate", "page": "pagerduty"},
        pagerduty={"routing_key_env": "PD"},
    )
    current = Policy.model_validate(raw)
    assert current.problems() == []
    # no on-call channel to check membership of at start
    assert current.channel_keys == {"slack.reviewer_channel": "C0REVIEWS"}


def test_an_escalation_without_page_needs_the_channel() -> None:
    raw = with_steps({"after": 1, "action": "escalate"}, pagerduty={"routing_key_env": "PD"})
    [(key, message)] = problems(raw)
    assert key == ("rules", 0, "escalation", 0)
    assert "posts to oncall.channel, which is not set" in message


def test_oncall_must_reach_someone() -> None:
    raw = with_steps({"after": 1, "action": "remind"}, usergroup="S0ONCALL")
    assert problems(raw) == [
        (("oncall",), "needs a channel, pagerduty or opsgenie: escalations reach nobody")
    ]
    raw = with_steps(
        {"after": 1, "action": "remind"}, usergroup="S0ONCALL", opsgenie={"api_key_env": "OG"}
    )
    assert problems(raw) == [
        (
            ("oncall", "usergroup"),
            "is mentioned in the on-call channel's post: set oncall.channel too",
        )
    ]


def test_the_policy_version_follows_what_pages() -> None:
    one = Policy.model_validate(data())
    raw = data()
    raw["rules"][0]["severity"] = "info"
    assert Policy.model_validate(raw).version != one.version


# --- the file and the environment ------------------------------------------------------------

POLICY_YAML = """\
slack:
  reviewer_channel: C0REVIEWS
agents:
  sales-bot:
    token_env: SALES_BOT_TOKEN
roles:
  approvers: {users: [U0ANA]}
oncall:
  pagerduty: {routing_key_env: PD_ROUTING_KEY}
  opsgenie:
    api_key_env: OPSGENIE_API_KEY
    responders: [{type: team, name: platform}]
rules:
  - tool: "deploy_*"
    require: approvers
    escalation:
      - {after: 1800, action: escalate, page: [pagerduty, opsgenie]}
  - tool: "*"
    require: approvers
"""


@pytest.fixture(autouse=True)
def _clean_process_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PD_ROUTING_KEY", "OPSGENIE_API_KEY", "SALES_BOT_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def env_for(path: Path, **changes: str | None) -> dict[str, str]:
    env = {
        "SLACK_BOT_TOKEN": "xoxb-test-token",
        "SLACK_SIGNING_SECRET": "test-signing-secret",
        "COUNTERSIGN_CONFIG": str(path),
        "SALES_BOT_TOKEN": "sales-bot-token-0123456789",
        "PD_ROUTING_KEY": PD_KEY,
        "OPSGENIE_API_KEY": "og-key",
    }
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def write(tmp_path: Path, text: str = POLICY_YAML) -> Path:
    path = tmp_path / "countersign.yml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_keys_are_read_from_the_variables_the_policy_names(tmp_path: Path) -> None:
    cfg = config.load(env_for(write(tmp_path)))
    assert cfg.page_secrets == {"PD_ROUTING_KEY": PD_KEY, "OPSGENIE_API_KEY": "og-key"}
    assert cfg.settings.pagerduty_url == "https://events.pagerduty.com"
    assert cfg.settings.opsgenie_url == "https://api.opsgenie.com"
    custom = config.load(
        env_for(
            write(tmp_path),
            COUNTERSIGN_PAGERDUTY_URL="http://127.0.0.1:9/pd",
            COUNTERSIGN_OPSGENIE_URL="https://api.eu.opsgenie.com",
        )
    )
    assert custom.settings.pagerduty_url == "http://127.0.0.1:9/pd"
    assert custom.settings.opsgenie_url == "https://api.eu.opsgenie.com"


def test_an_unset_key_is_named_by_its_variable_and_key(tmp_path: Path) -> None:
    path = write(tmp_path)
    with pytest.raises(errors.SettingsError) as caught:
        config.load(env_for(path, PD_ROUTING_KEY=None, OPSGENIE_API_KEY=""))
    assert caught.value.problems == [
        f"PD_ROUTING_KEY: not set (named by {path}:9: oncall.pagerduty.routing_key_env)",
        f"OPSGENIE_API_KEY: not set (named by {path}:11: oncall.opsgenie.api_key_env)",
    ]


def test_a_routing_key_of_the_wrong_length_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(errors.SettingsError) as caught:
        config.load(env_for(write(tmp_path), PD_ROUTING_KEY="short"))
    [problem] = caught.value.problems
    assert problem.startswith("PD_ROUTING_KEY: a PagerDuty routing key has 32 characters")
    assert "short" not in problem  # a key, even a wrong one, is never printed


def test_a_reload_checks_the_keys_too(tmp_path: Path) -> None:
    path = write(tmp_path)
    cfg = config.load(env_for(path))
    with pytest.raises(errors.SettingsError, match="OPSGENIE_API_KEY: not set"):
        config.reread(cfg.settings, env_for(path, OPSGENIE_API_KEY=None), path)


def test_a_page_problem_names_its_file_line_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, POLICY_YAML.replace("  opsgenie:\n    api_key_env: OPSGENIE_API_KEY\n"
                                                "    responders: [{type: team, name: platform}]\n",
                                                ""))  # fmt: skip
    with pytest.raises(errors.PolicyError) as caught:
        config.load(env_for(path))
    assert caught.value.problems == [
        f"{path}:14: rules.0.escalation.0.page: pages opsgenie, but oncall.opsgenie is not "
        "configured (oncall: {opsgenie: {api_key_env: …}})"
    ]


def test_a_bad_url_is_refused(tmp_path: Path) -> None:
    with pytest.raises(errors.SettingsError) as caught:
        config.load(env_for(write(tmp_path), COUNTERSIGN_PAGERDUTY_URL="events.pagerduty.com"))
    assert caught.value.problems[0].startswith("COUNTERSIGN_PAGERDUTY_URL:")


PAGING_URLS = {
    "COUNTERSIGN_PAGERDUTY_URL": "pagerduty_url",
    "COUNTERSIGN_OPSGENIE_URL": "opsgenie_url",
}
HTTPS_ONLY = "must be an https:// URL (http:// only to localhost, 127.0.0.0/8 or ::1)"


@pytest.mark.parametrize("variable", list(PAGING_URLS))
@pytest.mark.parametrize(
    "url",
    [
        "https://events.eu.pagerduty.com",
        "https://api.eu.opsgenie.com/",
        "https://relay.example.com:8443/pagerduty",
        # a stand-in on this machine may be plain http (the tests' are)
        "http://127.0.0.1:9/pd",
        "http://127.9.9.9",
        "http://[::1]:8080",
        "http://localhost:8080",
    ],
)
def test_https_or_loopback_is_accepted(tmp_path: Path, variable: str, url: str) -> None:
    settings = config.load(env_for(write(tmp_path), **{variable: url})).settings
    assert getattr(settings, PAGING_URLS[variable]) == url


@pytest.mark.parametrize("variable", list(PAGING_URLS))
@pytest.mark.parametrize(
    ("url", "problem"),
    [
        # the key would travel in clear text
        ("http://events.pagerduty.com", HTTPS_ONLY),
        ("http://10.0.0.7:8080", HTTPS_ONLY),
        ("http://0.0.0.0:8080", HTTPS_ONLY),
        ("http://127.0.0.1@evil.example", HTTPS_ONLY),  # its host is evil.example
        # not a URL at all
        ("api.opsgenie.com", HTTPS_ONLY),
        ("https://", HTTPS_ONLY),
        ("https://api.opsgenie.com:port", HTTPS_ONLY),
        ("https://api.opsgenie .com", HTTPS_ONLY),
        ("ftp://127.0.0.1", HTTPS_ONLY),
        ("", HTTPS_ONLY),
        ("https://api.opsgenie.com/?x=1", "must be a base URL, without a query or a fragment"),
    ],
)
def test_a_paging_url_in_clear_text_or_not_a_url_is_refused_at_start(
    tmp_path: Path, variable: str, url: str, problem: str
) -> None:
    with pytest.raises(errors.SettingsError) as caught:
        config.load(env_for(write(tmp_path), **{variable: url}))
    assert caught.value.problems == [f"{variable}: {problem}"]


# --- the paging edge's pure parts ------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("7", 7.0),
        ("Thu, 01 Jan 2026 00:00:30 GMT", 30.0),
        ("Wed, 31 Dec 2025 23:00:00 GMT", 0.0),  # in the past: at once
        ("soon", None),
        (None, None),
        ("", None),
    ],
)
def test_retry_after_in_seconds_or_as_a_date(header: str | None, seconds: float | None) -> None:
    assert paging._retry_after(header, T0) == seconds


def test_the_far_sides_error_is_kept_short_and_without_the_key() -> None:
    pd = b'{"status":"invalid event","message":"Event object is invalid","errors":["bad ' + (
        PD_KEY.encode() + b'"]}'
    )
    assert paging._detail(pd, PD_KEY) == "Event object is invalid; bad ***"
    og = b'{"message":"Request body is not processable.","errors":{"message":"empty"},"took":0}'
    assert paging._detail(og, "k") == "Request body is not processable.; message: empty"
    assert paging._detail(b"<html>\n" + b"x" * 1000, "k").startswith("<html> xxx")
    assert len(paging._detail(b"x" * 1000, "k")) == 300
    assert paging._detail(b"", "k") == "no detail"


def test_severities_map_to_opsgenie_priorities() -> None:
    assert dict(paging.OPSGENIE_PRIORITY) == {
        "critical": "P1",
        "error": "P2",
        "warning": "P3",
        "info": "P5",
    }


def test_the_close_note_names_only_who_settled_it() -> None:
    a = records.approval()
    voted = a.evolve(decided_by=(records.decider("U0ANA").model_copy(update={"name": "Ana Lima"}),))
    assert paging._by(voted.evolve(status=models.Status.APPROVED)) == " by Ana Lima"
    assert paging._by(voted.evolve(status=models.Status.DENIED)) == " by Ana Lima"
    unnamed = records.decider("U0BEN").model_copy(update={"name": None})
    nameless = a.evolve(status=models.Status.DENIED, decided_by=(unnamed,))
    assert paging._by(nameless) == " by U0BEN"
    # a vote counted before an expiry or a cancellation did not settle it
    assert paging._by(voted.evolve(status=models.Status.EXPIRED)) == ""
    assert paging._by(voted.evolve(status=models.Status.CANCELLED)) == ""
