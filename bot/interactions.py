"""What Slack sends back when someone acts on what we rendered: the ids our buttons and the
Deny modal carry, and the parsing of a click (``block_actions``) and of the modal's submission
(``view_submission``). Pure functions: a payload in, a frozen value out, or ``ValueError``
saying what is wrong.

A button's value holds only the approval id; everything else is looked up server-side.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from approvals import models
from approvals.grants import ARGUMENT_FIELD

__all__ = [
    "APPROVE",
    "DECISION_BLOCK",
    "DENY",
    "DENY_VIEW",
    "EDIT",
    "EDIT_FIELD",
    "EDIT_VIEW",
    "GRANT",
    "GRANT_VIEW",
    "NOTE_BLOCK",
    "NOTE_INPUT",
    "PRESET_BLOCK",
    "PRESET_INPUT",
    "REASON_BLOCK",
    "REASON_INPUT",
    "REASON_LIMIT",
    "REVOKE",
    "Click",
    "DenySubmission",
    "EditSubmission",
    "GrantSubmission",
    "decision_block_id",
    "parse_click",
    "parse_deny_submission",
    "parse_edit_submission",
    "parse_grant_submission",
    "parse_revoke",
]

APPROVE = "countersign_approve"
DENY = "countersign_deny"
EDIT = "countersign_edit"  # "Edit & approve": opens the edit form
GRANT = "countersign_grant"  # "Approve & allow more…": opens the grant form
REVOKE = "countersign_revoke_grant"  # a standing grant's Revoke (its value: the grant id)
GRANT_VIEW = "countersign_grant_form"  # the grant form's callback_id
# the grant form's blocks: scope, seconds and uses, then one per argument ("argument:" + name)
SCOPE_BLOCK, SECONDS_BLOCK, USES_BLOCK = "scope", "seconds", "uses"
CHOICE_INPUT = "choice"  # the action_id of each of the grant form's inputs
GRANT_ID = re.compile(r"^grt_[0-9a-f]{24}$")  # what approvals.grants.new_grant_id mints
DENY_VIEW = "countersign_deny_reason"  # the modal's callback_id
EDIT_VIEW = "countersign_edit_form"  # the edit form's callback_id
EDIT_FIELD = "edit:"  # + the field's dotted path: an input block of the edit form
FIELD_INPUT = "value"  # the action_id of each field's input
NOTE_BLOCK, NOTE_INPUT = "note", "note_input"
NOTE_LIMIT = 2000  # characters of an edit's note
# The decision buttons' block: its id names the version of the arguments shown beside them
# (their SHA-256), so an approval counts for exactly what its clicker saw.
DECISION_BLOCK = "countersign_decision"
_VERSIONED = re.compile(r"^[A-Za-z0-9_]+:([0-9a-f]{64})$")
REASON_BLOCK, REASON_INPUT = "reason", "reason_input"
PRESET_BLOCK, PRESET_INPUT = "preset", "preset_select"
REASON_LIMIT = 2000  # characters of a Deny reason (the modal's input allows as many)


def decision_block_id(prefix: str, arguments_sha256: str) -> str:
    """The id of a block of decision buttons shown beside arguments of that hash."""
    return f"{prefix}:{arguments_sha256}"


@dataclass(frozen=True)
class Click:
    approval_id: str
    action: Literal["approve", "deny", "edit", "grant"]
    user_id: str
    channel_id: str | None
    seen: str | None = None  # the hash of the arguments shown beside the button, when known


def _one_action(body: dict[str, Any]) -> tuple[str, dict[str, Any], str | None]:
    """Who clicked, the one action of a ``block_actions`` payload, and the channel it came
    from (None from the App Home); ValueError saying what is wrong."""
    user = body.get("user")
    if not isinstance(user, dict) or not isinstance(user.get("id"), str):
        raise ValueError("no user in the payload")
    actions = body.get("actions")
    if not isinstance(actions, list) or len(actions) != 1 or not isinstance(actions[0], dict):
        raise ValueError("expected exactly one action")
    channel = body.get("channel") or body.get("container") or {}
    channel_id = (
        channel.get("id") or channel.get("channel_id") if isinstance(channel, dict) else None
    )
    return user["id"], actions[0], channel_id if isinstance(channel_id, str) else None


def parse_click(body: dict[str, Any]) -> Click:
    """The click in a ``block_actions`` payload; raises ValueError saying what is wrong."""
    user_id, action, channel_id = _one_action(body)
    action_id = action.get("action_id")
    kinds: dict[str, Literal["approve", "deny", "edit", "grant"]] = {
        APPROVE: "approve",
        DENY: "deny",
        EDIT: "edit",
        GRANT: "grant",
    }
    kind = kinds.get(action_id) if isinstance(action_id, str) else None
    if kind is None:
        raise ValueError("unknown action")
    block_id = action.get("block_id")
    versioned = _VERSIONED.fullmatch(block_id) if isinstance(block_id, str) else None
    value = action.get("value")
    if not isinstance(value, str) or not models.APPROVAL_ID.fullmatch(value):
        raise ValueError("the button does not carry an approval id")
    return Click(
        approval_id=value,
        action=kind,
        user_id=user_id,
        channel_id=channel_id,
        seen=versioned.group(1) if versioned else None,
    )


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
        reason=reason[:REASON_LIMIT],
    )


@dataclass(frozen=True)
class EditSubmission:
    """The edit form's submission: each field's value by its dotted path (as the input gave
    it: a number, a string, a boolean; or the raw text of an input we did not make), the note,
    and the version of the arguments the form was opened on."""

    approval_id: str
    user_id: str
    channel_id: str | None
    seen: str | None
    changes: dict[str, object]
    note: str

    @property
    def click(self) -> Click:
        return Click(
            approval_id=self.approval_id,
            action="edit",
            user_id=self.user_id,
            channel_id=self.channel_id,
            seen=self.seen,
        )


def _metadata(body: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The user id, the view's metadata and its state's values; ValueError if unusable."""
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
    values = (view.get("state") or {}).get("values") or {}
    if not isinstance(values, dict):
        raise ValueError("the modal's values are not an object")
    return user["id"], meta, values


def parse_edit_submission(body: dict[str, Any]) -> EditSubmission:
    """The edit form's submission; raises ValueError for one that names no approval. Every
    field block (``edit:<path>``) it carries is a change asked for, whatever the path: which
    paths may change is the service's to check, on the approval itself."""
    user_id, meta, values = _metadata(body)
    changes: dict[str, object] = {}
    for block_id, block in values.items():
        if not isinstance(block_id, str) or not block_id.startswith(EDIT_FIELD):
            continue
        element = block.get(FIELD_INPUT) if isinstance(block, dict) else None
        changes[block_id.removeprefix(EDIT_FIELD)] = _input_value(element)
    note_element = (values.get(NOTE_BLOCK) or {}).get(NOTE_INPUT) or {}
    note = note_element.get("value") if isinstance(note_element, dict) else None
    seen = meta.get("seen")
    channel = meta.get("channel")
    return EditSubmission(
        approval_id=meta["approval_id"],
        user_id=user_id,
        channel_id=channel if isinstance(channel, str) else None,
        seen=seen if isinstance(seen, str) else None,
        changes=changes,
        note=(note.strip() if isinstance(note, str) else "")[:NOTE_LIMIT],
    )


def _input_value(element: object) -> object:
    """What an input of the edit form holds, typed by the kind of input: a number input's
    number, a text input's text, a yes/no menu's boolean. Anything else (an input the form
    never has, a number that does not read) is returned as it came, to be refused by type."""
    if not isinstance(element, dict):
        return element
    match element.get("type"):
        case "number_input":
            text = element.get("value")
            return _number(text) if isinstance(text, str) else text
        case "plain_text_input":
            return element.get("value")
        case "static_select":
            option = element.get("selected_option") or {}
            chosen = option.get("value") if isinstance(option, dict) else None
            return {"true": True, "false": False}.get(chosen, chosen) if chosen else None
    return element


def _number(text: str) -> object:
    """A number input's text as a JSON number: an integer when it is written as one."""
    try:
        number = Decimal(text)
    except InvalidOperation:
        return text
    if not number.is_finite():
        return text
    if re.fullmatch(r"-?\d+", text.strip()):
        return int(number)
    return float(number)


@dataclass(frozen=True)
class GrantSubmission:
    """The grant form's submission: the terms as the inputs gave them (``scope``,
    ``seconds``, ``uses``, and ``kinds``: each argument's constraint kind; raw values of inputs
    we did not make are kept, to be refused by the service), and the version of the arguments
    the form was opened on."""

    approval_id: str
    user_id: str
    channel_id: str | None
    seen: str | None
    terms: dict[str, object]

    @property
    def click(self) -> Click:
        return Click(
            approval_id=self.approval_id,
            action="grant",
            user_id=self.user_id,
            channel_id=self.channel_id,
            seen=self.seen,
        )


def parse_grant_submission(body: dict[str, Any]) -> GrantSubmission:
    """The grant form's submission; raises ValueError for one that names no approval. Every
    ``argument:<name>`` block it carries is a constraint asked for, whatever the name: which
    may be asked is the service's to check, on the approval itself."""
    user_id, meta, values = _metadata(body)

    def chosen(block_id: str) -> object:
        block = values.get(block_id)
        return _input_value(block.get(CHOICE_INPUT) if isinstance(block, dict) else None)

    kinds = {
        block_id.removeprefix(ARGUMENT_FIELD): chosen(block_id)
        for block_id in values
        if isinstance(block_id, str) and block_id.startswith(ARGUMENT_FIELD)
    }
    seen = meta.get("seen")
    channel = meta.get("channel")
    return GrantSubmission(
        approval_id=meta["approval_id"],
        user_id=user_id,
        channel_id=channel if isinstance(channel, str) else None,
        seen=seen if isinstance(seen, str) else None,
        terms={
            "scope": chosen(SCOPE_BLOCK),
            "seconds": _whole_number(chosen(SECONDS_BLOCK)),
            "uses": _whole_number(chosen(USES_BLOCK)),
            "kinds": kinds,
        },
    )


def _whole_number(chosen: object) -> object:
    """A menu option's or a number input's value as the integer it writes, else as it came."""
    if isinstance(chosen, str) and re.fullmatch(r"[0-9]{1,9}", chosen):
        return int(chosen)
    return chosen


def parse_revoke(body: dict[str, Any]) -> tuple[str, str, str | None]:
    """A Revoke click: (the grant id, who clicked, the channel); ValueError if unusable."""
    user_id, action, channel_id = _one_action(body)
    grant_id = action.get("value")
    if not isinstance(grant_id, str) or not GRANT_ID.fullmatch(grant_id):
        raise ValueError("the button does not carry a grant id")
    return grant_id, user_id, channel_id
