"""Every user-facing Slack string, in one place."""

from __future__ import annotations

from approvals import models

__all__ = [
    "ALREADY",
    "APPROVED_WITH_EDITS",
    "CALLED_AGAIN",
    "CARD_FALLBACK",
    "CLAIMED",
    "CLAIMED_NO_REPORT",
    "DATABASE_AWAY",
    "DEAD_LETTER",
    "DENY_FORM_FAILED",
    "DENY_INTRO",
    "DENY_TITLE",
    "DUPLICATE",
    "EDITED",
    "EDITED_NOTE",
    "EDITED_PENDING",
    "EDIT_BUTTON",
    "EDIT_FAILED_AFTER",
    "EDIT_FORM_FAILED",
    "EDIT_INTRO",
    "EDIT_NOTE_LABEL",
    "EDIT_SUBMIT",
    "EDIT_TITLE",
    "EDIT_TOO_LONG",
    "ESCALATED",
    "ESCALATED_THREAD",
    "ESCALATION",
    "ESCALATION_LINK",
    "EXPIRED_CLICK",
    "GRANT_BUTTON",
    "GRANT_FAILED_AFTER",
    "GRANT_FORM_FAILED",
    "GRANT_INTRO",
    "GRANT_KINDS",
    "GRANT_LINE",
    "GRANT_SCOPES",
    "GRANT_SCOPE_LABEL",
    "GRANT_SECONDS_LABEL",
    "GRANT_STATE",
    "GRANT_SUBMIT",
    "GRANT_TITLE",
    "GRANT_USES_LABEL",
    "HEADER",
    "HOME_DECIDE",
    "HOME_GRANTS",
    "HOME_NONE_REQUESTED",
    "HOME_NOTHING",
    "HOME_NO_GRANTS",
    "HOME_REQUESTED",
    "LAPSED",
    "LEAD_FACING",
    "MALFORMED_CLICK",
    "NO_CARD_YET",
    "OUTCOME_LINE",
    "OUTCOME_OVERDUE",
    "OUTDATED",
    "PASSKEY_ASKED",
    "PASSKEY_REGISTERED",
    "PASSKEY_UNAVAILABLE",
    "PRESET_LABEL",
    "PROGRESS",
    "QUEUE_CUT",
    "QUEUE_EDITED",
    "QUEUE_ITEM",
    "QUEUE_MORE",
    "QUEUE_NO_CARD",
    "QUEUE_UNJUDGED",
    "QUEUE_UNJUDGED_MORE",
    "RAN",
    "REASON_LABEL",
    "REASON_REQUIRED",
    "REFUSED",
    "REMINDER",
    "REQUESTED_ITEM",
    "REVOKED_ANSWER",
    "REVOKE_BUTTON",
    "REVOKE_REFUSED",
    "SCHEMA_CHECKED",
    "TRUNCATED",
    "UNKNOWN_APPROVAL",
    "VALID_UNTIL",
    "VERIFIED_WITH_PASSKEY",
    "VOTED",
    "WHY",
]

S = models.Status  # short, for the tables below

CARD_FALLBACK = "Approval needed: {tool} requested by {requester} (agent {agent})"
HEADER = {
    S.PENDING: "Approval needed: {tool}",
    S.APPROVED: "Approved: {tool}",
    S.DENIED: "Denied: {tool}",
    S.EXPIRED: "Expired: {tool}",
    S.CANCELLED: "Cancelled: {tool}",
}
OUTCOME_LINE = {
    S.APPROVED: ":white_check_mark: *Approved* by {who} at {at}. The agent has been told.",
    S.DENIED: ":x: *Denied* by {who} at {at}. The call will not run.",
    S.EXPIRED: ":hourglass: *Expired* at {at}: nobody with the authority decided in time. "
    "The call will not run.",
    S.CANCELLED: ":no_entry_sign: *Cancelled* by the agent at {at}. The call will not run.",
}
# single use: an approved call runs once, before its deadline, and says how it went
VALID_UNTIL = ":stopwatch: The agent may run it once, until {until}."
LAPSED = (
    ":stopwatch: Not claimed to run by {until}: a claim now is refused; the agent must ask "
    "again to run it."
)
CALLED_AGAIN = (
    ":repeat: The agent called again at {at} with exactly the edited arguments, approved at once "
    "on this edit as {approval_id}: that call runs them, this one no longer may."
)
CLAIMED = ":gear: Running since {at} ({agent} claimed it); no outcome reported yet."
CLAIMED_NO_REPORT = (
    ":gear: Allowed to run at {at} ({agent} claimed it); Claude Code reports no outcome."
)
OUTCOME_OVERDUE = (
    ":warning: Claimed at {at} by {agent}, no outcome reported: ask the agent's owner whether "
    "it ran."
)
RAN = {
    "ok": ":white_check_mark: Ran at {at} by {agent}: ok{detail}",
    "error": ":warning: Ran at {at} by {agent}: error{detail}",
}
REFUSED = (
    ":no_entry: Your click did not count: {reason}. The request stays open for someone with "
    "role {role}."
)
ALREADY = "This request was already {status}{by}. Nothing changed."
OUTDATED = (
    ":pencil2: Your click did not count: the call was edited since you saw it. Look at the "
    "card again: it shows the edited call."
)
APPROVED_WITH_EDITS = (
    ":white_check_mark: *Approved with edits* by {who} at {at}. The agent has been told, and "
    "may run only the edited call."
)
EDITED = ":pencil2: *Edited* by {who} at {at}{note}:"
EDITED_NOTE = " — “{note}”"
EDITED_PENDING = "The approvals above are for the edited call."
EDIT_BUTTON = "Edit & approve"
EDIT_TITLE = "Edit & approve"
EDIT_SUBMIT = "Approve edited"
EDIT_INTRO = (
    "Change what *{tool}* ({call_id}, agent {agent}) will run, then approve it. Who may approve "
    "is judged on the edited call."
)
EDIT_TOO_LONG = "Too long to edit here (shown on the card as is): {paths}"
EDIT_NOTE_LABEL = "Note (optional)"
EDIT_FORM_FAILED = (
    "The edit form could not be opened; nothing changed. Try again in a moment, or Approve or "
    "Deny as the call stands."
)
EDIT_FAILED_AFTER = ":no_entry: Your edit was not applied: {problems}. Nothing changed."
QUEUE_EDITED = " · :pencil2: edited"
VOTED = "Your approval counts: {count} of {needed}. It settles when {needed} people approve."
DUPLICATE = "You already approved this; it needs {needed} different people ({count} so far)."
PROGRESS = ":ballot_box_with_check: {count} of {needed} approvals: {who}"
WHY = "*Why a human:* {rule}{because}"
SCHEMA_CHECKED = "Arguments checked against the tool's schema (tools: {globs}) before this card"
DENY_TITLE = "Deny this request"
DENY_INTRO = (
    "Deny *{tool}* (call {call_id}) for {agent}? The agent is told why, and that it must not "
    "retry the call unchanged."
)
REASON_LABEL = "Reason"
REASON_REQUIRED = "This rule needs a reason to deny."
PRESET_LABEL = "Common reasons"
REMINDER = ":bell: {who} still waiting for a decision on *{tool}*."
ESCALATION = (
    ":rotating_light: {oncall}: nobody with role {role} has decided *{tool}* (requested by "
    "{requester}). {card}; it expires {expires}."
)
# a call a rule approved by itself (decide: approve), in the rule's log channel: no card
POLICY_APPROVED = (
    ":white_check_mark: *{tool}* from {agent} approved by the policy ({rule}, policy {version}) "
    "· `{approval_id}` · arguments SHA-256 `{sha}`"
)
ESCALATION_LINK = "<{link}|Open the card> to decide"
NO_CARD_YET = "Its card is not posted yet; decide there once it is"
ESCALATED_THREAD = ":rotating_light: Escalated to on-call."
ESCALATED = ":rotating_light: Escalated to on-call at {at}: nobody eligible decided in time."
HOME_DECIDE = "Waiting for you"
HOME_NOTHING = "Nothing is waiting for your decision."
HOME_REQUESTED = "What you requested"
HOME_NONE_REQUESTED = "You have no requests."
QUEUE_ITEM = "*{tool}* from {agent} · requested by {requester} · {needs}"
QUEUE_CUT = (
    ":scissors: Too long to show whole here, so no buttons: <{link}|open the card> to decide."
)
QUEUE_NO_CARD = (
    ":scissors: Too long to show whole here, so no buttons: decide on its card once it is posted."
)
QUEUE_MORE = (
    "…and {count} more waiting for you, older than these: decide these to bring them here, or "
    "find their cards in the reviewer channel."
)
QUEUE_UNJUDGED = (
    "{count} older pending requests were not checked for you here: find their cards in the "
    "reviewer channel."
)
QUEUE_UNJUDGED_MORE = (
    "More than {count} older pending requests were not checked for you here: find their cards "
    "in the reviewer channel."
)
REQUESTED_ITEM = "*{tool}* ({approval_id}) · {status}"
DATABASE_AWAY = (
    ":warning: Countersign cannot reach its database right now, so your click may not have "
    "counted. Please click again in a moment (a click that did count is not counted twice)."
)
EXPIRED_CLICK = "This request expired before your click; it was not approved."
VERIFIED_WITH_PASSKEY = " · verified with a passkey"
PASSKEY_REGISTERED = (
    ":key: A passkey was registered for your Countersign approvals at {at}. If this was not "
    "you, tell an operator now: `countersign passkeys reset {user}` removes it."
)
PASSKEY_ASKED = (
    ":closed_lock_with_key: This call needs your passkey: your click has not counted yet. "
    "<{url}|Confirm with passkey> (this link is yours alone, works once, for 5 minutes)."
)
PASSKEY_UNAVAILABLE = (
    "This call needs a passkey confirmation, but step-up is not configured "
    "(COUNTERSIGN_PUBLIC_URL): your click did not count."
)
UNKNOWN_APPROVAL = "This approval is not known to Countersign (it may belong to another install)."
MALFORMED_CLICK = "Countersign could not read this button click: {problem}."
DENY_FORM_FAILED = (
    "The Deny form did not open, so nothing was decided: the request stays open. "
    "Click Deny again to give your reason."
)
DEAD_LETTER = (
    ":warning: *The agent was not told*: delivery gave up after {attempts} attempts "
    "(last error: {error}). An operator can retry with `countersign redrive {approval_id}`."
)
LEAD_FACING = (
    ":speech_balloon: *Lead-facing turn* on {channel} with lead {lead}: a guard escalated it "
    "({why}; {rule}). The lead is never asked and can never decide."
)
TRUNCATED = "… [truncated: {shown} of {total} characters shown; sha256 {sha}]"

# -- standing grants (docs/grants.md) --
GRANT_BUTTON = "Approve & allow more…"
GRANT_TITLE = "Approve & allow more"
GRANT_SUBMIT = "Approve and allow"
GRANT_INTRO = (
    "Approve *{tool}* ({call_id}, agent {agent}) and allow more calls like it without asking "
    "again, within the limits below. Each later call is checked against them, and against your "
    "authority at that moment; anything else gets a card as usual."
)
GRANT_SCOPE_LABEL = "For"
GRANT_SCOPES = {"session": "this session only ({session})", "agent": "any session of {agent}"}
GRANT_SECONDS_LABEL = "For how long"
GRANT_USES_LABEL = "How many more calls (at most {most})"
# each argument's choices: what later calls must carry there
GRANT_KINDS = {"exactly": "exactly this value", "any": "any value", "at_most": "at most this value"}
GRANT_FORM_FAILED = (
    "The form could not be opened; nothing changed. Try again in a moment, or Approve or Deny "
    "this call alone."
)
GRANT_FAILED_AFTER = ":no_entry: Nothing was approved or allowed: {problems}."
GRANT_LINE = (
    ":repeat: *Allowed more* by {who}: {uses} of {max_uses} calls used, {scope}, until {until}."
    " Later calls must carry: {constraints}{state}"
)
GRANT_STATE = {
    "live": "",
    "revoked": " — *revoked* by {by} at {at}",
    "expired": " — *expired*",
    "used_up": " — *used up*",
}
REVOKE_BUTTON = "Revoke"
REVOKED_ANSWER = ":no_entry_sign: Revoked: later calls need a decision again."
REVOKE_REFUSED = "Not revoked: {why}."
HOME_GRANTS = "Standing grants you may revoke"
HOME_NO_GRANTS = "No live standing grants you may revoke."
