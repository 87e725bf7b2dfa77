"""The approval resource of wire contract v1, and ``resume``: the decision in the agent
framework's own shape.

Wherever the resource carries the tool's arguments (``tool.arguments``, Claude Code's
``resume.updatedInput``) it embeds the RFC 8785 text that was hashed, verbatim, as an
:class:`orjson.Fragment`: the numbers are never parsed and written again, so what the agent
reads back hashes to ``arguments_sha256``. Serialise with :func:`render`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson

from approvals import edits, frameworks, models

__all__ = ["changes", "events", "recall_message", "render", "resource", "resume", "turn"]

S = models.Status


def _arguments(approval: models.Approval) -> orjson.Fragment:
    """The arguments exactly as hashed, to be embedded as they are."""
    return orjson.Fragment(approval.arguments_jcs)


def _run_arguments(approval: models.Approval) -> orjson.Fragment:
    """What may run, exactly as hashed: the edit's arguments, else the requested ones."""
    edit = approval.edit
    return orjson.Fragment(edit.arguments_jcs) if edit is not None else _arguments(approval)


def recall_message(approval: models.Approval) -> str:
    """What a model is told when its framework cannot run an approved call with other
    arguments than it asked for: the call was not run, and what a reviewer approved instead."""
    edit = approval.edit
    assert edit is not None
    return (
        f"A reviewer approved this call only with changes ({changes(approval)}), so it was not "
        f"run as requested. To run it, call {approval.tool.name} again with exactly these "
        f"arguments: {edit.arguments_jcs}"
    )


def changes(approval: models.Approval) -> str:
    """The edit's changes as people read them: ``amount: 5000 → 500; email.body: …``."""
    edit = approval.edit
    if edit is None:
        return ""
    out = [
        f"{c.path}: {'(absent)' if c.absent else _json(c.before)} → {_json(c.after)}"
        for c in edits.changes(approval.tool.arguments, edit.patch)
    ]
    return "; ".join(out) or "none: back to the arguments as requested"


def _json(value: object) -> str:
    return orjson.dumps(value).decode("utf-8")


def resume(approval: models.Approval) -> dict[str, Any] | None:
    """What the agent's framework needs to continue; ``None`` while pending."""
    if approval.status is S.PENDING:
        return None
    approved = approval.status is S.APPROVED
    reason = approval.reason or ""
    edited = approved and approval.edit is not None
    if edited and not frameworks.resumes_with_edits(approval.framework):
        # the framework would run the arguments it recorded: refuse those, say what was
        # approved instead (docs/edits.md)
        approved, reason, edited = False, recall_message(approval), False
    match approval.framework:
        case "ag-ui":
            if approval.status in (S.EXPIRED, S.CANCELLED):
                return {"interruptId": approval.request_id, "status": "cancelled"}
            payload: dict[str, Any] = {"approved": approved}
            if not approved:
                payload["reason"] = reason
            return {"interruptId": approval.request_id, "status": "resolved", "payload": payload}
        case "maf":
            return {
                "type": "function_approval_response",
                "id": approval.request_id,
                "approved": approved,
                # no arguments echoed: what runs is what the agent recorded, never a server copy
                "function_call": {
                    "call_id": approval.tool.call_id,
                    "name": approval.tool.name,
                    "arguments_sha256": approval.arguments_sha256,
                },
                **({} if approved else {"reason": reason}),
            }
        case "langgraph":
            decision: dict[str, Any] = (
                {"type": "approve"} if approved else {"type": "reject", "message": reason}
            )
            if edited:  # HumanInTheLoopMiddleware's edit decision: the call runs as edited
                decision = {
                    "type": "edit",
                    "edited_action": {"name": approval.tool.name, "args": _run_arguments(approval)},
                }
            # per-call HumanInTheLoopMiddleware (and a raw interrupt()): one decision per
            # interrupt, resumed as Command(resume={interrupt_id: value})
            return {"interrupt_id": approval.request_id, "value": decision}
        case "openai-agents":
            out: dict[str, Any] = {"call_id": approval.tool.call_id, "approve": approved}
            if not approved:
                out["rejection_message"] = reason
            return out
        case "claude-code":
            if approved:
                return {"behavior": "allow", "updatedInput": _run_arguments(approval)}
            return {"behavior": "deny", "message": reason}
        case _:
            out = {"approved": approved, "status": approval.status.value, "reason": reason}
            if edited:
                out["arguments"] = _run_arguments(approval)
            return out


def resource(approval: models.Approval, *, with_delivery: bool = True) -> dict[str, Any]:
    """The JSON body of every answer about an approval (and of the callback, without the card
    and delivery, which are the server's own progress);
    it holds fragments of raw JSON, so :func:`render` it."""
    body: dict[str, Any] = {
        "approval_id": approval.approval_id,
        "status": approval.status.value,
        "agent": approval.agent,
        "request_id": approval.request_id,
        "session_id": approval.session_id,
        "tool": {
            "name": approval.tool.name,
            "call_id": approval.tool.call_id,
            "arguments": _arguments(approval),
        },
        "arguments_sha256": approval.arguments_sha256,
        "requester": approval.requester.model_dump(mode="json", exclude_none=True),
        "summary": approval.summary,
        "framework": approval.framework,
        # deny_reason only when set: {"role", "approvals"} stays the contract's shape
        "required": approval.required.model_dump(mode="json", exclude_defaults=True)
        | {"role": approval.required.role, "approvals": approval.required.approvals},
        "rule": approval.rule,
        "why": approval.why,
        "decided_by": [_decider(d, approval.grant) for d in approval.decided_by],
        "edit": _edit(approval),
        "edit_of": approval.edit_of,
        "grant": approval.grant.model_dump(mode="json") if approval.grant else None,
        "decided_by_policy": (
            {"rule": approval.decided_by_policy, "policy_version": approval.policy_version}
            if approval.decided_by_policy is not None
            else None
        ),
        "reason": approval.reason,
        "created_at": approval.created_at.isoformat(),
        "expires_at": approval.expires_at.isoformat(),
        "decided_at": approval.decided_at.isoformat() if approval.decided_at else None,
        "valid_until": _time(approval.valid_until),
        "execution": _execution(approval.execution),
        "policy_version": approval.policy_version,
        "resume": resume(approval),
    }
    if with_delivery:
        body["card"] = approval.card_state.model_dump(mode="json")
        body["delivery"] = approval.delivery.model_dump(mode="json")
    return body


def _decider(decider: models.Decider, grant: models.GrantUse | None = None) -> dict[str, Any]:
    """Who decided and when; and, when their vote named one, the version of the arguments it
    was given to; and the standing grant it was given by, for a call a grant approved."""
    out: dict[str, Any] = {
        "slack_user_id": decider.slack_user_id,
        "name": decider.name,
        "at": decider.at.isoformat(),
    }
    if decider.arguments_sha256 is not None:
        out["arguments_sha256"] = decider.arguments_sha256
    if grant is not None:
        out["grant_id"] = grant.id
    if decider.passkey is not None:
        out["passkey"] = decider.passkey.model_dump(mode="json")
    return out


def grant(found: models.Grant) -> dict[str, Any]:
    """A standing grant as ``GET /v1/grants`` shows it (docs/grants.md)."""
    return {
        "grant_id": found.grant_id,
        "approval_id": found.approval_id,
        "agent": found.agent,
        "scope": found.scope,
        "session_id": found.session_id if found.scope == "session" else None,
        "tool_name": found.tool_name,
        "rule": found.rule,
        "constraints": {k: c.model_dump(mode="json") for k, c in found.constraints.items()},
        "uses": found.uses,
        "max_uses": found.max_uses,
        "granted_by": {
            "slack_user_id": found.granted_by.slack_user_id,
            "name": found.granted_by.name,
        },
        "created_at": found.created_at.isoformat(),
        "expires_at": found.expires_at.isoformat(),
        "revoked_at": _time(found.revoked_at),
    }


def _edit(approval: models.Approval) -> dict[str, Any] | None:
    """A reviewer's edit: the edited arguments as the RFC 8785 text that was hashed, verbatim;
    their hash; the change as an RFC 6902 JSON Patch against the requested arguments; who
    edited, when, and their note; and the call again that runs them, once there is one."""
    edit = approval.edit
    if edit is None:
        return None
    return {
        "arguments": orjson.Fragment(edit.arguments_jcs),
        "arguments_sha256": edit.arguments_sha256,
        "patch": list(edit.patch),
        "by": {"slack_user_id": edit.by.slack_user_id, "name": edit.by.name},
        "at": edit.at.isoformat(),
        "note": edit.note,
        "called_again_as": approval.called_again_as,
    }


def _time(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def _execution(execution: models.Execution | None) -> dict[str, Any] | None:
    """The claim to run the call and its outcome; the claim's idempotency key is the caller's
    own secret and never shown."""
    if execution is None:
        return None
    outcome = execution.outcome
    return {
        "claim_id": execution.claim_id,
        "claimed_at": execution.claimed_at.isoformat(),
        "outcome": None
        if outcome is None
        else {
            "status": outcome.status,
            "detail": outcome.detail,
            "reported_at": outcome.reported_at.isoformat(),
        },
    }


def render(approval: models.Approval, *, with_delivery: bool = True) -> bytes:
    """The resource as JSON bytes (UTF-8), the arguments embedded byte for byte."""
    return orjson.dumps(resource(approval, with_delivery=with_delivery))


def turn(record: models.TurnRecord, approval: models.Approval | None = None) -> dict[str, Any]:
    """The answer of ``POST /v1/turns`` (and one entry of ``GET /v1/turns``)."""
    body: dict[str, Any] = {
        "verdict": record.verdict,
        "rule": record.rule,
        "reason_code": record.reason_code,
        "message": record.message,
    }
    if record.approval_id is not None:
        body["approval_id"] = record.approval_id
        if approval is not None:
            body["approval_status"] = approval.status.value
    body.update(
        {
            "evaluated": list(record.evaluated),
            "session_id": record.session_id,
            "request_id": record.request_id,
            "channel": record.channel,
            "lead_id": record.lead_id,
            "tool": {"name": record.tool_name, "call_id": record.call_id},
            "inputs_sha256": record.inputs_sha256,
            "policy_version": record.policy_version,
            "at": record.at.isoformat(),
        }
    )
    return body


def events(
    approval: models.Approval,
    attempts: list[models.Attempt],
    timers: Sequence[tuple[models.TimerEntry, datetime]] = (),
) -> dict[str, Any]:
    """``GET /v1/approvals/{id}/events``: creation, every click attempt, reminders and
    escalations (outcome ``reminded`` / ``escalated``), the settlement, the claim to run the
    call and its outcome."""
    out = [_created(approval)]
    out += [_attempt(a) for a in attempts]
    out += [_timer(timer, fired_at) for timer, fired_at in timers]
    if approval.decided_at is not None:
        out.append(_settlement(approval, approval.decided_at))
    if approval.execution is not None:
        out += _execution_events(approval.execution)
    out.sort(key=lambda e: str(e["at"]))
    return {"approval_id": approval.approval_id, "events": out}


def _created(approval: models.Approval) -> dict[str, Any]:
    return {
        "kind": "created",
        "at": approval.created_at.isoformat(),
        "rule": approval.rule,
        "required": approval.required.model_dump(mode="json"),
        "policy_version": approval.policy_version,
    }


def _attempt(attempt: models.Attempt) -> dict[str, Any]:
    return {
        "kind": "attempt",
        "at": attempt.at.isoformat(),
        "slack_user_id": attempt.slack_user_id,
        "name": attempt.name,
        "action": attempt.action,
        "outcome": attempt.outcome.value,
        "detail": attempt.detail,
    }


def _timer(timer: models.TimerEntry, fired_at: datetime) -> dict[str, Any]:
    return {
        "kind": "timer",
        "at": fired_at.isoformat(),
        "outcome": timer.outcome,
        "due_at": timer.due_at.isoformat(),
    }


def _settlement(approval: models.Approval, decided_at: datetime) -> dict[str, Any]:
    return {
        "kind": "settlement",
        "at": decided_at.isoformat(),
        "status": approval.status.value,
        "decided_by": [d.slack_user_id for d in approval.decided_by],
        "reason": approval.reason,
        "policy_version": approval.policy_version,
    }


def _execution_events(execution: models.Execution) -> list[dict[str, Any]]:
    """The claim to run the call, and its outcome once reported."""
    claim = {
        "kind": "execution",
        "at": execution.claimed_at.isoformat(),
        "claim_id": execution.claim_id,
    }
    if execution.outcome is None:
        return [claim]
    outcome = {
        "kind": "outcome",
        "at": execution.outcome.reported_at.isoformat(),
        "claim_id": execution.claim_id,
        "status": execution.outcome.status,
        "detail": execution.outcome.detail,
    }
    return [claim, outcome]
