"""Block Kit rendering and click parsing: pure functions, tested snapshot-style.

Everything an agent sends (tool name, arguments, summary, names) is untrusted. It is escaped for
mrkdwn (``&``, ``<``, ``>``) so it can never become ``<!channel>``, a mention or a disguised link;
arguments go in a code block whose fence the content cannot close; long text is cut within
Slack's limits with a visible marker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from approvals import models
from bot import messages

__all__ = [
    "APPROVE",
    "DENY",
    "DENY_VIEW",
    "Click",
    "DenySubmission",
    "card",
    "deny_modal",
    "escape",
    "home_view",
    "parse_click",
    "parse_deny_submission",
    "queue_blocks",
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
ZWSP = "\u200b"

_ESCAPES = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        # bidirectional overrides and isolates could make "evil.com" read as "moc.live":
        # shown as visible code points instead
        **{chr(c): f"[U+{c:04X}]" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))},
    }
)


def escape(text: str) -> str:
    """Escape the characters Slack's mrkdwn gives meaning to, and neutralise bidi controls."""
    return text.translate(_ESCAPES)


def _slack_len(text: str) -> int:
    # Slack counts UTF-16 code units; counting them keeps emoji-heavy text within the limit.
    return len(text.encode("utf-16-le")) // 2


def _inert_code(text: str) -> str:
    """Escaped text that cannot close a ``` fence: a zero-width space splits backtick runs."""
    return escape(text).replace("`", "`" + ZWSP)


def truncate_escaped(text: str, budget: int, *, code: bool = False) -> tuple[str, int]:
    """``text`` escaped (for a code block if ``code``) and cut to ``budget`` Slack characters,
    with how many characters of ``text`` it shows (fewer than ``len(text)`` means cut).

    Cuts between source characters, so an entity like ``&amp;`` is never split.
    """
    render = _inert_code if code else escape
    whole = render(text)
    if _slack_len(whole) <= budget:
        return whole, len(text)
    out, used = [], 0
    for ch in text:
        piece = render(ch)
        size = _slack_len(piece)
        if used + size > budget:
            break
        out.append(piece)
        used += size
    return "".join(out), len(out)


def _marker(shown: int, text: str, sha: str) -> str:
    return messages.TRUNCATED.format(shown=shown, total=len(text), sha=sha[:12])


def _arguments_block(approval: models.Approval) -> dict[str, Any]:
    raw = json.dumps(approval.tool.arguments, indent=2, ensure_ascii=False, sort_keys=True)
    head, fence = "*Arguments*\n```\n", "\n```"
    marker = _marker(0, raw, approval.arguments_sha256)
    # 12 spare characters: room for the digits of "shown" in the final marker
    budget = SECTION_LIMIT - _slack_len(head) - 2 * _slack_len(fence) - _slack_len(marker) - 12
    body, shown = truncate_escaped(raw, budget, code=True)
    text = head + body + fence
    if shown < len(raw):
        text += "\n" + escape(_marker(shown, raw, approval.arguments_sha256))
    return {"type": "section", "block_id": "arguments", "text": {"type": "mrkdwn", "text": text}}


def _plain(text: str, limit: int) -> str:
    """plain_text is never parsed for mentions, but has its own limits (UTF-16 units)."""
    if _slack_len(text) <= limit:
        return text
    out, used = [], 0
    for ch in text:
        size = _slack_len(ch)
        if used + size > limit - 1:
            break
        out.append(ch)
        used += size
    return "".join(out) + "…"


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


def _field(label: str, value: str) -> dict[str, str]:
    """A labelled field of untrusted plain text, escaped and cut to the field limit."""
    text, _ = truncate_escaped(value, FIELD_LIMIT - len(label) - 4)
    return {"type": "mrkdwn", "text": f"*{label}*\n{text}"}


def _outcome(approval: models.Approval) -> str:
    who = ", ".join(f"<@{d.slack_user_id}>" for d in approval.decided_by) or "the agent"
    at = _date(approval.decided_at) if approval.decided_at else "?"
    return messages.OUTCOME_LINE[approval.status].format(who=who, at=at)


def card(approval: models.Approval) -> tuple[str, list[dict[str, Any]]]:
    """The fallback text and blocks of an approval's card, for its current status."""
    tool = approval.tool.name
    header = messages.HEADER[approval.status].format(tool=tool)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _plain(header, HEADER_LIMIT)}}
    ]
    if approval.summary:
        marker = _marker(len(approval.summary), approval.summary, approval.arguments_sha256)
        budget = SECTION_LIMIT - _slack_len(marker) - 12
        summary, shown = truncate_escaped(approval.summary, budget)
        if shown < len(approval.summary):
            summary += "\n" + escape(_marker(shown, approval.summary, approval.arguments_sha256))
        blocks.append(
            {
                "type": "section",
                "block_id": "summary",
                "text": {"type": "mrkdwn", "text": summary},
            }
        )
    required = approval.required
    needs = (
        "role "
        + " or ".join(required.roles)
        + (f", {required.approvals} approvals" if required.approvals > 1 else "")
    )
    blocks.append(
        {
            "type": "section",
            "block_id": "facts",
            "fields": [
                _field("Requester", _requester(approval.requester)),
                _field("Agent", approval.agent),
                _field("Session", approval.session_id),
                _field("Needs", needs),
                {"type": "mrkdwn", "text": "*Expires*\n" + _date(approval.expires_at)},
                _field("Tool", f"{tool} (call {approval.tool.call_id})"),
            ],
        }
    )
    if approval.context.get("lead_facing") is True:
        text = messages.LEAD_FACING.format(  # escaped once, as a whole, below
            channel=approval.context.get("channel", "?"),
            lead=approval.context.get("lead_id", "?"),
            why=approval.context.get("why", ""),
            rule=approval.rule,
        )
        blocks.append(
            {
                "type": "section",
                "block_id": "lead_facing",
                "text": {"type": "mrkdwn", "text": truncate_escaped(text, SECTION_LIMIT)[0]},
            }
        )
    if approval.why and approval.context.get("lead_facing") is not True:
        why = messages.WHY.format(rule=approval.rule, because=f": {approval.why}")
        blocks.append(
            {
                "type": "context",
                "block_id": "why",
                "elements": [{"type": "mrkdwn", "text": truncate_escaped(why, SECTION_LIMIT)[0]}],
            }
        )
    blocks.append(_arguments_block(approval))
    context = (
        f"{approval.approval_id} · arguments sha256 {approval.arguments_sha256[:12]} · "
        f"{approval.rule} · policy {approval.policy_version}"
    )
    blocks.append(
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": truncate_escaped(context, SECTION_LIMIT)[0]}],
        }
    )
    if approval.status is models.Status.PENDING and approval.escalated_at is not None:
        escalated = messages.ESCALATED.format(at=_date(approval.escalated_at))
        blocks.append(
            {
                "type": "context",
                "block_id": "escalated",
                "elements": [{"type": "mrkdwn", "text": escalated}],
            }
        )
    if approval.status is models.Status.PENDING and approval.decided_by:
        progress = messages.PROGRESS.format(
            count=len(approval.decided_by),
            needed=approval.required.approvals,
            who=", ".join(f"<@{d.slack_user_id}>" for d in approval.decided_by),
        )
        blocks.append(
            {
                "type": "section",
                "block_id": "progress",
                "text": {"type": "mrkdwn", "text": progress},
            }
        )
    if approval.status is models.Status.PENDING:
        blocks.append(
            {
                "type": "actions",
                "block_id": "countersign_decision",
                "elements": [
                    _button("Approve", APPROVE, approval.approval_id, "primary"),
                    _button("Deny", DENY, approval.approval_id, "danger"),
                ],
            }
        )
    else:
        blocks.append(
            {
                "type": "section",
                "block_id": "outcome",
                "text": {"type": "mrkdwn", "text": _outcome(approval)},
            }
        )
    if approval.delivery.status == "dead_letter":
        warning = messages.DEAD_LETTER.format(
            attempts=approval.delivery.attempts,
            error=truncate_escaped(approval.delivery.last_error or "unknown", 500)[0],
            approval_id=approval.approval_id,
        )
        blocks.append(
            {
                "type": "section",
                "block_id": "dead_letter",
                "text": {"type": "mrkdwn", "text": warning},
            }
        )
    fallback = messages.CARD_FALLBACK.format(
        tool=tool, requester=approval.requester.name or "someone", agent=approval.agent
    )
    text = header if approval.settled else fallback
    return truncate_escaped(text, SECTION_LIMIT)[0], blocks


def _button(label: str, action_id: str, value: str, style: str) -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": label},
        "style": style,
        "value": value,  # the approval id only: everything else is looked up server-side
    }


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


def deny_modal(
    approval: models.Approval, channel_id: str | None, presets: tuple[str, ...]
) -> dict[str, Any]:
    """The Deny modal. ``private_metadata`` carries the approval id (and where to answer)."""
    # untrusted names formatted raw, then escaped once, as a whole, by truncate_escaped
    intro = messages.DENY_INTRO.format(
        tool=approval.tool.name, call_id=approval.tool.call_id, agent=approval.agent
    )
    view_blocks: list[dict[str, Any]] = [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": truncate_escaped(intro, SECTION_LIMIT)[0]},
        }
    ]
    if presets:
        view_blocks.append(
            {
                "type": "input",
                "block_id": PRESET_BLOCK,
                "optional": True,
                "label": {"type": "plain_text", "text": messages.PRESET_LABEL},
                "element": {
                    "type": "static_select",
                    "action_id": PRESET_INPUT,
                    "options": [
                        {"text": {"type": "plain_text", "text": _plain(p, 75)}, "value": str(i)}
                        for i, p in enumerate(presets[:100])
                    ],
                },
            }
        )
    view_blocks.append(
        {
            "type": "input",
            "block_id": REASON_BLOCK,
            # a required reason is enforced on submission, so a preset alone can satisfy it
            "optional": True,
            "label": {"type": "plain_text", "text": messages.REASON_LABEL},
            "element": {
                "type": "plain_text_input",
                "action_id": REASON_INPUT,
                "multiline": True,
                "max_length": 2000,
            },
        }
    )
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


def _queue_item(approval: models.Approval) -> list[dict[str, Any]]:
    needs = f"role {approval.required.role}" + (
        f", {len(approval.decided_by)} of {approval.required.approvals}"
        if approval.required.approvals > 1
        else ""
    )
    text = messages.QUEUE_ITEM.format(
        tool=approval.tool.name,
        agent=approval.agent,
        requester=approval.requester.name or approval.requester.email or "someone",
        needs=needs,
    )
    args, _ = truncate_escaped(
        json.dumps(approval.tool.arguments, ensure_ascii=False), 300, code=True
    )
    return [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": truncate_escaped(text, 1000)[0] + f"\n`{args}`"},
        },
        {
            "type": "actions",
            "block_id": f"queue_{approval.approval_id}",
            "elements": [
                _button("Approve", APPROVE, approval.approval_id, "primary"),
                _button("Deny", DENY, approval.approval_id, "danger"),
            ],
        },
    ]


def queue_blocks(
    decidable: list[models.Approval], requested: list[models.Approval], *, limit: int
) -> list[dict[str, Any]]:
    """The pending queue (with working buttons) and the viewer's own requests (with status)."""
    out: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": messages.HOME_DECIDE}}
    ]
    for approval in decidable[:limit]:
        out.extend(_queue_item(approval))
    if not decidable:
        out.append({"type": "section", "text": {"type": "mrkdwn", "text": messages.HOME_NOTHING}})
    out.append({"type": "header", "text": {"type": "plain_text", "text": messages.HOME_REQUESTED}})
    lines = [
        messages.REQUESTED_ITEM.format(
            tool=escape(a.tool.name), approval_id=a.approval_id, status=a.status.value
        )
        for a in requested[:limit]
    ]
    text = "\n".join(lines) or messages.HOME_NONE_REQUESTED
    out.append({"type": "section", "text": {"type": "mrkdwn", "text": text[:SECTION_LIMIT]}})
    return out


def home_view(decidable: list[models.Approval], requested: list[models.Approval]) -> dict[str, Any]:
    # App Home allows 100 blocks: 20 items of two blocks each, the headers and the requests
    return {"type": "home", "blocks": queue_blocks(decidable, requested, limit=20)}
