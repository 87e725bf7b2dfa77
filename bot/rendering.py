"""Block Kit rendering: the card, its thread and on-call posts, ephemeral answers, the Deny
modal and the queue (App Home and ``/approvals``). Pure functions, tested snapshot-style.

Every untrusted value goes through :mod:`bot.untrusted_text` (escaped, cut with a visible
marker); our own sentences come from :mod:`bot.messages`. Arguments are shown as JSON in a code
block, where formatting is off; hidden characters there become JSON ``\\u`` escapes, so the
block is still exactly the arguments. Every mrkdwn text object is ``verbatim`` (no automatic
linking of bare URLs, ``#channel`` or ``@here``). The ids the buttons and the modal carry, and
the parsing of what Slack sends back, are :mod:`bot.interactions`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, assert_never

from approvals import edits, frameworks, models, policy, service
from approvals.policy import schema
from bot import grant_views, interactions, messages
from bot.block_kit import Block, modal
from bot.block_kit import button as _button
from bot.block_kit import context as _context
from bot.block_kit import date as _date
from bot.block_kit import mention as _mention
from bot.block_kit import mrkdwn as _mrkdwn
from bot.block_kit import optional_input as _optional_input
from bot.block_kit import section as _section
from bot.untrusted_text import (
    escape,
    fill,
    hidden_as_json_escapes,
    plain,
    slack_len,
    truncate_escaped,
    value,
)

__all__ = [
    "CARD_TEXT_LIMIT",
    "HOME_ITEMS",
    "MESSAGE_ITEMS",
    "OUTCOME_DETAIL_SHOWN",
    "card",
    "click_answer",
    "click_problem",
    "deny_modal",
    "edit_answer",
    "edit_errors",
    "edit_modal",
    "escalation",
    "fits",
    "home_view",
    "queue_blocks",
    "queue_message",
    "reminder",
]

SECTION_LIMIT = 3000  # characters in a section's text
FIELD_LIMIT = 2000
# All the text of one card's blocks. Slack has answered msg_blocks_too_long near 12,000
# characters in all, below its per-block limits; the summary and the arguments (the only long
# parts) share what the other blocks leave, cut with their markers.
CARD_TEXT_LIMIT = 9500
FACT_LIMIT = 500  # one untrusted fact (names, session, tool and call id) on the card
PROVENANCE_LIMIT = 500
HEADER_LIMIT = 150
# queue items per surface: up to four blocks each, within 100 blocks (App Home) or 50 (message)
HOME_ITEMS = 20
HOME_BLOCKS = 100  # Slack's limit for a home tab
MESSAGE_ITEMS = 10


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
    return hidden_as_json_escapes(raw)


def _arguments_block(
    approval: models.Approval, block_id: str, limit: int = SECTION_LIMIT
) -> tuple[dict[str, Any], bool]:
    """The arguments in a code block within ``limit`` characters, and whether they are shown
    whole."""
    raw = _arguments_json(approval.run_arguments)  # what will run: an edit's, if any
    head = "*Arguments (as edited)*\n```\n" if approval.edit else "*Arguments*\n```\n"
    fence = "\n```"
    marker = _marker(0, raw, approval.run_sha256)
    # 12 spare characters: room for the digits of "shown" in the final marker
    budget = limit - slack_len(head) - 2 * slack_len(fence) - slack_len(marker) - 12
    body, shown = truncate_escaped(raw, max(budget, 0), code=True)
    text = head + body + fence
    whole = shown == len(raw)
    if not whole:
        text += "\n" + escape(_marker(shown, raw, approval.run_sha256))
    return _section(text, block_id), whole


def _summary_block(
    approval: models.Approval, block_id: str, limit: int = SECTION_LIMIT
) -> tuple[dict[str, Any] | None, bool]:
    """The summary within ``limit`` characters (None if there is none), and whether it is
    shown whole."""
    if not approval.summary:
        return None, True
    summary = approval.summary
    marker = _marker(len(summary), summary, approval.arguments_sha256)
    text, shown = truncate_escaped(summary, max(limit - slack_len(marker) - 12, 0))
    whole = shown == len(summary)
    if not whole:
        text += "\n" + escape(_marker(shown, summary, approval.arguments_sha256))
    return _section(text, block_id), whole


def fits(approval: models.Approval) -> bool:
    """Whether a queue item shows the arguments and the summary whole (each within a section's
    limit): only then may the App Home or ``/approvals`` offer decision buttons beside them."""
    return _arguments_block(approval, "a")[1] and _summary_block(approval, "s")[1]


def _requester(r: models.Requester) -> str:
    """Plain text (escaped by the field): agents' ids are shown, never turned into mentions."""
    parts = [r.name] if r.name else []
    if r.slack_user_id:
        parts.append(f"(Slack {r.slack_user_id})")
    if r.email:
        parts.append(r.email)
    return " ".join(parts)


def _field(label: str, text: str) -> dict[str, Any]:
    """A labelled field of untrusted plain text, escaped and cut with "…" to :data:`FACT_LIMIT`
    (within the field limit, and within the card's total)."""
    return _mrkdwn(f"*{label}*\n{value(text, min(FACT_LIMIT, FIELD_LIMIT - len(label) - 4))}")


def _needs(approval: models.Approval) -> str:
    required = approval.required
    return (
        "role "
        + " or ".join(required.roles)
        + (f", {required.approvals} approvals" if required.approvals > 1 else "")
    )


def _who(decider: models.Decider) -> str:
    """A decider's mention, and how their decision was verified where more than a click."""
    mention = _mention(decider.slack_user_id)
    return mention + messages.VERIFIED_WITH_PASSKEY if decider.passkey is not None else mention


def _outcome(approval: models.Approval) -> str:
    who = ", ".join(_who(d) for d in approval.decided_by) or "the agent"
    at = _date(approval.decided_at) if approval.decided_at else "?"
    if approval.status is models.Status.APPROVED and approval.edit is not None:
        return messages.APPROVED_WITH_EDITS.format(who=who, at=at)
    return messages.OUTCOME_LINE[approval.status].format(who=who, at=at)


EDIT_VALUE_SHOWN = 200  # characters of one value, before and after, in the card's list of changes
EDIT_LIST_LIMIT = 2000  # characters of that list; the rest is counted


def _edit_blocks(approval: models.Approval) -> list[Block]:
    """Who edited the call, when, their note, and each change (old → new): every value is
    untrusted (the agent's before, the reviewer's after), escaped and cut."""
    edit = approval.edit
    if edit is None:
        return []
    note = fill(messages.EDITED_NOTE, note=edit.note) if edit.note else ""
    lines = [
        messages.EDITED.format(who=_mention(edit.by.slack_user_id), at=_date(edit.at), note=note)
    ]
    used = slack_len(lines[0])
    changes = edits.changes(approval.tool.arguments, edit.patch)
    for i, change in enumerate(changes):
        old = "(absent)" if change.absent else _json_value(change.before)
        line = (
            f"• `{value(change.path, EDIT_VALUE_SHOWN)}`: {value(old, EDIT_VALUE_SHOWN)} → "
            f"{value(_json_value(change.after), EDIT_VALUE_SHOWN)}"
        )
        if used + slack_len(line) > EDIT_LIST_LIMIT:
            lines.append(f"… and {len(changes) - i} more changes (see the arguments)")
            break
        lines.append(line)
        used += slack_len(line) + 1
    if approval.status is models.Status.PENDING and approval.decided_by:
        lines.append(messages.EDITED_PENDING)
    return [_section("\n".join(lines), "edit")]


def _json_value(item: object) -> str:
    """One JSON value on one line, hidden characters as escapes (as the arguments block)."""
    return hidden_as_json_escapes(json.dumps(item, ensure_ascii=False))


def _lead_banner(approval: models.Approval) -> dict[str, Any]:
    """Only for a guard's escalation (``approval.lead_facing``): an agent's ``context`` can
    fill in the details shown, never make a plain approval look like one."""
    context = approval.context
    text = fill(
        messages.LEAD_FACING,
        channel=context.get("channel", "?"),
        lead=context.get("lead_id", "?"),
        why=context.get("why", ""),
        rule=approval.rule,
    )
    return _section(text, "lead_facing")


def _header(approval: models.Approval) -> Block:
    header = messages.HEADER[approval.status].format(tool=approval.tool.name)
    return {"type": "header", "text": {"type": "plain_text", "text": plain(header, HEADER_LIMIT)}}


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
        why = fill(messages.WHY, rule=approval.rule, because=f": {approval.why}")
        return [_context(why, "why")]
    return []


def _schema_note(approval: models.Approval) -> list[Block]:
    if not approval.argument_schemas:
        return []
    globs = ", ".join(approval.argument_schemas)
    return [_context(fill(messages.SCHEMA_CHECKED, globs=globs), "schema")]


def _provenance(approval: models.Approval) -> Block:
    """The ids a reviewer can quote: approval, arguments hash, rule and policy version."""
    context = (
        f"{approval.approval_id} · arguments sha256 {approval.run_sha256[:12]} · "
        f"{approval.rule} · policy {approval.policy_version}"
    )
    return _context(value(context, PROVENANCE_LIMIT))


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
            who=", ".join(_who(d) for d in approval.decided_by),
        )
        out.append(_section(progress, "progress"))
    out.append(_decision(approval, interactions.DECISION_BLOCK))
    return out


def _state_blocks(
    approval: models.Approval, now: datetime | None, called_again: models.Approval | None
) -> list[Block]:
    if approval.status is models.Status.PENDING:
        return _pending_blocks(approval)
    outcome = _section(_outcome(approval), "outcome")
    if called_again is None:
        return [outcome, *_execution_blocks(approval, now)]
    # the edit runs as the call again (docs/edits.md): its single run is this card's to show
    at = called_again.decided_at or called_again.created_at
    again = called_again.approval_id
    text = fill(messages.CALLED_AGAIN, markup={"at": _date(at)}, approval_id=again)
    return [outcome, _context(text, "called_again"), *_execution_blocks(called_again, now)]


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
        if not frameworks.reports_outcomes(approval.framework):
            template = messages.CLAIMED_NO_REPORT  # none can come: no warning that none did
        else:
            template = messages.OUTCOME_OVERDUE if overdue else messages.CLAIMED
        text = fill(template, markup={"at": _date(execution.claimed_at)}, agent=approval.agent)
        return [_context(text, "execution")]
    detail = ""
    if outcome.detail.strip():
        # one line: an agent's text never starts a line of its own that reads like ours
        detail = " — " + value(" ".join(outcome.detail.split()), OUTCOME_DETAIL_SHOWN)
    text = fill(
        messages.RAN[outcome.status],
        markup={"at": _date(outcome.reported_at), "detail": detail},
        agent=approval.agent,
    )
    return [_section(text, "execution")]


def _dead_letter_warning(approval: models.Approval, block_id: str = "dead_letter") -> list[Block]:
    """The agent was never told: shown until someone redrives the callback."""
    if approval.delivery.status != "dead_letter":
        return []
    warning = fill(
        messages.DEAD_LETTER,
        markup={"approval_id": approval.approval_id},
        attempts=approval.delivery.attempts,
        error=approval.delivery.last_error or "unknown",
    )
    return [_section(warning, block_id)]


def _card_text(approval: models.Approval) -> str:
    """The message's fallback text (notifications, screen readers)."""
    if approval.settled:
        return fill(messages.HEADER[approval.status], tool=approval.tool.name)
    return fill(
        messages.CARD_FALLBACK,
        tool=approval.tool.name,
        requester=approval.requester.name or "someone",
        agent=approval.agent,
    )


def card(
    approval: models.Approval,
    now: datetime | None = None,
    called_again: models.Approval | None = None,
    made: Sequence[models.Grant] = (),
) -> tuple[str, list[Block]]:
    """The fallback text and blocks of an approval's card, for its current status (and, with
    ``now``, the deadlines of its single run that have passed). ``called_again``: the approval
    of the call again that runs its edit (``approval.called_again_as``), whose run it shows;
    ``made``: the standing grant its approval made (docs/grants.md), shown with its uses."""
    facts = [_facts(approval), *_why_blocks(approval)]
    rest = [
        *_edit_blocks(approval),
        *_schema_note(approval),
        _provenance(approval),
        *_state_blocks(approval, now, called_again),
        *grant_views.grant_blocks(made, now or approval.created_at),
        *_dead_letter_warning(approval),
        # the call again's callback is this card's to warn of too: it has no card of its own
        *(_dead_letter_warning(called_again, "dead_letter_again") if called_again else []),
    ]
    header = _header(approval)
    # the summary and the arguments share what the other blocks leave (each of those is
    # bounded): the summary at least half of it, more if the arguments need less
    spare = CARD_TEXT_LIMIT - _text_len([header, *facts, *rest])
    arguments, _ = _arguments_block(approval, "arguments", min(SECTION_LIMIT, spare))
    needed = _text_len([arguments])
    summary, _ = _summary_block(
        approval, "summary", min(SECTION_LIMIT, max(spare // 2, spare - needed))
    )
    spare -= _text_len([summary] if summary is not None else [])
    if needed > spare:
        arguments, _ = _arguments_block(approval, "arguments", spare)
    card_blocks = [header, *([summary] if summary is not None else []), *facts, arguments, *rest]
    return _card_text(approval), card_blocks


def _text_len(blocks: Sequence[Any]) -> int:
    """The characters of every text in ``blocks`` (nested objects included), as Slack counts."""
    total = 0
    pending = list(blocks)  # a stack, not recursion: every card counts its blocks thrice
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            for key, inner in item.items():
                if key == "text" and isinstance(inner, str):
                    total += slack_len(inner)
                elif isinstance(inner, (dict, list)):
                    pending.append(inner)
        elif isinstance(item, list):
            pending.extend(item)
    return total


def _decision(approval: models.Approval, block_id: str) -> dict[str, Any]:
    """The decision buttons; their block's id names the arguments' version shown beside them,
    so an approval counts only for what its clicker saw. Edit & approve when the rule lets
    reviewers change something this call holds."""
    buttons = [
        _button("Approve", interactions.APPROVE, approval.approval_id, "primary"),
        _button("Deny", interactions.DENY, approval.approval_id, "danger"),
    ]
    if _edit_fields(approval):
        buttons.insert(1, _button(messages.EDIT_BUTTON, interactions.EDIT, approval.approval_id))
    if grant_views.grantable(approval):
        grant = _button(messages.GRANT_BUTTON, interactions.GRANT, approval.approval_id)
        buttons.insert(1, grant)
    return {
        "type": "actions",
        "block_id": interactions.decision_block_id(block_id, approval.run_sha256),
        "elements": buttons,
    }


# --- the card's thread and on-call ---------------------------------------------------------


def _who_can_decide(approval: models.Approval, roles: Sequence[policy.Role]) -> str:
    """Everyone who could decide: the roles' user groups, else their listed users (ids the
    policy validated), else the role names."""
    groups = [f"<!subteam^{g}>" for role in roles for g in role.usergroups]
    users = [f"<@{u}>" for role in roles for u in role.users]
    return " ".join(groups or users) or "role " + value(" or ".join(approval.required.roles))


def reminder(approval: models.Approval, roles: Sequence[policy.Role]) -> str:
    """The reminder posted in the card's thread; ``roles``: the policy's required roles."""
    return fill(
        messages.REMINDER, markup={"who": _who_can_decide(approval, roles)}, tool=approval.tool.name
    )


def escalation(approval: models.Approval, oncall: policy.OnCall, permalink: str | None) -> str:
    """The post to the on-call channel: it links the card, which stays the one place to
    decide; without a usable permalink, Slack's redirect to the card's channel."""
    link = _card_link(approval, {approval.approval_id: permalink} if permalink else {})
    where = messages.ESCALATION_LINK.format(link=link) if link is not None else messages.NO_CARD_YET
    return fill(
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


def policy_approved(approval: models.Approval) -> str:
    """The one line in a rule's log channel for a call the policy approved by itself."""
    return fill(
        messages.POLICY_APPROVED,
        tool=approval.tool.name,
        agent=approval.agent,
        rule=approval.decided_by_policy or approval.rule,
        version=approval.policy_version,
        approval_id=approval.approval_id,
        sha=approval.arguments_sha256,
    )


# --- ephemeral answers --------------------------------------------------------------------


def click_answer(result: service.ClickResult, public_url: str | None = None) -> str | None:
    """The ephemeral text for the clicker, if any (a settled click shows on the card itself);
    ``public_url``: where step-up's confirmation links point."""
    match result:
        case service.PasskeyAsked(link=link):
            if public_url is None:
                return messages.PASSKEY_UNAVAILABLE
            return fill(messages.PASSKEY_ASKED, {"url": f"{public_url}/step-up/{link.token}"})
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
            return fill(
                messages.REFUSED, reason=verdict.reason, role=" or ".join(approval.required.roles)
            )
        case service.Stale(approval=approval):
            by = ", ".join(_mention(d.slack_user_id) for d in approval.decided_by)
            return messages.ALREADY.format(
                status=approval.status.value, by=f" by {by}" if by else ""
            )
        case service.Expired():
            return messages.EXPIRED_CLICK
        case service.Outdated():
            return messages.OUTDATED
        case _:
            assert_never(result)


def edit_answer(result: service.EditResult, public_url: str | None = None) -> str | None:
    """The ephemeral text for an editor once their edit was acted on, if any."""
    match result:
        case service.EditRefused(problems=problems):
            shown = "; ".join(f"{p.path}: {p.message}" if p.path else p.message for p in problems)
            return fill(messages.EDIT_FAILED_AFTER, problems=shown)
        case _:
            return click_answer(result, public_url)


def click_problem(problem: str) -> str:
    """The answer to a click Countersign could not use."""
    return fill(messages.MALFORMED_CLICK, problem=problem)


# --- clicks and the Deny modal ------------------------------------------------------------


def _preset_input(presets: tuple[str, ...]) -> Block:
    """A menu of the policy's preset reasons; the option's value is its index."""
    options = [
        {"text": {"type": "plain_text", "text": plain(p, 75)}, "value": str(i)}
        for i, p in enumerate(presets[: schema.MAX_DENY_REASONS])
    ]
    element = {"type": "static_select", "action_id": interactions.PRESET_INPUT, "options": options}
    return _optional_input(interactions.PRESET_BLOCK, messages.PRESET_LABEL, element)


def _reason_input() -> Block:
    # optional even where the rule requires a reason: that is checked on submission, so that a
    # preset alone can satisfy it
    element = {
        "type": "plain_text_input",
        "action_id": interactions.REASON_INPUT,
        "multiline": True,
        "max_length": 2000,
    }
    return _optional_input(interactions.REASON_BLOCK, messages.REASON_LABEL, element)


def deny_modal(
    approval: models.Approval, channel_id: str | None, presets: tuple[str, ...]
) -> dict[str, Any]:
    """The Deny modal. ``private_metadata`` carries the approval id (and where to answer)."""
    intro = fill(
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
    metadata = {"approval_id": approval.approval_id, "channel": channel_id}
    return modal(interactions.DENY_VIEW, metadata, messages.DENY_TITLE, "Deny", view_blocks)


# --- the edit form ------------------------------------------------------------------------

EDIT_FIELDS_MAX = 90  # input blocks of the form (a modal holds 100 blocks)
EDIT_TEXT_MAX = 3000  # a text input holds no more (longer strings are not offered)
EDIT_MULTILINE_FROM = 80  # characters: a longer string (or one with a newline) gets a text area


def _edit_fields(approval: models.Approval) -> list[edits.Field]:
    """The fields the form offers: each editable field a form input can hold."""
    fields = edits.editable_fields(approval.run_arguments, approval.editable)
    return [f for f in fields if not _too_long(f)][:EDIT_FIELDS_MAX]


def _too_long(field: edits.Field) -> bool:
    return isinstance(field.value, str) and len(field.value) > EDIT_TEXT_MAX


def _field_input(field: edits.Field) -> Block:
    """One field's input, typed by its value: a number input, a text input (a text area for
    long or multi-line text), or a yes/no menu; pre-filled with the current value."""
    element: dict[str, Any]
    if field.kind == "number":
        element = {
            "type": "number_input",
            "is_decimal_allowed": True,
            "initial_value": _json_value(field.value),
        }
    elif field.kind == "boolean":
        options = [
            {"text": {"type": "plain_text", "text": label}, "value": label}
            for label in ("true", "false")
        ]
        element = {
            "type": "static_select",
            "options": options,
            "initial_option": options[0] if field.value is True else options[1],
        }
    else:
        text = str(field.value)
        element = {
            "type": "plain_text_input",
            "initial_value": text,
            "multiline": len(text) > EDIT_MULTILINE_FROM or "\n" in text,
            "max_length": EDIT_TEXT_MAX,
        }
    element["action_id"] = interactions.FIELD_INPUT
    return {
        "type": "input",
        "block_id": interactions.EDIT_FIELD + field.path,
        "label": {"type": "plain_text", "text": plain(field.path, 2000)},
        "element": element,
    }


def edit_modal(approval: models.Approval, channel_id: str | None) -> dict[str, Any]:
    """The Edit & approve form: an input per field the reviewer may change, a note, and in
    ``private_metadata`` the approval id, where to answer and the arguments' version it was
    opened on."""
    intro = fill(
        messages.EDIT_INTRO,
        tool=approval.tool.name,
        call_id=approval.tool.call_id,
        agent=approval.agent,
    )
    view_blocks = [_section(intro, "intro"), *[_field_input(f) for f in _edit_fields(approval)]]
    skipped = [
        f.path
        for f in edits.editable_fields(approval.run_arguments, approval.editable)
        if _too_long(f)
    ]
    if skipped:
        view_blocks.append(_context(fill(messages.EDIT_TOO_LONG, paths=", ".join(skipped))))
    note = {
        "type": "plain_text_input",
        "action_id": interactions.NOTE_INPUT,
        "multiline": True,
        "max_length": interactions.NOTE_LIMIT,
    }
    view_blocks.append(_optional_input(interactions.NOTE_BLOCK, messages.EDIT_NOTE_LABEL, note))
    metadata = {
        "approval_id": approval.approval_id,
        "channel": channel_id,
        "seen": approval.run_sha256,
    }
    return modal(
        interactions.EDIT_VIEW, metadata, messages.EDIT_TITLE, messages.EDIT_SUBMIT, view_blocks
    )


def edit_errors(refused: service.EditRefused) -> dict[str, str]:
    """The form's per-field errors (Slack's ``response_action: errors``), by input block: a
    problem with the edit as a whole goes on the note, the one input always there."""
    shown: dict[str, list[str]] = {}
    offered = {f.path for f in _edit_fields(refused.approval)}
    for problem in refused.problems:
        block = (
            interactions.EDIT_FIELD + problem.path
            if problem.path in offered
            else interactions.NOTE_BLOCK
        )
        text = (
            problem.message
            if problem.path in offered or problem.path is None
            else (f"{problem.path}: {problem.message}")
        )
        shown.setdefault(block, []).append(text)
    return {block: plain("; ".join(texts), 2000) for block, texts in shown.items()}


# --- the queue: App Home and /approvals ---------------------------------------------------


def _queue_item(approval: models.Approval, links: Mapping[str, str]) -> list[dict[str, Any]]:
    """One request the viewer may decide: the card's own summary and arguments blocks, and the
    decision buttons only when both are shown whole; else a link to the card."""
    key = approval.approval_id
    needs = _needs(approval) + (
        f" ({len(approval.decided_by)} so far)" if approval.required.approvals > 1 else ""
    )
    head = fill(
        messages.QUEUE_ITEM + (messages.QUEUE_EDITED if approval.edit is not None else ""),
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
            tool=value(approval.tool.name, 100),
            approval_id=approval.approval_id,
            status=approval.status.value,
        )
        if used + slack_len(line) + 1 > SECTION_LIMIT:
            break
        lines.append(line)
        used += slack_len(line) + 1
    return "\n".join(lines) or messages.HOME_NONE_REQUESTED


def queue_blocks(
    decidable: Sequence[models.Approval],
    requested: Sequence[models.Approval],
    *,
    limit: int,
    links: Mapping[str, str] | None = None,
    unjudged: int = 0,
    unjudged_more: bool = False,
) -> list[dict[str, Any]]:
    """What the viewer may decide (at most ``limit`` items; the rest are counted, and so are
    the ``unjudged`` pending requests not checked for them, "more than" that with
    ``unjudged_more``) and what they requested (with status). ``links``: card permalinks by
    approval id, fetched by the edge for the items that do not fit (see :func:`fits`)."""
    out: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": messages.HOME_DECIDE}}
    ]
    for approval in decidable[:limit]:
        out.extend(_queue_item(approval, links or {}))
    if not decidable:
        out.append(_section(messages.HOME_NOTHING))
    if len(decidable) > limit:
        out.append(_context(messages.QUEUE_MORE.format(count=len(decidable) - limit)))
    if unjudged > 0:
        said = messages.QUEUE_UNJUDGED_MORE if unjudged_more else messages.QUEUE_UNJUDGED
        out.append(_context(said.format(count=f"{unjudged:,}")))
    out.append({"type": "header", "text": {"type": "plain_text", "text": messages.HOME_REQUESTED}})
    out.append(_section(_requested_list(requested, limit)))
    return out


def home_view(
    decidable: Sequence[models.Approval],
    requested: Sequence[models.Approval],
    links: Mapping[str, str] | None = None,
    *,
    unjudged: int = 0,
    unjudged_more: bool = False,
    revocable: Sequence[models.Grant] = (),
    now: datetime | None = None,
) -> dict[str, Any]:
    """The App Home tab (100 blocks at most): the queue, then the live standing grants the
    viewer may revoke, as many as the room left holds."""
    home = queue_blocks(
        decidable,
        requested,
        limit=HOME_ITEMS,
        links=links,
        unjudged=unjudged,
        unjudged_more=unjudged_more,
    )
    room = (HOME_BLOCKS - len(home) - 2) // 2
    if room > 0 and now is not None:
        home += grant_views.home_grant_blocks(revocable, now, room)
    return {"type": "home", "blocks": home}


def queue_message(
    decidable: Sequence[models.Approval],
    requested: Sequence[models.Approval],
    links: Mapping[str, str] | None = None,
    *,
    unjudged: int = 0,
    unjudged_more: bool = False,
) -> tuple[str, list[dict[str, Any]]]:
    """The ``/approvals`` answer: fallback text and blocks (a message: 50 blocks at most)."""
    return messages.HOME_DECIDE, queue_blocks(
        decidable,
        requested,
        limit=MESSAGE_ITEMS,
        links=links,
        unjudged=unjudged,
        unjudged_more=unjudged_more,
    )
