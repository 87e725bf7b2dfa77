"""One corpus of hostile text, run over every Slack surface Countersign renders.

Untrusted text (anything an agent sends: tool name, call id, arguments, summary, names, a lead's
context, the error a callback answered with, a refusal's detail) must come out inert wherever it
is shown: the card, the App Home, the ``/approvals`` answer, the Deny modal, the reminder in the
card's thread, the escalation post to on-call, and the ephemeral answers to clicks. Inert means:
no live mention, channel or user-group link, disguised link, date token or formatting made from
it; no invisible or reordering characters; and every Block Kit limit holds.

The formatting check compares each rendering with the rendering of a *benign twin* of the same
hostile text (its ``*``, ``_`` and ``~`` replaced by ``-``, so every length and every cut stays
the same): the delimiters that could open or close a span must be exactly those of our own
templates, so none can have come from the untrusted text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals import hashing, models, policy, service
from bot import rendering, untrusted_text
from guards import authority

S = models.Status
APPROVAL_ID = "apr_0123456789abcdef01234567"
CREATED = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
DECIDER = models.Decider(slack_user_id="U0ALMA", name="Alma", at=CREATED + timedelta(minutes=5))
PERMALINK = "https://standin.slack.com/archives/C0REVIEWS/p1700000000000100"
CARD = models.CardRef(channel="C0REVIEWS", ts="1700000000.000100")
ROLES = [policy.Role(usergroups=("S0FINANCE",)), policy.Role(users=("U0APP",))]
ONCALL = policy.OnCall(channel="C0ONCALL", usergroup="S0ONCALL")
PRESETS = ("Amount looks wrong", "Wrong recipient")

HOSTILE = [
    # mentions, channel and user-group links, disguised links, date tokens
    "<!channel>",
    "<!here>",
    "<!everyone>",
    "<!here|here>",
    "@channel @here @everyone",
    "<@U123>",
    "<@W0ADMIN|boss>",
    "<#C123>",
    "<#C0GENERAL|general>",
    "#general",
    "<!subteam^S123>",
    "<!subteam^S123|@oncall>",
    "<https://evil.example|bank.com>",
    "<http://evil.example|https://bank.example>",
    "https://evil.example/pay",
    "<mailto:ceo@example.com|CEO>",
    "<!date^1^{date}|Approved by CFO>",
    # entities: shown literally, never decoded into markup
    "&lt;!here&gt;",
    "&amp;lt;!channel&amp;gt;",
    "Tom & Jerry <b>bold</b> a>b",
    # code spans and blocks
    "`code`",
    "``` <!channel> ```",
    "end of block```\n*Approved by finance*\n```",
    "`*Pre-approved by CFO*`",
    "`" * 11,
    # formatting
    "*bold*",
    "_it_",
    "~s~",
    "*Pre-approved by CFO*",
    "Pay *now* or _never_ ~ok~",
    "(*a*) [_b_] {~c~}",
    "x*y*z a_b_c",  # inside words: shown as is, it cannot format
    "**",
    "*\n*",
    "> quoted",
    "ok\n> quoted line",
    "&gt; quoted",
    # reordering and invisible characters
    "\u202eevil.com",
    "moc.live\u202d",
    "\u2066ltr\u2069 \u2067rtl\u2069 \u2068fsi\u2069",
    "a\u200bb\u200cc\u200ed\u200fe\u2060f\ufeffg\u00adh",
    "\u200b*\u200bbold\u200b*\u200b",
    "\u200b_\u200bit\u200b_",
    "tag\U000e0041\U000e0042smuggled",
    "line\u2028separator\u2029paragraph",
    "ctrl\x1b[31m\x07\r",
    # length, emoji and UTF-16 surrogate pairs at the limits
    "x" * 10_000,
    "&" * 5000,
    "<" * 3000,
    "*_" * 2000,
    "🚀" * 3000,
    "a🚀" * 2000,
    "👩\u200d👩\u200d👧\u200d👦" * 500,
    "日本語" * 1500,
]

PLACES = [
    "tool",
    "call_id",
    "argument_value",
    "argument_key",
    "summary",
    "requester_name",
    "requester_email",
    "session",
    "agent",
    "lead_context",
    "why",
    "delivery_error",
]


def benign(text: str) -> str:
    """The same text with every formatting delimiter replaced (same length, same cuts)."""
    return re.sub(r"[*_~]", "-", text)


def make(
    place: str, text: str, *, status: S = S.PENDING, escalated: bool = False
) -> models.Approval:
    """An approval with ``text`` in ``place`` (cut to the wire's limit for that field)."""
    tool, call_id = "transfer_money", "call_1"
    arguments: dict[str, Any] = {"amount": 500, "currency": "EUR"}
    requester = models.Requester(slack_user_id="U0REQ", email="rita@example.com", name="Rita")
    changes: dict[str, Any] = {}
    match place:
        case "tool":
            tool = text[:200]
        case "call_id":
            call_id = ("c" + text)[:200].strip() or "c"
        case "argument_value":
            arguments = {"note": text, "amount": 500}
        case "argument_key":
            arguments = {text: 1}
        case "summary":
            changes["summary"] = text[:2000]
        case "requester_name":
            requester = models.Requester(slack_user_id="U0REQ", name=text[:200])
        case "requester_email":
            local = re.sub(r"[@\s\x1c-\x1f\x85\ufeff]", "", text)[:64] or "x"
            requester = models.Requester(email=f"{local}@example.com")
        case "session":
            changes["session_id"] = text[:200]
        case "agent":
            changes["agent"] = text[:200]
        case "lead_context":
            changes["request_id"] = models.TURN_REQUEST_PREFIX + "call_1"
            changes["context"] = {"channel": text, "lead_id": text[:200], "why": text}
        case "why":
            changes["why"] = text
        case "delivery_error":
            changes["delivery"] = models.Delivery(status="dead_letter", attempts=7, last_error=text)
        case _:
            raise AssertionError(place)
    settled = status is not S.PENDING
    return models.Approval(
        approval_id=APPROVAL_ID,
        status=status,
        agent=changes.pop("agent", "sales-bot"),
        request_id=changes.pop("request_id", "af-call-7"),
        session_id=changes.pop("session_id", "thread-1"),
        tool=models.ToolCall(name=tool, call_id=call_id, arguments=arguments),
        arguments_sha256=hashing.arguments_sha256(arguments),
        requester=requester,
        required=models.Required(role="finance", approvals=2 if not settled else 1),
        rule="rules[0] tool=transfer_*",
        decided_by=(DECIDER,),
        reason="Denied." if status is S.DENIED else None,
        created_at=CREATED,
        expires_at=CREATED + timedelta(hours=1),
        decided_at=CREATED + timedelta(minutes=5) if settled else None,
        policy_version="pol_0123456789abcdef",
        fingerprint="f" * 64,
        card=CARD,
        escalated_at=CREATED + timedelta(minutes=30) if escalated else None,
        **changes,
    )


# --- every surface, rendered purely -------------------------------------------------------

Kind = Literal["message", "home", "modal", "text"]


@dataclass(frozen=True)
class Rendered:
    surface: str
    kind: Kind
    text: str | None  # a message's top-level text (parsed as mrkdwn by Slack)
    blocks: list[dict[str, Any]]
    view: dict[str, Any] | None = None


def surfaces(approval: models.Approval, text: str) -> Iterator[Rendered]:
    """Everything Countersign can show about ``approval``; ``text`` also goes where a surface
    carries untrusted text of its own (a refusal's detail)."""
    fallback, card_blocks = rendering.card(approval)
    yield Rendered("card", "message", fallback, card_blocks)
    links = {approval.approval_id: PERMALINK}
    home = rendering.home_view([approval], [approval], links=links)
    yield Rendered("app_home", "home", None, home["blocks"], home)
    answer, queue = rendering.queue_message([approval], [approval], links=links)
    yield Rendered("approvals_command", "message", answer, queue)
    modal = rendering.deny_modal(approval, "C0REVIEWS", PRESETS)
    yield Rendered("deny_modal", "modal", None, modal["blocks"], modal)
    yield Rendered("reminder", "text", rendering.reminder(approval, ROLES), [])
    yield Rendered("escalation", "text", rendering.escalation(approval, ONCALL, PERMALINK), [])
    yield Rendered("escalation_no_link", "text", rendering.escalation(approval, ONCALL, None), [])
    verdicts = [
        authority.Verdict(outcome=authority.Outcome.OVER_LIMIT, reason=f"amount {text} > 50000"),
        authority.Verdict(
            outcome=authority.Outcome.LOOKUP_FAILED,
            reason=f"your Slack profile could not be checked ({text})",
        ),
    ]
    results: list[service.ClickResult] = [
        *(service.Refused(approval, verdict) for verdict in verdicts),
        service.Stale(approval),
        service.Voted(approval),
        service.Duplicate(approval),
        service.Expired(approval),
    ]
    for result in results:
        said = rendering.click_answer(result)
        if said is not None:
            yield Rendered(f"answer_{type(result).__name__}", "text", said, [])
    yield Rendered("click_problem", "text", rendering.click_problem(text), [])


# --- what Slack would parse ---------------------------------------------------------------

DATE_TOKEN = r"<!date\^\d+\^\{date_short_pretty\} \{time\}\|[^<>|]*>"
OUR_MARKUP = re.compile(
    "|".join(
        [
            DATE_TOKEN,
            r"<@U0ALMA>",  # the decider, from Slack's own signed payload
            r"<!subteam\^S0FINANCE>",  # from the policy file
            r"<@U0APP>",
            r"<!subteam\^S0ONCALL>",
            rf"<(?:{re.escape(PERMALINK)}|https://slack\.com/app_redirect\?channel=C0REVIEWS)"
            r"\|[^<>|`*_~]*>",
            r"`countersign redrive apr_[0-9a-f]{24}`",
        ]
    )
)
INVISIBLE = re.compile(
    "[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b\u200c\u200e\u200f"
    "\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\U000e0000-\U000e007f]"
)
ENTITY = re.compile(r"&(amp|lt|gt);")
QUOTE = re.compile(r"(^|\n)[ \t]*(&gt;|>)")  # a line Slack would show as a quote


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _ascii_word(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def boundary_delimiters(text: str) -> list[str]:
    """The ``*``, ``_`` and ``~`` that could open or close a span: all but those between two
    ASCII letters or digits (Slack formats only at word boundaries)."""
    out = []
    for i, ch in enumerate(text):
        if ch in "*_~":
            before = text[i - 1] if i else " "
            after = text[i + 1] if i + 1 < len(text) else " "
            if not (_ascii_word(before) and _ascii_word(after)):
                out.append(ch)
    return out


def split_code(text: str) -> tuple[str, list[str]]:
    """(the text outside ``` code blocks, the code blocks' bodies)."""
    parts = text.split("```")
    assert len(parts) % 2 == 1, f"an unclosed code block: {text[:200]!r}"
    return "\n".join(parts[0::2]), parts[1::2]


def assert_entities_only(text: str, where: str) -> None:
    assert "<" not in text, (where, text[:300])
    assert ">" not in text, (where, text[:300])
    assert ENTITY.sub("", text).count("&") == 0, (where, text[:300])


def mrkdwn_strings(rendered: Rendered) -> Iterator[str]:
    """Every string Slack parses as mrkdwn, checking each text object's flags on the way."""
    if rendered.text is not None:
        yield rendered.text
    for obj in text_objects(rendered.blocks):
        if obj["type"] == "mrkdwn":
            # verbatim: no automatic parsing of bare URLs, #channel names or @here
            assert obj.get("verbatim") is True, (rendered.surface, obj)
            yield obj["text"]


def text_objects(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        if value.get("type") in ("mrkdwn", "plain_text") and isinstance(value.get("text"), str):
            yield value
            return
        for item in value.values():
            yield from text_objects(item)
    elif isinstance(value, list):
        for item in value:
            yield from text_objects(item)


def inert_parts(rendered: Rendered) -> list[str]:
    """Check each mrkdwn string; return its outside-code text (with our markup taken out)."""
    outside_all = []
    for text in mrkdwn_strings(rendered):
        where = rendered.surface
        text.encode("utf-8")  # no lone surrogate: a pair was never split
        outside, codes = split_code(text)
        outside = OUR_MARKUP.sub(" ", outside)
        assert_entities_only(outside, where)
        assert "`" not in outside, (where, "a code span outside a code block", outside[:300])
        assert not QUOTE.search(outside), (where, "a line that quotes", outside[:300])
        assert not INVISIBLE.search(outside), (where, outside[:300])
        for body in codes:
            assert_entities_only(body, where)
            # our own zero-width space after each backtick is what keeps the fence shut
            assert not INVISIBLE.search(body.replace("`\u200b", "`")), (where, body[:300])
        outside_all.append(outside)
    for obj in text_objects(rendered.blocks):
        if obj["type"] == "plain_text":
            assert not INVISIBLE.search(obj["text"]), (rendered.surface, obj)
            obj["text"].encode("utf-8")
    return outside_all


def assert_within_limits(rendered: Rendered) -> None:
    where = rendered.surface
    max_blocks = {"message": 50, "home": 100, "modal": 100, "text": 0}[rendered.kind]
    assert len(rendered.blocks) <= max_blocks, where
    ids = [b["block_id"] for b in rendered.blocks if "block_id" in b]
    assert len(ids) == len(set(ids)), (where, "block ids must be unique")
    assert all(len(i) <= 255 for i in ids), where
    if rendered.text is not None:
        assert utf16(rendered.text) <= 3000, where  # well within chat.postMessage's 40,000
    for block in rendered.blocks:
        match block["type"]:
            case "header":
                assert block["text"]["type"] == "plain_text"
                assert utf16(block["text"]["text"]) <= 150, where
            case "section":
                if "text" in block:
                    assert utf16(block["text"]["text"]) <= 3000, where
                fields = block.get("fields", [])
                assert len(fields) <= 10, where
                assert all(utf16(f["text"]) <= 2000 for f in fields), where
            case "context":
                assert len(block["elements"]) <= 10, where
                assert all(utf16(e["text"]) <= 3000 for e in block["elements"]), where
            case "actions":
                assert len(block["elements"]) <= 25, where
                for button in block["elements"]:
                    assert utf16(button["text"]["text"]) <= 75, where
                    assert len(button["value"]) <= 2000, where
            case "input":
                assert utf16(block["label"]["text"]) <= 2000, where
                for option in block["element"].get("options", []):
                    assert utf16(option["text"]["text"]) <= 75, where
            case other:
                raise AssertionError(f"{where}: unexpected block type {other}")
    if rendered.view is not None and rendered.kind == "modal":
        assert utf16(rendered.view["title"]["text"]) <= 24, where
        assert len(rendered.view["private_metadata"]) <= 3000, where


def check(render: Callable[[str], models.Approval], text: str) -> None:
    hostile = list(surfaces(render(text), text))
    twin = list(surfaces(render(benign(text)), benign(text)))
    assert [r.surface for r in hostile] == [r.surface for r in twin]
    for shown, plain in zip(hostile, twin, strict=True):
        assert_within_limits(shown)
        outside = inert_parts(shown)
        expected = inert_parts(plain)
        # the delimiters that could format are our templates' own, not the untrusted text's
        assert [boundary_delimiters(o) for o in outside] == [
            boundary_delimiters(o) for o in expected
        ], shown.surface


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("text", HOSTILE, ids=lambda t: repr(t[:24]))
def test_untrusted_text_is_inert_on_every_surface(text: str, place: str) -> None:
    check(lambda t: make(place, t), text)


@pytest.mark.parametrize("status", [S.APPROVED, S.DENIED, S.EXPIRED, S.CANCELLED])
@pytest.mark.parametrize("place", ["tool", "summary", "requester_name", "delivery_error"])
@pytest.mark.parametrize("text", HOSTILE[::4], ids=lambda t: repr(t[:24]))
def test_settled_surfaces_too(text: str, place: str, status: S) -> None:
    check(lambda t: make(place, t, status=status), text)


@pytest.mark.parametrize("text", HOSTILE[::3], ids=lambda t: repr(t[:24]))
def test_an_escalated_pending_card_too(text: str) -> None:
    check(lambda t: make("summary", t, escalated=True), text)


# --- the one escaping function ------------------------------------------------------------


@pytest.mark.parametrize("text", HOSTILE, ids=lambda t: repr(t[:24]))
def test_escape_leaves_nothing_live(text: str) -> None:
    escaped = untrusted_text.escape(text)
    assert_entities_only(escaped, "escape")
    assert "`" not in escaped
    assert not INVISIBLE.search(escaped)
    assert boundary_delimiters(escaped) == []


def test_escape_keeps_ordinary_names_readable() -> None:
    assert untrusted_text.escape("transfer_money") == "transfer_money"
    assert untrusted_text.escape("discount_pct 15 > 10") == "discount_pct 15 &gt; 10"
    assert untrusted_text.escape("AT&T") == "AT&amp;T"
    assert untrusted_text.escape("👩\u200d👧 日本語 é") == "👩\u200d👧 日本語 é"  # ZWJ joins emoji


def test_escape_shows_hidden_characters() -> None:
    assert untrusted_text.escape("pay\u202eevil") == "pay[U+202E]evil"
    assert untrusted_text.escape("a\u200bb") == "a[U+200B]b"
    assert untrusted_text.escape("tag\U000e0041") == "tag[U+E0041]"


def test_hidden_characters_in_arguments_stay_exact_json() -> None:
    arguments = {"iban": "DE89\u200b3704\u202e0044", "memo": "tag\U000e0041"}
    _, card_blocks = rendering.card(
        make("argument_value", "x").evolve(
            tool=models.ToolCall(name="t", call_id="c", arguments=arguments)
        )
    )
    [text] = [b["text"]["text"] for b in card_blocks if b.get("block_id") == "arguments"]
    body = text.split("```")[1]
    for escaped in ("\\u200b", "\\u202e", "\\udb40\\udc41"):
        assert escaped in body
    assert json.loads(body.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")) == (
        arguments
    )


# --- the one-pass renderer against the per-character reference ------------------------------

# every character the rules treat apart, and ordinary ones around them
_TRICKY = st.sampled_from(
    list(" \t\n\r>&<*_~`aZ9é\u200b\u202e\u00ad\U000e0041\U0001f469\u200d\x00\x7f\x1b")
)
_TEXTS = st.lists(_TRICKY | st.characters(), max_size=60).map("".join)


@settings(max_examples=800, deadline=None)
@given(text=_TEXTS, mode=st.sampled_from(["mrkdwn", "code", "plain"]))
def test_render_is_the_pieces_joined(text: str, mode: Literal["mrkdwn", "code", "plain"]) -> None:
    assert untrusted_text._render(text, mode) == "".join(untrusted_text._pieces(text, mode))


@settings(max_examples=800, deadline=None)
@given(
    text=_TEXTS,
    mode=st.sampled_from(["mrkdwn", "code", "plain"]),
    budget=st.integers(min_value=0, max_value=80),
)
def test_cut_of_a_prefix_is_the_cut_of_the_whole(
    text: str, mode: Literal["mrkdwn", "code", "plain"], budget: int
) -> None:
    # the cut looks at no more than budget + 1 characters, and still cuts where it did
    assert untrusted_text._within(text, mode, budget) == untrusted_text._cut(
        untrusted_text._pieces(text, mode), budget
    )


# --- the fast paths of counting and escaping, against their references ----------------------

_WITH_SURROGATES = st.lists(_TRICKY | st.characters() | st.just("\ud800"), max_size=60).map("".join)


@settings(max_examples=800, deadline=None)
@given(text=_WITH_SURROGATES)
def test_slack_len_counts_utf16_units(text: str) -> None:
    # ASCII is counted without encoding: the count must be the encoding's all the same
    assert untrusted_text.slack_len(text) == len(text.encode("utf-16-le", "surrogatepass")) // 2


def test_slack_len_counts_an_astral_character_as_two_units() -> None:
    assert untrusted_text.slack_len("ab") == 2
    assert untrusted_text.slack_len("a\U0001f469") == 3
    assert untrusted_text.slack_len("\ud800") == 1


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | _TEXTS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXTS, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=500, deadline=None)
@given(value=_JSON_VALUES)
def test_hidden_characters_become_json_escapes_one_by_one(value: object) -> None:
    raw = json.dumps(value, ensure_ascii=False, indent=2)
    escaped = untrusted_text.hidden_as_json_escapes(raw)
    reference = "".join(json.dumps(ch)[1:-1] if untrusted_text.is_hidden(ch) else ch for ch in raw)
    assert escaped == reference
    assert json.loads(escaped) == value  # still the same JSON
    assert not any(untrusted_text.is_hidden(ch) for ch in escaped)


def test_text_len_counts_every_text_however_nested() -> None:
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": "abc"}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": "de"}, {"text": "\U0001f469"}]},
        [{"elements": [[{"text": "f"}]]}],
        {"text": 5, "value": "not a text"},
    ]
    assert rendering._text_len(blocks) == 3 + 2 + 2 + 1
