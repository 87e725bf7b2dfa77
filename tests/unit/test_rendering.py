"""Block Kit cards and click parsing: untrusted text stays inert and within Slack's limits."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from approvals import hashing, models
from bot import interactions, rendering, untrusted_text

S = models.Status
APPROVAL_ID = "apr_0123456789abcdef01234567"
CREATED = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
EXPIRES = CREATED + timedelta(hours=1)
DECIDER = models.Decider(slack_user_id="U0ALMA", name="Alma", at=CREATED + timedelta(minutes=5))
REQUESTER_ID = "U0REQ"

SECTION_LIMIT = 3000
FIELD_LIMIT = 2000
HEADER_LIMIT = 150
ZWSP = "\u200b"
HEAD = "*Arguments*\n```\n"
FENCE = "\n```"
# The only markup Countersign itself puts in mrkdwn: a date token, and the decider's mention.
DATE_TOKEN = re.compile(r"<!date\^\d+\^\{date_short_pretty\} \{time\}\|[^<>|]*>")
MARKER = re.compile(r"\[truncated: (\d+) of (\d+) characters shown; sha256 ([0-9a-f]{12})\]")


def make_approval(
    *,
    status: S = S.PENDING,
    arguments: dict[str, Any] | None = None,
    tool: str = "transfer_money",
    call_id: str = "call_1",
    summary: str = "Pay invoice 42",
    requester: models.Requester | None = None,
    session_id: str = "thread-1",
    agent: str = "sales-bot",
) -> models.Approval:
    args: dict[str, Any] = {"amount": 500, "currency": "EUR"} if arguments is None else arguments
    settled = status is not S.PENDING
    return models.Approval(
        approval_id=APPROVAL_ID,
        status=status,
        agent=agent,
        request_id="af-call-7",
        session_id=session_id,
        tool=models.ToolCall(name=tool, call_id=call_id, arguments=args),
        arguments_sha256=hashing.arguments_sha256(args),
        requester=requester
        or models.Requester(slack_user_id=REQUESTER_ID, email="rita@example.com", name="Rita"),
        summary=summary,
        required=models.Required(role="finance"),
        rule="rules[0] tool=transfer_*",
        decided_by=(DECIDER,) if status in (S.APPROVED, S.DENIED) else (),
        reason="Denied." if status is S.DENIED else None,
        created_at=CREATED,
        expires_at=EXPIRES,
        decided_at=CREATED + timedelta(minutes=5) if settled else None,
        policy_version="pol_0123456789abcdef",
        fingerprint="f" * 64,
    )


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def esc(text: str) -> str:
    """mrkdwn escaping, written out independently of bot.untrusted_text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def unesc(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def mrkdwn_texts(fallback: str, card_blocks: list[dict[str, Any]]) -> Iterator[str]:
    """Every string Slack parses as mrkdwn (fallback text included: it is parsed too)."""
    yield fallback
    for block in card_blocks:
        text = block.get("text")
        if isinstance(text, dict) and text.get("type") == "mrkdwn":
            yield text["text"]
        for item in block.get("fields", []):
            if item.get("type") == "mrkdwn":
                yield item["text"]
        for item in block.get("elements", []):
            if item.get("type") == "mrkdwn":
                yield item["text"]


def section_texts(card_blocks: list[dict[str, Any]]) -> Iterator[str]:
    for block in card_blocks:
        if block["type"] == "section" and "text" in block:
            yield block["text"]["text"]


def block(card_blocks: list[dict[str, Any]], block_id: str) -> dict[str, Any]:
    found = [b for b in card_blocks if b.get("block_id") == block_id]
    assert len(found) == 1, f"expected one block {block_id!r}, got {len(found)}"
    return found[0]


def text_of(card_blocks: list[dict[str, Any]], block_id: str) -> str:
    text: str = block(card_blocks, block_id)["text"]["text"]
    return text


def header_of(card_blocks: list[dict[str, Any]]) -> str:
    headers = [b for b in card_blocks if b["type"] == "header"]
    assert len(headers) == 1
    assert headers[0]["text"]["type"] == "plain_text"
    text: str = headers[0]["text"]["text"]
    return text


def split_arguments(text: str) -> tuple[str, str]:
    """(code block body, what follows the closing fence)."""
    assert text.startswith(HEAD)
    before, fence, after = text.rpartition(FENCE)
    assert fence == FENCE, "the arguments code block is not closed"
    return before[len(HEAD) :], after


def assert_inert(fallback: str, card_blocks: list[dict[str, Any]], *, decider: str | None) -> None:
    """No mrkdwn string holds a control sequence except our own date token and decider mention."""
    for text in mrkdwn_texts(fallback, card_blocks):
        rest = DATE_TOKEN.sub("", text)
        if decider is not None:
            rest = rest.replace(f"<@{decider}>", "")
        assert "<" not in rest, text
        assert ">" not in rest, text
        # every & starts an entity we wrote
        assert re.sub(r"&(amp|lt|gt);", "", rest).count("&") == 0, text


HOSTILE = [
    "<!channel>",
    "<!here>",
    "<!everyone>",
    "<@U123>",
    "<@W0ADMIN|boss>",
    "<#C0GENERAL|general>",
    "<!subteam^S0ONCALL>",
    "<http://evil.example|bank.com>",
    "<https://evil.example>",
    "<mailto:ceo@example.com|CEO>",
    "Tom & Jerry <b>bold</b> a>b",
]
PLACES = ["summary", "argument_value", "argument_key", "tool", "call_id", "requester_name"]


def hostile_approval(place: str, text: str, status: S) -> models.Approval:
    if place == "summary":
        return make_approval(status=status, summary=text)
    if place == "argument_value":
        return make_approval(status=status, arguments={"note": text})
    if place == "argument_key":
        return make_approval(status=status, arguments={text: 1})
    if place == "tool":
        return make_approval(status=status, tool=text)
    if place == "call_id":
        return make_approval(status=status, call_id=text)
    if place == "requester_name":
        requester = models.Requester(slack_user_id=REQUESTER_ID, name=text)
        return make_approval(status=status, requester=requester)
    raise AssertionError(place)


@pytest.mark.parametrize("status", [S.PENDING, S.APPROVED])
@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("text", HOSTILE)
def test_untrusted_text_is_escaped_everywhere(text: str, place: str, status: S) -> None:
    approval = hostile_approval(place, text, status)
    fallback, card_blocks = rendering.card(approval)
    decider = DECIDER.slack_user_id if status is S.APPROVED else None
    assert_inert(fallback, card_blocks, decider=decider)
    # and it is still shown to the reviewer, escaped, not dropped
    shown = "\n".join(mrkdwn_texts(fallback, card_blocks))
    if place != "tool" or status is S.PENDING:
        assert esc(text) in shown or esc(json.dumps(text)[1:-1]) in shown


@pytest.mark.parametrize("text", HOSTILE)
def test_session_and_agent_are_escaped(text: str) -> None:
    fallback, card_blocks = rendering.card(make_approval(session_id=text, agent=text))
    assert_inert(fallback, card_blocks, decider=None)
    assert esc(text) in "\n".join(mrkdwn_texts(fallback, card_blocks))


def test_summary_escaping_is_exact() -> None:
    summary = "AT&T &amp; &lt;b&gt; <!channel> > <"
    _, card_blocks = rendering.card(make_approval(summary=summary))
    # a pre-escaped entity from the agent is shown literally, not decoded into markup
    assert text_of(card_blocks, "summary") == (
        "AT&amp;T &amp;amp; &amp;lt;b&amp;gt; &lt;!channel&gt; &gt; &lt;"
    )


def test_escape_function() -> None:
    assert untrusted_text.escape("<!here> & <@U1>") == "&lt;!here&gt; &amp; &lt;@U1&gt;"
    # Slack has no escape for formatting: the characters that could format become look-alikes
    assert untrusted_text.escape("plain `code` *bold*") == "plain \u02cbcode\u02cb \u2217bold\u2217"
    assert (
        untrusted_text.escape("transfer_money") == "transfer_money"
    )  # inside a word it cannot format


@pytest.mark.parametrize(
    "value",
    [
        "```",
        "````",
        "``` <!channel> ```",
        "end of block```\n*Approved by finance*\n```",
        "`" * 11,
        "``",
        "a`b``c```d",
    ],
)
@pytest.mark.parametrize("where", ["value", "key"])
def test_backticks_cannot_close_the_code_block(value: str, where: str) -> None:
    arguments: dict[str, Any] = {"cmd": value} if where == "value" else {value: "x"}
    fallback, card_blocks = rendering.card(make_approval(arguments=arguments))
    body, after = split_arguments(text_of(card_blocks, "arguments"))
    assert "```" not in body
    assert after == ""  # nothing after the closing fence: the content did not escape the block
    # what the reviewer sees is exactly the arguments (zero-width spaces aside)
    assert json.loads(unesc(body.replace(ZWSP, ""))) == arguments
    assert_inert(fallback, card_blocks, decider=None)


def test_long_arguments_are_truncated_with_a_visible_marker() -> None:
    arguments = {"blob": "x" * 10_000, "amount": 500}
    approval = make_approval(arguments=arguments)
    _, card_blocks = rendering.card(approval)
    text = text_of(card_blocks, "arguments")
    assert utf16(text) <= SECTION_LIMIT
    body, after = split_arguments(text)
    assert "```" not in body
    found = MARKER.search(after)
    assert found is not None, f"no truncation marker after the code block: {after!r}"
    shown, total = int(found.group(1)), int(found.group(2))
    assert total > 10_000
    assert 0 < shown < total
    assert found.group(3) == approval.arguments_sha256[:12]
    assert "x" * 2000 in body  # the space is used for content, not wasted


def test_short_arguments_have_no_marker() -> None:
    _, card_blocks = rendering.card(make_approval())
    body, after = split_arguments(text_of(card_blocks, "arguments"))
    assert after == ""
    assert "truncated" not in body
    assert json.loads(unesc(body)) == {"amount": 500, "currency": "EUR"}


def test_long_summary_is_truncated_with_a_visible_marker() -> None:
    _, card_blocks = rendering.card(make_approval(summary="y" * 10_000))
    text = text_of(card_blocks, "summary")
    assert utf16(text) <= SECTION_LIMIT
    assert text.startswith("y" * 2000)
    assert re.search(
        r"\n… \[truncated: \d+ of 10000 characters shown; sha256 [0-9a-f]{12}\]$", text
    )


def test_long_summary_marker_names_the_total() -> None:
    _, card_blocks = rendering.card(make_approval(summary="y" * 10_000))
    text = text_of(card_blocks, "summary")
    assert re.search(r"\b10[,.]?000\b", text), text


def test_escaping_never_splits_an_entity_when_cutting() -> None:
    # 2000 characters is the wire maximum of a summary; escaped, it is 10,000
    approval = make_approval(summary="&" * 2000, arguments={"amps": "&" * 10_000})
    _, card_blocks = rendering.card(approval)
    summary = text_of(card_blocks, "summary")
    assert utf16(summary) <= SECTION_LIMIT
    cut, marker = summary.rsplit("\n… [truncated", 1)
    assert marker.endswith("]")
    assert re.fullmatch(r"(&amp;)+", cut), cut[-20:]
    body, _ = split_arguments(text_of(card_blocks, "arguments"))
    assert "&" not in body.replace("&amp;", "")


@pytest.mark.parametrize(
    "text",
    ["🚀" * 5000, "é" * 5000, "日本語" * 2000, "👩‍👩‍👧‍👦" * 1000, "a🚀" * 3000],
    ids=["rocket", "e-acute", "cjk", "zwj-family", "mixed"],
)
def test_non_ascii_counted_in_utf16_units(text: str) -> None:
    approval = make_approval(arguments={"t": text}, summary=text[:2000])
    fallback, card_blocks = rendering.card(approval)
    for section in section_texts(card_blocks):
        assert utf16(section) <= SECTION_LIMIT
    for item in block(card_blocks, "facts")["fields"]:
        assert utf16(item["text"]) <= FIELD_LIMIT
    assert utf16(fallback) <= SECTION_LIMIT
    body, after = split_arguments(text_of(card_blocks, "arguments"))
    assert MARKER.search(after)
    assert text[:100] in body


@pytest.mark.parametrize("status", list(S))
def test_every_text_within_limits_for_huge_input(status: S) -> None:
    approval = make_approval(
        status=status,
        arguments={f"k{i}": "v" * 500 for i in range(40)},
        summary="s" * 10_000,
        tool="t" * 200,
        call_id="c" * 200,
        session_id="s" * 200,
    )
    fallback, card_blocks = rendering.card(approval)
    assert len(card_blocks) <= 50
    assert utf16(header_of(card_blocks)) <= HEADER_LIMIT
    for section in section_texts(card_blocks):
        assert utf16(section) <= SECTION_LIMIT
    for item in block(card_blocks, "facts")["fields"]:
        assert utf16(item["text"]) <= FIELD_LIMIT
    assert len(block(card_blocks, "facts")["fields"]) <= 10
    for b in card_blocks:
        for element in b.get("elements", []):
            if "text" in element and isinstance(element["text"], str):
                assert utf16(element["text"]) <= SECTION_LIMIT
    assert utf16(fallback) <= SECTION_LIMIT


def test_requester_field_within_limit_for_hostile_requester() -> None:
    requester = models.Requester(
        slack_user_id=REQUESTER_ID, name="&" * 200, email="&" * 64 + "@" + "&" * 255
    )
    _, card_blocks = rendering.card(make_approval(requester=requester))
    for item in block(card_blocks, "facts")["fields"]:
        assert utf16(item["text"]) <= FIELD_LIMIT


def test_long_ascii_header_is_cut_with_a_marker() -> None:
    _, card_blocks = rendering.card(make_approval(tool="t" * 200))
    header = header_of(card_blocks)
    assert len(header) <= HEADER_LIMIT
    assert header.endswith("…")
    assert header.startswith("Approval needed: ttt")


def test_emoji_header_within_limit_in_utf16_units() -> None:
    _, card_blocks = rendering.card(make_approval(tool="🚀" * 200))
    assert utf16(header_of(card_blocks)) <= HEADER_LIMIT


def test_pending_card_buttons_carry_only_the_approval_id() -> None:
    _, card_blocks = rendering.card(make_approval())
    actions = [b for b in card_blocks if b["type"] == "actions"]
    assert len(actions) == 1
    buttons = actions[0]["elements"]
    assert {b["action_id"]: b["style"] for b in buttons} == {
        interactions.APPROVE: "primary",
        interactions.DENY: "danger",
    }
    for button in buttons:
        assert button["type"] == "button"
        assert button["value"] == APPROVAL_ID
        assert len(button["value"]) <= 2000


@pytest.mark.parametrize(
    ("action_id", "action"), [(interactions.APPROVE, "approve"), (interactions.DENY, "deny")]
)
def test_button_round_trips_through_parse_click(action_id: str, action: str) -> None:
    _, card_blocks = rendering.card(make_approval())
    actions = next(b for b in card_blocks if b["type"] == "actions")
    button = next(e for e in actions["elements"] if e["action_id"] == action_id)
    click = interactions.parse_click(
        click_payload(action_id=button["action_id"], value=button["value"])
    )
    assert click == interactions.Click(
        approval_id=APPROVAL_ID,
        action="approve" if action == "approve" else "deny",
        user_id="U0ALMA",
        channel_id="C0REVIEWS",
    )


@pytest.mark.parametrize("status", [S.APPROVED, S.DENIED, S.EXPIRED, S.CANCELLED])
def test_settled_card_has_no_buttons_and_says_the_outcome(status: S) -> None:
    fallback, card_blocks = rendering.card(make_approval(status=status))
    assert not [b for b in card_blocks if b["type"] == "actions"]
    assert "button" not in json.dumps(card_blocks)
    outcome = text_of(card_blocks, "outcome")
    expected = {
        S.APPROVED: "Approved",
        S.DENIED: "Denied",
        S.EXPIRED: "Expired",
        S.CANCELLED: "Cancelled",
    }[status]
    assert expected in outcome
    assert header_of(card_blocks).startswith(expected)
    assert expected in fallback
    if status in (S.APPROVED, S.DENIED):
        assert "<@U0ALMA>" in outcome  # who decided
    else:
        assert "<@" not in outcome  # nobody decided: no one is credited


@pytest.mark.parametrize("status", list(S))
def test_requester_is_never_mentioned(status: S) -> None:
    fallback, card_blocks = rendering.card(make_approval(status=status))
    everything = json.dumps(card_blocks) + fallback
    assert f"<@{REQUESTER_ID}" not in everything
    assert REQUESTER_ID in text_of_field(card_blocks, "Requester")  # shown as plain text
    decider = DECIDER.slack_user_id if status in (S.APPROVED, S.DENIED) else None
    assert_inert(fallback, card_blocks, decider=decider)


def text_of_field(card_blocks: list[dict[str, Any]], label: str) -> str:
    for item in block(card_blocks, "facts")["fields"]:
        text: str = item["text"]
        if text.startswith(f"*{label}*\n"):
            return text
    raise AssertionError(f"no field {label!r}")


def test_card_shows_what_for_whom_and_when() -> None:
    approval = make_approval()
    _, card_blocks = rendering.card(approval)
    assert "sales-bot" in text_of_field(card_blocks, "Agent")
    assert "thread-1" in text_of_field(card_blocks, "Session")
    assert "finance" in text_of_field(card_blocks, "Needs")
    assert str(int(EXPIRES.timestamp())) in text_of_field(card_blocks, "Expires")
    assert "call_1" in text_of_field(card_blocks, "Tool")
    context = next(b for b in card_blocks if b["type"] == "context")["elements"][0]["text"]
    assert APPROVAL_ID in context
    assert approval.arguments_sha256[:12] in context


# --- parse_click -------------------------------------------------------------------------


def click_payload(
    *, action_id: str = interactions.APPROVE, value: Any = APPROVAL_ID, user_id: str = "U0ALMA"
) -> dict[str, Any]:
    return {
        "type": "block_actions",
        "user": {"id": user_id, "username": "alma", "team_id": "T0TEAM"},
        "channel": {"id": "C0REVIEWS", "name": "reviews"},
        "container": {"type": "message", "channel_id": "C0REVIEWS", "message_ts": "1.2"},
        "actions": [
            {
                "type": "button",
                "block_id": "countersign_decision",
                "action_id": action_id,
                "value": value,
                "action_ts": "1700000000.1",
            }
        ],
    }


def test_parse_click_valid() -> None:
    click = interactions.parse_click(click_payload(action_id=interactions.DENY))
    assert click == interactions.Click(
        approval_id=APPROVAL_ID, action="deny", user_id="U0ALMA", channel_id="C0REVIEWS"
    )


def test_parse_click_channel_from_container() -> None:
    payload = click_payload()
    del payload["channel"]
    assert interactions.parse_click(payload).channel_id == "C0REVIEWS"
    del payload["container"]
    assert interactions.parse_click(payload).channel_id is None


def _set(path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    payload = click_payload()
    node: Any = payload
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return payload


def _without(key: str) -> dict[str, Any]:
    payload = click_payload()
    del payload[key]
    return payload


def _two_actions() -> dict[str, Any]:
    payload = click_payload()
    payload["actions"].append(copy.deepcopy(payload["actions"][0]))
    return payload


def _no_value() -> dict[str, Any]:
    payload = click_payload()
    del payload["actions"][0]["value"]
    return payload


BAD_CLICKS: list[tuple[str, dict[str, Any], str]] = [
    ("wrong-action-id", _set(("actions", 0, "action_id"), "other_app_approve"), "unknown action"),
    ("no-action-id", _set(("actions", 0, "action_id"), None), "unknown action"),
    ("path-in-id", _set(("actions", 0, "value"), "apr_../x"), "approval id"),
    ("3000-chars", _set(("actions", 0, "value"), "apr_" + "0" * 2996), "approval id"),
    ("short-id", _set(("actions", 0, "value"), "apr_0123"), "approval id"),
    ("uppercase-hex", _set(("actions", 0, "value"), APPROVAL_ID.upper()), "approval id"),
    ("trailing-newline", _set(("actions", 0, "value"), APPROVAL_ID + "\n"), "approval id"),
    ("extra-data", _set(("actions", 0, "value"), APPROVAL_ID + "|approved"), "approval id"),
    ("json-value", _set(("actions", 0, "value"), json.dumps({"id": APPROVAL_ID})), "approval id"),
    ("int-value", _set(("actions", 0, "value"), 123), "approval id"),
    ("no-value", _no_value(), "approval id"),
    ("missing-user", _without("user"), "no user"),
    ("user-not-dict", _set(("user",), "U0ALMA"), "no user"),
    ("user-without-id", _set(("user",), {"name": "alma"}), "no user"),
    ("user-id-not-str", _set(("user", "id"), 42), "no user"),
    ("two-actions", _two_actions(), "exactly one action"),
    ("no-actions", _set(("actions",), []), "exactly one action"),
    ("missing-actions", _without("actions"), "exactly one action"),
    (
        "actions-not-list",
        _set(("actions",), {"action_id": interactions.APPROVE}),
        "exactly one action",
    ),
    ("action-not-dict", _set(("actions",), ["countersign_approve"]), "exactly one action"),
]


@pytest.mark.parametrize(
    ("payload", "message"),
    [pytest.param(p, m, id=i) for i, p, m in BAD_CLICKS],
)
def test_parse_click_refuses_bad_payloads(payload: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as exc:
        interactions.parse_click(payload)
    assert str(exc.value)


def test_parse_click_unhashable_action_id_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown action"):
        interactions.parse_click(_set(("actions", 0, "action_id"), ["countersign_approve"]))


# --- dead-lettered callback warning ------------------------------------------------------


def dead_lettered(error: str, status: S = S.APPROVED) -> models.Approval:
    delivery = models.Delivery(status="dead_letter", attempts=7, last_error=error)
    return make_approval(status=status).evolve(delivery=delivery)


@pytest.mark.parametrize("text", HOSTILE)
def test_dead_letter_error_is_escaped(text: str) -> None:
    fallback, card_blocks = rendering.card(dead_lettered(f"callback answered {text}"))
    warning = text_of(card_blocks, "dead_letter")
    assert esc(text) in warning
    assert APPROVAL_ID in warning
    assert "7" in warning
    assert_inert(fallback, card_blocks, decider=DECIDER.slack_user_id)


def test_dead_letter_long_error_within_limits() -> None:
    _, card_blocks = rendering.card(dead_lettered("<" * 10_000))
    assert utf16(text_of(card_blocks, "dead_letter")) <= SECTION_LIMIT
    assert len(card_blocks) <= 50


def test_no_dead_letter_warning_while_delivering() -> None:
    approval = make_approval(status=S.APPROVED).evolve(
        delivery=models.Delivery(status="pending", attempts=2, last_error="HTTP 503")
    )
    _, card_blocks = rendering.card(approval)
    assert not [b for b in card_blocks if b.get("block_id") == "dead_letter"]


def test_dead_letter_error_cut_never_splits_an_entity() -> None:
    fallback, card_blocks = rendering.card(dead_lettered("x" + "&" * 300))
    assert_inert(fallback, card_blocks, decider=DECIDER.slack_user_id)


# --- lead-facing banner ------------------------------------------------------------------


def test_an_agents_context_cannot_dress_a_plain_approval_up_as_lead_facing() -> None:
    approval = make_approval().evolve(context={"lead_facing": True, "lead_id": "x"})
    assert not approval.lead_facing
    _, card_blocks = rendering.card(approval)
    assert not [b for b in card_blocks if b.get("block_id") == "lead_facing"]
    assert "Lead-facing" not in json.dumps(card_blocks)


def test_a_turn_escalation_shows_the_lead_banner() -> None:
    approval = make_approval().evolve(
        request_id=models.TURN_REQUEST_PREFIX + "call_9",
        context={"channel": "whatsapp", "lead_id": "lead-7", "why": "discount_pct 15 > 10"},
    )
    _, card_blocks = rendering.card(approval)
    banner = text_of(card_blocks, "lead_facing")
    assert "*Lead-facing turn*" in banner  # our own markup survives the escaping of the values
    assert "whatsapp" in banner
    assert "lead-7" in banner
    assert "discount_pct 15 &gt; 10" in banner


# --- the queue: App Home and /approvals -------------------------------------------------

# the reproduction of issue 8 item 7: the IBAN sits past the first 300 characters
IBAN_ARGUMENTS = {"a": "x" * 320, "iban": "ATTACKER-IBAN-XX00"}
PERMALINK = "https://standin.slack.com/archives/C0REVIEWS/p1700000000000100"
CARD = models.CardRef(channel="C0REVIEWS", ts="1700000000.000100")


def home(approvals: list[models.Approval], **kwargs: Any) -> list[dict[str, Any]]:
    view_blocks: list[dict[str, Any]] = rendering.home_view(approvals, [], **kwargs)["blocks"]
    return view_blocks


def slash(approvals: list[models.Approval], **kwargs: Any) -> list[dict[str, Any]]:
    return rendering.queue_blocks(approvals, [], limit=10, **kwargs)


QUEUE_VIEWS = [pytest.param(home, id="app-home"), pytest.param(slash, id="slash-command")]


def decision_buttons(view_blocks: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [
        (e["action_id"], e["value"])
        for b in view_blocks
        if b["type"] == "actions"
        for e in b["elements"]
        if e.get("type") == "button"
    ]


def outside_code(text: str) -> str:
    """The parts of a mrkdwn string that are not inside a ``` code block."""
    assert text.count("```") % 2 == 0, f"an unclosed code block: {text!r}"
    return "".join(text.split("```")[0::2])


@pytest.mark.parametrize("view", QUEUE_VIEWS)
def test_the_queue_shows_the_complete_arguments_beside_its_buttons(view: Any) -> None:
    approval = make_approval(arguments=IBAN_ARGUMENTS, summary="Pay the supplier")
    view_blocks = view([approval])
    shown = "\n".join(mrkdwn_texts("", view_blocks))
    assert "ATTACKER-IBAN-XX00" in shown
    assert "Pay the supplier" in shown
    # exactly the card's rendering of the arguments and of the summary
    _, card_blocks = rendering.card(approval)
    assert text_of(card_blocks, "arguments") in list(mrkdwn_texts("", view_blocks))
    assert text_of(card_blocks, "summary") in list(mrkdwn_texts("", view_blocks))
    assert decision_buttons(view_blocks) == [
        (interactions.APPROVE, APPROVAL_ID),
        (interactions.DENY, APPROVAL_ID),
    ]


@pytest.mark.parametrize("view", QUEUE_VIEWS)
def test_arguments_that_do_not_fit_get_a_marker_and_a_link_never_buttons(view: Any) -> None:
    arguments = {"blob": "x" * 10_000, "iban": "ATTACKER-IBAN-XX00"}
    approval = make_approval(arguments=arguments).evolve(card=CARD)
    view_blocks = view([approval], links={APPROVAL_ID: PERMALINK})
    assert decision_buttons(view_blocks) == []
    shown = "\n".join(mrkdwn_texts("", view_blocks))
    assert MARKER.search(shown), "no truncation marker"
    assert f"<{PERMALINK}|" in shown


@pytest.mark.parametrize("view", QUEUE_VIEWS)
def test_a_long_summary_also_sends_the_approver_to_the_card(view: Any) -> None:
    approval = make_approval(summary="s" * 5000).evolve(card=CARD)
    view_blocks = view([approval])
    assert decision_buttons(view_blocks) == []
    shown = "\n".join(mrkdwn_texts("", view_blocks))
    assert MARKER.search(shown)
    # without a fetched permalink, Slack's redirect to the card's channel
    assert "<https://slack.com/app_redirect?channel=C0REVIEWS|" in shown


@pytest.mark.parametrize("view", QUEUE_VIEWS)
def test_a_cut_request_without_a_card_yet_has_no_link_and_no_buttons(view: Any) -> None:
    view_blocks = view([make_approval(arguments={"blob": "x" * 10_000})])
    assert decision_buttons(view_blocks) == []
    assert "<http" not in json.dumps(view_blocks)


@pytest.mark.parametrize("view", QUEUE_VIEWS)
def test_a_backtick_in_an_argument_cannot_turn_text_bold_in_the_queue(view: Any) -> None:
    approval = make_approval(arguments={"memo": "`*Pre-approved by CFO*`", "amount": 500})
    for text in mrkdwn_texts("", view([approval])):
        assert "*Pre-approved" not in outside_code(text), text
        assert "`" not in outside_code(text), text  # no inline code spans at all


def test_an_untrusted_link_is_not_used() -> None:
    approval = make_approval(arguments={"blob": "x" * 10_000}).evolve(card=CARD)
    for bad in ("javascript:alert(1)", "https://evil|bank", "https://x> <!channel"):
        shown = json.dumps(home([approval], links={APPROVAL_ID: bad}))
        assert bad not in shown
        assert "app_redirect?channel=C0REVIEWS" in shown


@pytest.mark.parametrize(("view", "max_blocks"), [(home, 100), (slash, 50)])
def test_a_full_queue_stays_within_the_views_limits(view: Any, max_blocks: int) -> None:
    approvals = [
        make_approval(arguments={f"k{j}": "v" * 500 for j in range(10)}, summary="s" * 2000).evolve(
            approval_id=f"apr_{i:024x}", card=CARD
        )
        for i in range(30)
    ]
    view_blocks = view(approvals)
    assert len(view_blocks) <= max_blocks
    ids = [b["block_id"] for b in view_blocks if "block_id" in b]
    assert len(ids) == len(set(ids)), "block ids must be unique within a view"
    for text in section_texts(view_blocks):
        assert utf16(text) <= SECTION_LIMIT
    assert "more waiting" in json.dumps(view_blocks)  # the rest is announced, not dropped


@pytest.mark.parametrize("tool", ["&" * 200, "🚀" * 200])
def test_the_requested_list_never_cuts_an_entity(tool: str) -> None:
    requested = [make_approval(tool=tool).evolve(approval_id=f"apr_{i:024x}") for i in range(20)]
    view_blocks = rendering.home_view([], requested)["blocks"]
    for text in section_texts(view_blocks):
        assert utf16(text) <= SECTION_LIMIT
        assert re.sub(r"&(amp|lt|gt);", "", text).count("&") == 0


def _execution_text(approval: models.Approval, now: datetime | None = None) -> str:
    _, card_blocks = rendering.card(approval, now)
    [block] = [b for b in card_blocks if b.get("block_id") == "execution"]
    return json.dumps(block, ensure_ascii=False)


def test_an_approved_card_shows_until_when_the_call_may_run_then_that_it_lapsed() -> None:
    approval = make_approval(status=S.APPROVED)
    assert approval.valid_until is not None
    assert "may run it once, until <!date^" in _execution_text(approval)
    after = approval.valid_until + timedelta(seconds=1)
    assert "Not claimed to run by" in _execution_text(approval, after)
    for status in (S.PENDING, S.DENIED, S.EXPIRED, S.CANCELLED):
        _, card_blocks = rendering.card(make_approval(status=status), after)
        assert all(b.get("block_id") != "execution" for b in card_blocks)


def test_a_claimed_call_is_running_until_its_outcome_is_overdue() -> None:
    base = make_approval(status=S.APPROVED)
    assert base.decided_at is not None
    claimed = base.evolve(
        execution=models.Execution(
            claim_id="exc_1", idempotency_key="k", claimed_at=base.decided_at
        )
    )
    assert "no outcome reported yet" in _execution_text(claimed, base.decided_at)
    late = base.decided_at + timedelta(seconds=claimed.report_within)
    assert "no outcome reported:" in _execution_text(claimed, late)


@pytest.mark.parametrize(
    "detail",
    [
        "<!channel> done",
        "*bold* `code` <@U0EVIL>",
        "x" * 2000,
        "fine\n\n:white_check_mark: *Approved* by Boss",  # a line of its own that reads like ours
    ],
)
def test_a_reported_outcome_is_shown_inert_and_cut(detail: str) -> None:
    base = make_approval(status=S.APPROVED)
    assert base.decided_at is not None
    outcome = models.ExecutionOutcome(status="error", detail=detail, reported_at=base.decided_at)
    ran = base.evolve(
        execution=models.Execution(
            claim_id="exc_1", idempotency_key="k", claimed_at=base.decided_at, outcome=outcome
        )
    )
    text = _execution_text(ran)
    assert "Ran at <!date^" in text
    assert "by sales-bot: error" in text
    assert "<!channel>" not in text
    assert "<@U0EVIL>" not in text
    [line] = json.loads(text)["text"]["text"].splitlines()  # one line, whatever the detail
    assert len(line) < 500  # cut to the card's share
    if len(detail) > rendering.OUTCOME_DETAIL_SHOWN:
        assert line.endswith("…")


def test_a_claude_code_call_allowed_to_run_never_warns_of_an_outcome_that_cannot_come() -> None:
    base = make_approval(status=S.APPROVED).evolve(framework="claude-code")
    assert base.decided_at is not None
    execution = models.Execution(claim_id="exc_1", idempotency_key="k", claimed_at=base.decided_at)
    claimed = base.evolve(execution=execution)
    late = base.decided_at + timedelta(seconds=claimed.report_within + 1)
    text = _execution_text(claimed, late)
    assert "Claude Code reports no outcome" in text
    assert "no outcome reported:" not in text
