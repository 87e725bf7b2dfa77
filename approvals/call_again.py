"""A call again with a reviewer's edit (docs/edits.md): the pure rules.

Some frameworks can only run the call they recorded (see :mod:`approvals.frameworks`). When a
reviewer approves such a call with edits, the agent refuses it and tells the model the exact
edited arguments; the model's next call with exactly those is approved at once, on the editor's
decision, as a new approval whose ``edit_of`` names the original. That call must be the one the
reviewer approved, so every condition below is a reason to ask a human as usual instead:

* the same agent (the caller's token), session and tool, the same requester and context;
* exactly the edited arguments (their RFC 8785 hash, so one byte off is another call);
* routed by the policy in force to the same rule with the same requirement as the edited call
  was (a policy reload that changes either needs a new decision);
* the original approved with that edit, within its ``valid_for``, never claimed and never
  called again (the store checks these again under the original's row lock); the call again
  may run only until the original's deadline.

Lead-facing escalations never take this path: only an agent's own submission does.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from approvals import models, resource

__all__ = ["approved", "outbox", "refusal"]


def refusal(original: models.Approval, call: models.Approval, now: datetime) -> str | None:
    """Why ``call`` (a new submission, still pending) is not the call again of ``original``;
    None when it is."""
    edit = original.edit
    if original.status is not models.Status.APPROVED or edit is None:
        return "the original is not approved with edits"
    if original.called_again_as is not None or original.execution is not None:
        return "the original was claimed or called again already"
    valid_until = original.valid_until
    if valid_until is None or now > valid_until:
        return "the original's decision has lapsed"
    same_call = (
        call.agent == original.agent
        and call.session_id == original.session_id
        and call.tool.name == original.tool.name
        and call.arguments_sha256 == edit.arguments_sha256
    )
    if not same_call:
        return "not the same agent, session, tool and edited arguments"
    if _identity(call.requester) != _identity(original.requester):
        return "another requester"
    if call.context != original.context:
        # what a rule's conditions and a reviewer read beside the arguments (e.g. which
        # project a command runs in): another context is another call
        return "another context"
    voters = [d for d in original.decided_by if d.arguments_sha256 == edit.arguments_sha256]
    if len(voters) < original.required.approvals:
        return "the edit's votes do not make the quorum"
    if call.rule != original.rule or call.required != original.required:
        return "the policy in force routes it to another rule or requirement"
    return None


def _identity(requester: models.Requester) -> tuple[str | None, str | None]:
    """Who asked, as authority compares people (by Slack id, by e-mail): not the display name."""
    email = requester.email.lower() if requester.email else None
    return requester.slack_user_id, email


def approved(original: models.Approval, call: models.Approval, now: datetime) -> models.Approval:
    """``call`` approved at ``now`` on ``original``'s decision: by those whose votes approved the
    edited arguments (the editor first), its ``edit_of`` naming the original, claimable until
    the original's ``valid_until`` (a second after, at most: ``valid_for`` counts whole
    seconds)."""
    assert original.edit is not None
    voters = tuple(d for d in original.decided_by if d.arguments_sha256 == original.run_sha256)
    valid_until = original.valid_until
    assert valid_until is not None
    return call.evolve(
        status=models.Status.APPROVED,
        decided_by=voters,
        decided_at=now,
        edit_of=original.approval_id,
        # the window the reviewer approved: it runs by the original's deadline, never later
        valid_for=max(1, math.ceil((valid_until - now).total_seconds())),
    )


def outbox(original: models.Approval, approved: models.Approval) -> list[models.OutboxEntry]:
    """What a call again asks the relay to do: call the agent back with its decision (the body
    frozen now, as a settlement's) and re-render the original's card, which now says that
    another call runs its edit, now and when that call's decision lapses. The call again has no
    card of its own: its updates re-render the original's (bot.slack_cards)."""
    entries = [models.card_update(original.approval_id)]
    if approved.valid_until is not None:
        # once more when its decision lapses, to say so on that card if it was never claimed
        lapsed = approved.valid_until + timedelta(seconds=1)
        entries.append(
            models.card_update(approved.approval_id, lapsed, unless=models.SKIP_IF_CLAIMED)
        )
    if approved.callback_url:
        body = resource.render(approved, with_delivery=False).decode("utf-8")
        callback = models.Callback(url=approved.callback_url, body=body, agent=approved.agent)
        entries.append(models.OutboxEntry(approval_id=approved.approval_id, work=callback))
    return entries
