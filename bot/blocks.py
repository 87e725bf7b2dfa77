"""Block Kit rendering and click parsing: pure functions, tested snapshot-style.

Everything an agent sends (tool name, call id, arguments, summary, names, a lead's context) is
untrusted, and so is what comes back from elsewhere (a callback's error, a refusal's detail).
All of it reaches Slack through one function, :func:`escape` (or :func:`truncate_escaped`, the
same with a length budget), on every surface: the card, the App Home, the ``/approvals``
answer, the Deny modal, reminders, escalations and ephemeral answers. What comes out is inert:

* ``&``, ``<`` and ``>`` become entities, so no ``<!channel>``, mention or disguised link;
* Slack's mrkdwn has no escape for its formatting characters, so a ``*``, ``_`` or ``~`` that
  could open or close a span (any not between two ASCII letters or digits: ``transfer_money``
  stays as it is) and every backtick become look-alikes; a ``>`` starting a line cannot quote;
* characters that render as nothing or reorder the text (bidi overrides, zero-width spaces,
  tag characters) are shown as ``[U+202E]``; a zero-width space would also make Slack treat
  the character beside it as a word boundary.

Arguments are shown as JSON in a code block, where formatting is off: only the entities, and a
zero-width space after each backtick so the content cannot close the fence; hidden characters
there become JSON ``\\u`` escapes, so the block is still exactly the arguments. Every mrkdwn
text object is ``verbatim`` (no automatic linking of bare URLs, ``#channel`` or ``@here``).
Long text is cut within Slack's limits with a visible marker.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, assert_never

from approvals import models, policy, service
from bot import messages

__all__ = [
    "APPROVE",
    "DENY",
    "DENY_VIEW",
    "HOME_ITEMS",
    "MESSAGE_ITEMS",
    "Click",
    "DenySubmission",
    "card",
    "click_answer",
    "click_problem",
    "deny_modal",
    "escalation",
    "escape",
    "fits",
    "home_view",
    "parse_click",
    "parse_deny_submission",
    "queue_blocks",
    "queue_message",
    "reminder",
    "truncate_escaped",
]

APPROVE = "countersign_approve"
DENY = "countersign_deny"
DENY_VIEW = "countersign_deny_reason"  # the modal's callback_id
REASON_BLOCK, REASON_INPUT = "reason", "reason_input"
PRESET_BLOCK, PRESET_INPUT = "preset", "preset_select"
SECTION_LIMIT = 3000  # characters in a section's text
FIELD_LIMIT = 2000
HEADER_LIMIT = 150
VALUE_LIMIT = 500  # one untrusted value inside one of our sentences
ZWSP = "\u200b"
# queue items per surface: up to four blocks each, within 100 blocks (App Home) or 50 (message)
HOME_ITEMS = 20
MESSAGE_ITEMS = 10

# --- untrusted text -----------------------------------------------------------------------

# Code points that render as nothing or reorder what follows. The zero-width joiner is left
# alone: emoji sequences (👩‍👧) are made of it, and it breaks no word boundary.
_HIDDEN = frozenset(
    [
        *range(0x00, 0x09),
        *range(0x0B, 0x20),
        *range(0x7F, 0xA0),
        0x00AD,
        0x061C,
        0x180E,
        0x200B,
        0x200C,
        0x200E,
        0x200F,
        0x2028,
        0x2029,
        *range(0x202A, 0x202F),
        *range(0x2060, 0x2065),
        *range(0x2066, 0x206A),
        0xFEFF,
        *range(0xE0000, 0xE0080),
    ]
)
# Look-alikes for mrkdwn's formatting characters (Slack offers no way to escape them).
_LOOKALIKES = {"*": "\u2217", "_": "\u02cd", "~": "\u223c", "`": "\u02cb"}
_QUOTE_LOOKALIKE = "\u203a"  # a ">" that starts a line would quote it
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
Mode = Literal["mrkdwn", "code", "plain"]
Block = dict[str, Any]  # one Block Kit block, as JSON


def _hidden(ch: str) -> bool:
    return ord(ch) in _HIDDEN


def _shown(ch: str) -> str:
    return f"[U+{ord(ch):04X}]"


def _word(ch: str | None) -> bool:
    return ch is not None and ch.isascii() and ch.isalnum()


def _pieces(text: str, mode: Mode) -> list[str]:
    """``text`` rendered for ``mode``, one piece per source character (so a cut between
    pieces never splits an entity, a ``[U+…]`` or a surrogate pair)."""
    out: list[str] = []
    line_start = True  # only spaces since the start or the last newline
    for i, ch in enumerate(text):
        before = text[i - 1] if i else None
        after = text[i + 1] if i + 1 < len(text) else None
        out.append(
            _piece(ch, mode, inside_word=_word(before) and _word(after), line_start=line_start)
        )
        if ch == "\n":
            line_start = True
        elif ch not in " \t":
            line_start = False
    return out


def _piece(ch: str, mode: Mode, *, inside_word: bool, line_start: bool) -> str:
    """One character for ``mode``: plain text only shows hidden characters; code keeps the
    formatting characters (inert there) but splits backtick runs; mrkdwn neutralises all."""
    if ch in "\n\t":
        return ch
    if _hidden(ch):
        return _shown(ch)
    if mode == "plain":
        return ch
    if ch == ">" and line_start and mode == "mrkdwn":
        return _QUOTE_LOOKALIKE
    if ch in _ENTITIES:
        return _ENTITIES[ch]
    if mode == "code":
        return ch + ZWSP if ch == "`" else ch
    if ch in _LOOKALIKES and (ch == "`" or not inside_word):
        return _LOOKALIKES[ch]
    return ch


# The same rendering as _pieces, in one regex pass that stops only at the characters that
# change (most text has none): cards render every untrusted value, and a Python loop over each
# character was the largest cost of posting a card. _pieces stays the reference (the property
# tests compare the two) and does the cutting, where pieces matter.
def _char_class(points: frozenset[int]) -> str:
    """A regex character class body of ``points``, as ranges (a class of single characters is
    matched by a scan of each)."""
    ranges: list[list[int]] = []
    for p in sorted(points):
        if ranges and ranges[-1][1] == p - 1:
            ranges[-1][1] = p
        else:
            ranges.append([p, p])
    return "".join(
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
        for a, b in ranges
    )


_HIDDEN_CLASS = _char_class(_HIDDEN)
_SPECIAL: dict[Mode, re.Pattern[str]] = {
    "plain": re.compile(f"[{_HIDDEN_CLASS}]"),
    "code": re.compile(f"[{_HIDDEN_CLASS}&<>`]"),
    # a ">" after nothing but spaces since the line's start quotes the line
    "mrkdwn": re.compile(f"(?m)(?P<quote>^[ \\t]*>)|[{_HIDDEN_CLASS}&<>`*_~]"),
}


def _render(text: str, mode: Mode) -> str:
    """``"".join(_pieces(text, mode))``, without a step per character."""
    special = _SPECIAL[mode]
    if special.search(text) is None:
        return text

    def one(match: re.Match[str]) -> str:
        found = match.group()
        if match.lastgroup == "quote":
            return found[:-1] + _QUOTE_LOOKALIKE  # the spaces kept, the ">" made inert
        at = match.start()
        inside_word = at > 0 and _word(text[at - 1]) and at + 1 < len(text) and _word(text[at + 1])
        return _piece(found, mode, inside_word=inside_word, line_start=False)

    return special.sub(one, text)


def _slack_len(text: str) -> int:
    # Slack counts UTF-16 code units; counting them keeps emoji-heavy text within the limit.
    # (surrogatepass: a lone surrogate, which Slack text may hold, counts as the one unit it is)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _cut(pieces: list[str], budget: int) -> tuple[str, int]:
    out, used = [], 0
    for piece in pieces:
        size = _slack_len(piece)
        if used + size > budget:
            break
        out.append(piece)
        used += size
    return "".join(out), len(out)


def escape(text: str) -> str:
    """``text`` made inert for mrkdwn: no mention, link, formatting or hidden character."""
    return _render(text, "mrkdwn")


def truncate_escaped(text: str, budget: int, *, code: bool = False) -> tuple[str, int]:
    """``text`` escaped (for a code block if ``code``) and cut to ``budget`` Slack characters,
    with how many characters of ``text`` it shows (fewer than ``len(text)`` means cut).

    Cuts between source characters, so an entity like ``&amp;`` is never split.
    """
    return _within(text, "code" if code else "mrkdwn", budget)


def _within(text: str, mode: Mode, budget: int) -> tuple[str, int]:
    whole = _render(text, mode)
    if _slack_len(whole) <= budget:
        return whole, len(text)
    # Each source character renders to one UTF-16 unit at least, so no more than ``budget`` of
    # them fit: only those (and the one after, which decides whether the last is inside a word)
    # are cut into pieces, however long the text.
    return _cut(_pieces(text[: budget + 1], mode)[:budget], budget)


def _value(value: object, budget: int = VALUE_LIMIT) -> str:
    """One untrusted value for one of our sentences: escaped, and cut with "…" if long."""
    text = str(value)
    whole, shown = truncate_escaped(text, budget)
    if shown == len(text):
        return whole
    return truncate_escaped(text, budget - 1)[0] + "…"


def _fill(template: str, markup: Mapping[str, str] | None = None, **untrusted: object) -> str:
    """One of our sentences (trusted markup) with each untrusted value escaped on its own, so
    our ``*bold*`` survives and theirs cannot form. ``markup``: values we built ourselves."""
    return template.format(**(markup or {}), **{k: _value(v) for k, v in untrusted.items()})


def _plain(text: str, limit: int) -> str:
    """plain_text is never parsed for mentions or formatting, but hidden characters still
    hide, and it has its own limits (UTF-16 units)."""
    whole, shown = _within(text, "plain", limit)
    if shown == len(text):
        return whole
    return _within(text, "plain", limit - 1)[0] + "…"


def _mrkdwn(text: str) -> dict[str, Any]:
    """A mrkdwn text object: verbatim, so Slack links nothing we did not write as markup."""
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def _section(text: str, block_id: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "section", "text": _mrkdwn(text)}
    if block_id is not None:
        block["block_id"] = block_id
    return block


def _context(text: str, block_id: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "context", "elements": [_mrkdwn(text)]}
    if block_id is not None:
        block["block_id"] = block_id
    return block


def _mention(slack_user_id: str) -> str:
    """A decider's mention; an id not shaped like Slack's is shown as text instead."""
    if models.SLACK_USER_ID.fullmatch(slack_user_id):
        return f"<@{slack_user_id}>"
    return _value(slack_user_id, 100)


_SAFE_URL = re.compile(r"https://[^\s<>|`*_~\"']{1,1000}")
_CHANNEL_ID = re.compile(r"[CGD][A-Z0-9]{2,30}")


def _card_link(approval: models.Approval, links: Mapping[str, str]) -> str | None:
    """Where the approval's card is: the permalink the edge fetched, else Slack's redirect to
    the card's channel, else None (not posted yet)."""
    link = links.get(approval.approval_id)
    if link is not None and _SAFE_URL.fullmatch(link):
        return link
    if approval.card is not None and _CHANNEL_ID.fullmatch(approval.card.channel):
        return f"https://slack.com/app_redirect?channel={approval.card.channel}"
    return None


# --- the card -----------------------------------------------------------------------------


def _marker(shown: int, text: str, sha: str) -> str:
    return messages.TRUNCATED.format(shown=shown, total=len(text), sha=sha[:12])


def _arguments_json(arguments: Mapping[str, Any]) -> str:
    """The arguments as the reviewer reads them: indented JSON with hidden characters as
    ``\\u`` escapes (they only occur inside strings, so it is still the same JSON)."""
    raw = json.dumps(arguments, indent=2, ensure_ascii=False, sort_keys=True)
    return "".join(json.dumps(ch)[1:-1] if _hidden(ch) else ch for ch in raw)


def _arguments_block(approval: models.Approval, block_id: str) -> tuple[dict[str, Any], bool]:
    """The arguments in a code block, and whether they are shown whole."""
    raw = _arguments_json(approval.tool.arguments)
    head, fence = "*Arguments*\n```\n", "\n```"
    marker = _marker(0, raw, approval.arguments_sha256)
    # 12 spare characters: room for the digits of "shown" in the final marker
    budget = SECTION_LIMIT - _slack_len(head) - 2 * _slack_len(fence) - _slack_len(marker) - 12
    body, shown = truncate_escaped(raw, budget, code=True)
    text = head + body + fence
    whole = shown == len(raw)
    if not whole:
        text += "\n" + escape(_marker(shown, raw, approval.arguments_sha256))
    return _section(text, block_id), whole


def _summary_block(approval: models.Approval, block_id: str) -> tuple[dict[str, Any] | None, bool]:
    """The summary (None if there is none), and whether it is shown whole."""
    if not approval.summary:
        return None, True
    summary = approval.summary
    marker = _marker(len(summary), summary, approval.arguments_sha256)
    text, shown = truncate_escaped(summary, SECTION_LIMIT - _slack_len(marker) - 12)
    whole = shown == len(summary)
    if not whole:
        text += "\n" + escape(_marker(shown, summary, approval.arguments_sha256))
    return _section(text, block_id), whole


def fits(approval: models.Approval) -> bool:
    """Whether the card's rendering shows the arguments and the summary whole: only then may
    another surface (App Home, ``/approvals``) offer decision buttons beside them."""
    return _arguments_block(approval, "a")[1] and _summary_block(approval, "s")[1]


def _date(at: datetime) -> str:
    """Slack renders this in the reader's time zone; the fallback is UTC ISO."""
    return f"<!date^{int(at.timestamp())}^{{date_short_pretty}} {{time}}|{at.isoformat()}>"


def _requester(r: models.Requester) -> str:
    """Plain text (escaped by the field): agents' ids are shown, never turned into mentions."""
    parts = [r.name] if r.name else []
    if r.slack_user_id:
        parts.append(f"(Slack {r.slack_user_id})")
    if r.email:
        parts.append(r.email)
    return " ".join(parts)


def _field(label: str, value: str) -> dict[str, Any]:
    """A labelled field of untrusted plain text, escaped and cut to the field limit."""
    text, _ = truncate_escaped(value, FIELD_LIMIT - len(label) - 4)
    return _mrkdwn(f"*{label}*\n{text}")


def _needs(approval: models.Approval) -> str:
    required = approval.required
    return (
        "role "
        + " or ".join(required.roles)
        + (f", {required.approvals} approvals" if required.approvals > 1 else "")
    )


def _outcome(approval: models.Approval) -> str:
    who = ", ".join(_mention(d.slack_user_id) for d in approval.decided_by) or "the agent"
    at = _date(approval.decided_at) if approval.decided_at else "?"
    return messages.OUTCOME_LINE[approval.status].format(who=who, at=at)


def _lead_banner(approval: models.Approval) -> dict[str, Any]:
    """Only for a guard's escalation (``approval.lead_facing``): an agent's ``context`` can
    fill in the details shown, never make a plain approval look like one."""
    context = approval.context
    text = _fill(
        messages.LEAD_FACING,
        channel=context.get("channel", "?"),
        lead=context.get("lead_id", "?"),
        why=context.get("why", ""),
        rule=approval.rule,
    )
    return _section(text, "lead_facing")


def _header(approval: models.Approval) -> Block:
    header = messages.HEADER[approval.status].format(tool=approval.tool.name)
    return {"type": "header", "text": {"type": "plain_text", "text": _plain(header, HEADER_LIMIT)}}


def _facts(approval: models.Approval) -> Block:
    """For whom, from where, what it needs and until when."""
    return {
        "type": "section",
        "block_id": "facts",
        "fields": [
            _field("Requester", _requester(approval.requester)),
            _field("Agent", approval.agent),
            _field("Session", approval.session_id),
            _field("Needs", _needs(approval)),
            _mrkdwn("*Expires*\n" + _date(approval.expires_at)),
            _field("Tool", f"{approval.tool.name} (call {approval.tool.call_id})"),
        ],
    }


def _why_blocks(approval: models.Approval) -> list[Block]:
    """Why a human is asked: the lead banner of a guard's escalation, or the rule's reason."""
    if approval.lead_facing:
        return [_lead_banner(approval)]
    if approval.why:
        why = _fill(messages.WHY, rule=approval.rule, because=f": {approval.why}")
        return [_context(why, "why")]
    return []


def _schema_note(approval: models.Approval) -> list[Block]:
    if not approval.argument_schemas:
        return []
    globs = ", ".join(approval.argument_schemas)
    return [_context(_fill(messages.SCHEMA_CHECKED, globs=globs), "schema")]


def _provenance(approval: models.Approval) -> Block:
    """The ids a reviewer can quote: approval, arguments hash, rule and policy version."""
    context = (
        f"{approval.approval_id} · arguments sha256 {approval.arguments_sha256[:12]} · "
        f"{approval.rule} · policy {approval.policy_version}"
    )
    return _context(truncate_escaped(context, SECTION_LIMIT)[0])


def _pending_blocks(approval: models.Approval) -> list[Block]:
    """While pending: escalation and quorum progress, then the buttons."""
    out: list[Block] = []
    if approval.escalated_at is not None:
        escalated = messages.ESCALATED.format(at=_date(approval.escalated_at))
        out.append(_context(escalated, "escalated"))
    if approval.decided_by:
        progress = messages.PROGRESS.format(
            count=len(approval.decided_by),
            needed=approval.required.approvals,
            who=", ".join(_mention(d.slack_user_id) for d in approval.decided_by),
        )
        out.append(_section(progress, "progress"))
    out.append(_decision(approval, "countersign_decision"))
    return out


def _state_blocks(approval: models.Approval, now: datetime | None) -> list[Block]:
    if approval.status is models.Status.PENDING:
        return _pending_blocks(approval)
    return [_section(_outcome(approval), "outcome"), *_execution_blocks(approval, now)]


OUTCOME_DETAIL_SHOWN = 300  # characters of a reported outcome's text on the card


def _execution_blocks(approval: models.Approval, now: datetime | None) -> list[Block]:
    """An approved call's single run: until when it may run, that it is running (or that no
    outcome came in time), and how it went. ``now`` None: no deadline has passed yet."""
    until = approval.valid_until
    if until is None:
        return []
    execution = approval.execution
    if execution is None:
        lapsed = now is not None and now > until
        text = (messages.LAPSED if lapsed else messages.VALID_UNTIL).format(until=_date(until))
        return [_context(text, "execution")]
    outcome = execution.outcome
    if outcome is None:
        overdue = now is not None and approval.outcome_overdue(now)
        if not models.reports_outcomes(approval.framework):
            template = messages.CLAIMED_NO_REPORT  # none can come: no warning that none did
        else:
            template = messages.OUTCOME_OVERDUE if overdue else messages.CLAIMED
        text = _fill(template, markup={"at": _date(execution.claimed_at)}, agent=approval.agent)
        return [_context(text, "execution")]
    detail = ""
    if outcome.detail.strip():
        # one line: an agent's text never starts a line of its own that reads like ours
        detail = " — " + _value(" ".join(outcome.detail.split()), OUTCOME_DETAIL_SHOWN)
    text = _fill(
        messages.RAN[outcome.status],
        markup={"at": _date(outcome.reported_at), "detail": detail},
        agent=approval.agent,
    )
    return [_section(text, "execution")]


def _dead_letter_warning(approval: models.Approval) -> list[Block]:
    """The agent was never told: shown until someone redrives the callback."""
    if approval.delivery.status != "dead_letter":
        return []
    warning = _fill(
        messages.DEAD_LETTER,
        markup={"approval_id": approval.approval_id},
        attempts=approval.delivery.attempts,
        error=approval.delivery.last_error or "unknown",
    )
    return [_section(warning, "dead_letter")]


def _card_text(approval: models.Approval) -> str:
    """The message's fallback text (notifications, screen readers)."""
    if approval.settled:
        return _fill(messages.HEADER[approval.status], tool=approval.tool.name)
    return _fill(
        messages.CARD_FALLBACK,
        tool=approval.tool.name,
        requester=approval.requester.name or "someone",
        agent=approval.agent,
    )


def card(approval: models.Approval, now: datetime | None = None) -> tuple[str, list[Block]]:
    """The fallback text and blocks of an approval's card, for its current status (and, with
    ``now``, the deadlines of its single run that have passed)."""
    summary, _ = _summary_block(approval, "summary")
    card_blocks = [
        _header(approval),
        *([summary] if summary is not None else []),
        _facts(approval),
        *_why_blocks(approval),
        _arguments_block(approval, "arguments")[0],
        *_schema_note(approval),
        _provenance(approval),
        *_state_blocks(approval, now),
        *_dead_letter_warning(approval),
    ]
    return _card_text(approval), card_blocks


def _decision(approval: models.Approval, block_id: str) -> dict[str, Any]:
    return {
        "type": "actions",
        "block_id": block_id,
        "elements": [
            _button("Approve", APPROVE, approval.approval_id, "primary"),
            _button("Deny", DENY, approval.approval_id, "danger"),
        ],
    }


def _button(label: str, action_id: str, value: str, style: str) -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": label},
        "style": style,
        "value": value,  # the approval id only: everything else is looked up server-side
    }


# --- the card's thread and on-call ---------------------------------------------------------


def _who_can_decide(approval: models.Approval, roles: Sequence[policy.Role]) -> str:
    """Everyone who could decide: the roles' user groups, else their listed users (ids the
    policy validated), else the role names."""
    groups = [f"<!subteam^{g}>" for role in roles for g in role.usergroups]
    users = [f"<@{u}>" for role in roles for u in role.users]
    return " ".join(groups or users) or "role " + _value(" or ".join(approval.required.roles))


def reminder(approval: models.Approval, roles: Sequence[policy.Role]) -> str:
    """The reminder posted in the card's thread; ``roles``: the policy's required roles."""
    return _fill(
        messages.REMINDER, markup={"who": _who_can_decide(approval, roles)}, tool=approval.tool.name
    )


def escalation(approval: models.Approval, oncall: policy.OnCall, permalink: str | None) -> str:
    """The post to the on-call channel: it links the card, which stays the one place to
    decide; without a usable permalink, Slack's redirect to the card's channel."""
    link = _card_link(approval, {approval.approval_id: permalink} if permalink else {})
    where = messages.ESCALATION_LINK.format(link=link) if link is not None else messages.NO_CARD_YET
    return _fill(
        messages.ESCALATION,
        markup={
            "oncall": f"<!subteam^{oncall.usergroup}>" if oncall.usergroup else "On-call",
            "card": where,
            "expires": _date(approval.expires_at),
        },
        role=approval.required.role,
        tool=approval.tool.name,
        requester=approval.requester.name or approval.requester.email or "someone",
    )


# --- ephemeral answers --------------------------------------------------------------------


def click_answer(result: service.ClickResult) -> str | None:
    """The ephemeral text for the clicker, if any (a settled click shows on the card itself)."""
    match result:
        case service.Settled():
            return None
        case service.Voted(approval=approval):
            return messages.VOTED.format(
                count=len(approval.decided_by), needed=approval.required.approvals
            )
        case service.Duplicate(approval=approval):
            return messages.DUPLICATE.format(
                count=len(approval.decided_by), needed=approval.required.approvals
            )
        case service.Refused(approval=approval, verdict=verdict):
            return _fill(
                messages.REFUSED, reason=verdict.reason, role=" or ".join(approval.required.roles)
            )
        case service.Stale(approval=approval):
            by = ", ".join(_mention(d.slack_user_id) for d in approval.decided_by)
            return messages.ALREADY.format(
                status=approval.status.value, by=f" by {by}" if by else ""
            )
        case service.Expired():
            return messages.EXPIRED_CLICK
        case _:
            assert_never(result)


def click_problem(problem: str) -> str:
    """The answer to a click Countersign could not use."""
    return _fill(messages.MALFORMED_CLICK, problem=problem)


# --- clicks and the Deny modal ------------------------------------------------------------


@dataclass(frozen=True)
class Click:
    approval_id: str
    action: Literal["approve", "deny"]
    user_id: str
    channel_id: str | None


def parse_click(body: dict[str, Any]) -> Click:
    """The click in a ``block_actions`` payload; raises ValueError saying what is wrong."""
    user = body.get("user")
    if not isinstance(user, dict) or not isinstance(user.get("id"), str):
        raise ValueError("no user in the payload")
    actions = body.get("actions")
    if not isinstance(actions, list) or len(actions) != 1 or not isinstance(actions[0], dict):
        raise ValueError("expected exactly one action")
    action = actions[0]
    action_id = action.get("action_id")
    kind = {APPROVE: "approve", DENY: "deny"}.get(action_id) if isinstance(action_id, str) else None
    if kind is None:
        raise ValueError("unknown action")
    value = action.get("value")
    if not isinstance(value, str) or not models.APPROVAL_ID.fullmatch(value):
        raise ValueError("the button does not carry an approval id")
    channel = body.get("channel") or body.get("container") or {}
    channel_id = (
        channel.get("id") or channel.get("channel_id") if isinstance(channel, dict) else None
    )
    return Click(
        approval_id=value,
        action="approve" if kind == "approve" else "deny",
        user_id=user["id"],
        channel_id=channel_id if isinstance(channel_id, str) else None,
    )


def _optional_input(block_id: str, label: str, element: Block) -> Block:
    return {
        "type": "input",
        "block_id": block_id,
        "optional": True,
        "label": {"type": "plain_text", "text": label},
        "element": element,
    }


def _preset_input(presets: tuple[str, ...]) -> Block:
    """A menu of the policy's preset reasons; the option's value is its index."""
    options = [
        {"text": {"type": "plain_text", "text": _plain(p, 75)}, "value": str(i)}
        for i, p in enumerate(presets[:100])
    ]
    element = {"type": "static_select", "action_id": PRESET_INPUT, "options": options}
    return _optional_input(PRESET_BLOCK, messages.PRESET_LABEL, element)


def _reason_input() -> Block:
    # optional even where the rule requires a reason: that is checked on submission, so that a
    # preset alone can satisfy it
    element = {
        "type": "plain_text_input",
        "action_id": REASON_INPUT,
        "multiline": True,
        "max_length": 2000,
    }
    return _optional_input(REASON_BLOCK, messages.REASON_LABEL, element)


def deny_modal(
    approval: models.Approval, channel_id: str | None, presets: tuple[str, ...]
) -> dict[str, Any]:
    """The Deny modal. ``private_metadata`` carries the approval id (and where to answer)."""
    intro = _fill(
        messages.DENY_INTRO,
        tool=approval.tool.name,
        call_id=approval.tool.call_id,
        agent=approval.agent,
    )
    view_blocks = [
        _section(intro, "intro"),
        *([_preset_input(presets)] if presets else []),
        _reason_input(),
    ]
    return {
        "type": "modal",
        "callback_id": DENY_VIEW,
        "private_metadata": json.dumps(
            {"approval_id": approval.approval_id, "channel": channel_id}
        ),
        "title": {"type": "plain_text", "text": messages.DENY_TITLE},
        "submit": {"type": "plain_text", "text": "Deny"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": view_blocks,
    }


@dataclass(frozen=True)
class DenySubmission:
    approval_id: str
    user_id: str
    channel_id: str | None
    reason: str  # "" when none was given

    @property
    def click(self) -> Click:
        """The submission as the Deny click it confirms."""
        return Click(
            approval_id=self.approval_id,
            action="deny",
            user_id=self.user_id,
            channel_id=self.channel_id,
        )


def parse_deny_submission(body: dict[str, Any], presets: tuple[str, ...]) -> DenySubmission:
    """The Deny modal's submission; raises ValueError saying what is wrong."""
    user = body.get("user")
    view = body.get("view")
    if (
        not isinstance(user, dict)
        or not isinstance(user.get("id"), str)
        or not isinstance(view, dict)
    ):
        raise ValueError("no user or view in the payload")
    try:
        meta = json.loads(view.get("private_metadata") or "")
    except json.JSONDecodeError:
        raise ValueError("the modal does not carry an approval id") from None
    approval_id = meta.get("approval_id") if isinstance(meta, dict) else None
    if not isinstance(approval_id, str) or not models.APPROVAL_ID.fullmatch(approval_id):
        raise ValueError("the modal does not carry an approval id")
    channel = meta.get("channel")
    values = (view.get("state") or {}).get("values") or {}
    typed = ((values.get(REASON_BLOCK) or {}).get(REASON_INPUT) or {}).get("value") or ""
    chosen = ((values.get(PRESET_BLOCK) or {}).get(PRESET_INPUT) or {}).get("selected_option") or {}
    index = chosen.get("value") if isinstance(chosen, dict) else None
    preset = (
        presets[int(index)]
        if isinstance(index, str) and index.isdigit() and int(index) < len(presets)
        else ""
    )
    typed = typed.strip() if isinstance(typed, str) else ""
    reason = f"{preset}: {typed}" if preset and typed else preset or typed
    return DenySubmission(
        approval_id=approval_id,
        user_id=user["id"],
        channel_id=channel if isinstance(channel, str) else None,
        reason=reason[:2000],
    )


# --- the queue: App Home and /approvals ---------------------------------------------------


def _queue_item(approval: models.Approval, links: Mapping[str, str]) -> list[dict[str, Any]]:
    """One request the viewer may decide: the card's own summary and arguments blocks, and the
    decision buttons only when both are shown whole; else a link to the card."""
    key = approval.approval_id
    needs = _needs(approval) + (
        f" ({len(approval.decided_by)} so far)" if approval.required.approvals > 1 else ""
    )
    head = _fill(
        messages.QUEUE_ITEM,
        markup={"needs": escape(needs)},
        tool=approval.tool.name,
        agent=approval.agent,
        requester=approval.requester.name or approval.requester.email or "someone",
    )
    out = [_section(head, f"head_{key}")]
    summary, summary_whole = _summary_block(approval, f"summary_{key}")
    if summary is not None:
        out.append(summary)
    arguments, arguments_whole = _arguments_block(approval, f"arguments_{key}")
    out.append(arguments)
    if summary_whole and arguments_whole:
        out.append(_decision(approval, f"queue_{key}"))
        return out
    link = _card_link(approval, links)
    note = messages.QUEUE_CUT.format(link=link) if link is not None else messages.QUEUE_NO_CARD
    out.append(_context(note, f"cut_{key}"))
    return out


def _requested_list(requested: Sequence[models.Approval], limit: int) -> str:
    """One line per request the viewer made, as many as fit one section."""
    lines: list[str] = []
    used = 0
    for approval in requested[:limit]:
        line = messages.REQUESTED_ITEM.format(
            tool=_value(approval.tool.name, 100),
            approval_id=approval.approval_id,
            status=approval.status.value,
        )
        if used + _slack_len(line) + 1 > SECTION_LIMIT:
            break
        lines.append(line)
        used += _slack_len(line) + 1
    return "\n".join(lines) or messages.HOME_NONE_REQUESTED


def queue_blocks(
    decidable: Sequence[models.Approval],
    requested: Sequence[models.Approval],
    *,
    limit: int,
    links: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """What the viewer may decide (at most ``limit`` items; the rest are counted) and what
    they requested (with status). ``links``: card permalinks by approval id, fetched by the
    edge for the items that do not fit (see :func:`fits`)."""
    out: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": messages.HOME_DECIDE}}
    ]
    for approval in decidable[:limit]:
        out.extend(_queue_item(approval, links or {}))
    if not decidable:
        out.append(_section(messages.HOME_NOTHING))
    if len(decidable) > limit:
        out.append(_context(messages.QUEUE_MORE.format(count=len(decidable) - limit)))
    out.append({"type": "header", "text": {"type": "plain_text", "text": messages.HOME_REQUESTED}})
    out.append(_section(_requested_list(requested, limit)))
    return out


def home_view(
    decidable: Sequence[models.Approval],
    requested: Sequence[models.Approval],
    links: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The App Home tab (100 blocks at most)."""
    return {
        "type": "home",
        "blocks": queue_blocks(decidable, requested, limit=HOME_ITEMS, links=links),
    }


def queue_message(
    decidable: Sequence[models.Approval],
    requested: Sequence[models.Approval],
    links: Mapping[str, str] | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """The ``/approvals`` answer: fallback text and blocks (a message: 50 blocks at most)."""
    return messages.HOME_DECIDE, queue_blocks(
        decidable, requested, limit=MESSAGE_ITEMS, links=links
    )
