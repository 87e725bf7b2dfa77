"""Standing grants in Slack (docs/grants.md): the Approve & allow more form, a grant's line on
the card that made it (with its Revoke button while it is live), and the answers to the granter.
Pure functions, as :mod:`bot.rendering`: approvals and grants in, Block Kit out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from approvals import grants, models, service
from bot import interactions, messages
from bot.block_kit import Block, button, context, date, mention, modal, section
from bot.untrusted_text import fill, plain, value

__all__ = [
    "DURATIONS",
    "grant_answer",
    "grant_blocks",
    "grant_errors",
    "grant_modal",
    "grantable",
    "home_grant_blocks",
]

# The durations the form offers (seconds), those within the rule's max_seconds, and the max.
DURATIONS = (300, 900, 3600, 4 * 3600, 8 * 3600, 24 * 3600, 7 * 86400)
VALUE_SHOWN = 120  # characters of an argument's value in the form's labels and on the card


def grantable(approval: models.Approval) -> bool:
    """Whether the pending card offers Approve & allow more: its rule allows grants, one
    person decides, and the form can show a constraint for every argument."""
    return (
        approval.grants is not None
        and approval.required.approvals == 1
        and not approval.lead_facing
        and approval.edit is None
        and len(approval.run_arguments) <= grants.MAX_ARGUMENTS
    )


def _duration(seconds: int) -> str:
    if seconds % 86400 == 0:
        days = seconds // 86400
        return f"{days} day{'s' if days > 1 else ''}"
    if seconds % 3600 == 0:
        hours = seconds // 3600
        return f"{hours} hour{'s' if hours > 1 else ''}"
    return f"{seconds // 60} minutes"


def _option(text: str, option_value: str) -> dict[str, Any]:
    return {"text": {"type": "plain_text", "text": plain(text, 75)}, "value": option_value}


def _choice(block_id: str, label: str, options: list[dict[str, Any]], initial: int = 0) -> Block:
    return {
        "type": "input",
        "block_id": block_id,
        "label": {"type": "plain_text", "text": plain(label, 2000)},
        "element": {
            "type": "static_select",
            "action_id": interactions.CHOICE_INPUT,
            "options": options,
            "initial_option": options[initial],
        },
    }


def grant_modal(approval: models.Approval, channel_id: str | None) -> dict[str, Any]:
    """The Approve & allow more form: the scope, for how long and how many more calls (within
    the rule's limits), and per argument what later calls must carry there (exactly this value
    unless chosen otherwise; at most for numbers). ``private_metadata``: the approval id, where
    to answer and the arguments' version it was opened on."""
    limits = approval.grants
    assert limits is not None, "only a grantable approval's card offers the form"
    intro = fill(
        messages.GRANT_INTRO,
        tool=approval.tool.name,
        call_id=approval.tool.call_id,
        agent=approval.agent,
    )
    scopes = [
        _option(
            fill(messages.GRANT_SCOPES[s], session=approval.session_id, agent=approval.agent), s
        )
        for s in limits.scopes
    ]
    durations = sorted({d for d in DURATIONS if d < limits.max_seconds} | {limits.max_seconds})
    times = [_option(_duration(d), str(d)) for d in durations]
    hour = next((i for i, d in enumerate(durations) if d >= 3600), len(durations) - 1)
    uses = {
        "type": "input",
        "block_id": interactions.USES_BLOCK,
        "label": {
            "type": "plain_text",
            "text": messages.GRANT_USES_LABEL.format(most=limits.max_uses),
        },
        "element": {
            "type": "number_input",
            "action_id": interactions.CHOICE_INPUT,
            "is_decimal_allowed": False,
            "min_value": "1",
            "max_value": str(limits.max_uses),
            "initial_value": str(min(5, limits.max_uses)),
        },
    }
    view_blocks = [
        section(intro, "intro"),
        _choice(interactions.SCOPE_BLOCK, messages.GRANT_SCOPE_LABEL, scopes),
        _choice(interactions.SECONDS_BLOCK, messages.GRANT_SECONDS_LABEL, times, hour),
        uses,
        *[_argument_choice(name, item) for name, item in approval.run_arguments.items()],
    ]
    metadata = {
        "approval_id": approval.approval_id,
        "channel": channel_id,
        "seen": approval.run_sha256,
    }
    return modal(
        interactions.GRANT_VIEW, metadata, messages.GRANT_TITLE, messages.GRANT_SUBMIT, view_blocks
    )


def _shown(item: object) -> str:
    return json.dumps(item, ensure_ascii=False, separators=(",", ":"))


def _argument_choice(name: str, item: object) -> Block:
    kinds = ["exactly", "any", *(["at_most"] if grants.is_number(item) else [])]
    options = [_option(messages.GRANT_KINDS[k], k) for k in kinds]
    label = f"{name} = {_shown(item)}"
    if len(label) > VALUE_SHOWN:
        label = label[: VALUE_SHOWN - 1] + "…"
    return _choice(grants.ARGUMENT_FIELD + name, label, options)


def grant_errors(refused: service.GrantRefused) -> dict[str, str]:
    """The form's errors by input block (Slack's ``response_action: errors``): a problem with
    an argument the form does not show, or with the grant as a whole, goes on the scope."""
    offered = {grants.ARGUMENT_FIELD + name for name in refused.approval.run_arguments}
    blocks = {interactions.SCOPE_BLOCK, interactions.SECONDS_BLOCK, interactions.USES_BLOCK}
    shown: dict[str, list[str]] = {}
    for problem in refused.problems:
        block = problem.field if problem.field in offered | blocks else interactions.SCOPE_BLOCK
        text = problem.message if block == problem.field else f"{problem.field}: {problem.message}"
        shown.setdefault(block, []).append(text)
    return {block: plain("; ".join(texts), 2000) for block, texts in shown.items()}


def grant_answer(result: service.GrantRefused) -> str:
    """The ephemeral text for a granter whose terms were refused after the form closed."""
    problems = "; ".join(f"{p.field}: {p.message}" for p in result.problems)
    return fill(messages.GRANT_FAILED_AFTER, problems=problems)


def _constraint(name: str, constraint: models.GrantConstraint) -> str:
    match constraint.kind:
        case "any":
            return f"{value(name, 100)} any"
        case "at_most":
            return f"{value(name, 100)} ≤ {value(_shown(constraint.value), VALUE_SHOWN)}"
        case "exactly":
            return f"{value(name, 100)} = {value(_shown(constraint.value), VALUE_SHOWN)}"


def _grant_line(grant: models.Grant, now: datetime) -> str:
    state = grant.state(now)
    scope = fill(messages.GRANT_SCOPES[grant.scope], session=grant.session_id, agent=grant.agent)
    by = (
        mention(grant.revoked_by)
        if grant.revoked_by and grant.revoked_by != "cli"
        else "an operator"
    )
    suffix = messages.GRANT_STATE[state].format(
        by=by, at=date(grant.revoked_at) if grant.revoked_at else ""
    )
    constraints = "; ".join(_constraint(k, c) for k, c in grant.constraints.items()) or "nothing"
    return messages.GRANT_LINE.format(
        who=mention(grant.granted_by.slack_user_id),
        uses=grant.uses,
        max_uses=grant.max_uses,
        scope=scope,
        until=date(grant.expires_at),
        constraints=constraints,
        state=suffix,
    )


def _revoke(grant: models.Grant) -> Block:
    revoke = button(messages.REVOKE_BUTTON, interactions.REVOKE, grant.grant_id, "danger")
    return {"type": "actions", "block_id": f"revoke_{grant.grant_id}", "elements": [revoke]}


def grant_blocks(made: Sequence[models.Grant], now: datetime) -> list[Block]:
    """Each grant made on a card's approval: its line, and Revoke while it is live."""
    out: list[Block] = []
    for grant in made:
        out.append(section(_grant_line(grant, now), f"grant_{grant.grant_id}"))
        if grant.state(now) == "live":
            out.append(_revoke(grant))
    return out


def home_grant_blocks(live: Sequence[models.Grant], now: datetime, limit: int) -> list[Block]:
    """The App Home's standing grants: each live one the viewer may revoke (at most ``limit``,
    two blocks each), with what it is for."""
    out: list[Block] = [section(f"*{messages.HOME_GRANTS}*", "grants_head")]
    if not live:
        return [*out, context(messages.HOME_NO_GRANTS, "grants_none")]
    for grant in live[:limit]:
        head = f"*{value(grant.tool_name, 200)}* · {value(grant.agent, 200)} · "
        out.append(section(head + _grant_line(grant, now), f"grant_{grant.grant_id}"))
        out.append(_revoke(grant))
    return out
