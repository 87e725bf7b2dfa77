"""The agent-side wire contract v1 as an OpenAPI 3.1 document, generated from the pydantic models.

Request bodies are the models the webhook validates with (:class:`approvals.models.ApprovalRequest`,
:class:`approvals.models.TurnRequest`, :class:`bot.wire.CancelRequest`), in pydantic's
"validation" mode. The answers are built as plain dicts by :mod:`approvals.resource` and
:mod:`bot.http_errors`; the models below describe those shapes, in "serialization" mode. They
live here, at the edge, because only the HTTP document needs them: the core never builds or
reads them. They forbid unknown keys (``additionalProperties: false``), so a field added to an
answer but not here makes the fuzz test (tests/integration/test_fuzz_api.py) fail until the
contract says so.

The document is served at ``GET /v1/openapi.json`` (no token needed) and committed as
``docs/openapi.json``, written by ``make openapi`` (``python -m bot.openapi``).
"""

from __future__ import annotations

import functools
import json
import sys
from datetime import datetime
from typing import Annotated, Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.json_schema import JsonSchemaMode, SkipJsonSchema, models_json_schema

from approvals import models
from bot import wire

__all__ = [
    "DOCUMENT_PATH",
    "ApprovalEvents",
    "ApprovalResource",
    "ErrorBody",
    "TurnHistory",
    "TurnVerdict",
    "add_routes",
    "document",
    "main",
]

DOCUMENT_PATH = "/v1/openapi.json"
COMPONENTS = "#/components/schemas/{model}"


class Answer(BaseModel):
    """A shape the webhook answers with; unknown keys are a drift of the contract."""

    model_config = ConfigDict(frozen=True, extra="forbid")


# -- the approval resource (approvals/resource.py: resource) ----------------------------------


class ResourceTool(Answer):
    name: str
    call_id: str
    arguments: dict[str, JsonValue] = Field(
        description="Exactly the RFC 8785 text that was hashed into arguments_sha256."
    )


class ResourceRequester(Answer):
    """Who asked; only the identities the agent gave are present."""

    slack_user_id: str | SkipJsonSchema[None] = None
    email: str | SkipJsonSchema[None] = None
    name: str | SkipJsonSchema[None] = None


class ResourceRequired(Answer):
    """What a decision needs: a role (or any of several) and how many approvals."""

    role: str
    approvals: int
    deny_reason: bool | SkipJsonSchema[None] = Field(
        None, description="Present (true) when a Deny needs a written reason."
    )
    any_of: list[str] | SkipJsonSchema[None] = Field(
        None, description="Further roles that may decide as well (present when there are any)."
    )


class PasskeyVerified(Answer):
    credential_id: str = Field(description="The passkey's credential id (base64url).")
    at: datetime = Field(description="When the passkey assertion was verified.")


class DecidedBy(Answer):
    slack_user_id: str
    name: str | None
    at: datetime
    passkey: PasskeyVerified | SkipJsonSchema[None] = Field(
        None,
        description="On a rule with verify: passkey, the passkey that confirmed this approval "
        "(docs/step-up.md); absent otherwise.",
    )
    grant_id: str | SkipJsonSchema[None] = Field(
        None,
        description="The standing grant this decision was given by (present on a call a grant "
        "approved at once: the person is its granter).",
    )
    arguments_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | SkipJsonSchema[None] = (
        Field(
            None,
            description="The version of the arguments this decision was for (the requested "
            "ones' hash, or an edit's); absent on decisions recorded before edits existed.",
        )
    )


class ResourceGrantUse(Answer):
    """On a call approved at once by a standing grant (docs/grants.md): the grant, and which
    of its uses this call took, of how many."""

    id: Annotated[str, Field(pattern=r"^grt_[0-9a-f]{24}$")]
    use: int
    of: int


class PolicyDecision(Answer):
    """A call approved at once by a rule that decides by itself (decide: approve)."""

    rule: str
    policy_version: str


class EditedBy(Answer):
    slack_user_id: str
    name: str | None


class ResourceEdit(Answer):
    """A reviewer's edit (docs/edits.md): an approval approved with an edit may run only these
    arguments."""

    arguments: dict[str, JsonValue] = Field(
        description="The edited arguments: exactly the RFC 8785 text hashed into "
        "edit.arguments_sha256."
    )
    arguments_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    patch: list[dict[str, JsonValue]] = Field(
        description="The change as an RFC 6902 JSON Patch against tool.arguments (the "
        "requested arguments)."
    )
    by: EditedBy
    at: datetime
    note: str | None
    called_again_as: str | None = Field(
        description="The approval of the call again with exactly these arguments (its edit_of "
        "names this one), once the agent made it: that one runs them, this one can no longer "
        "be claimed. Null before."
    )


class ResourceOutcome(Answer):
    status: Literal["ok", "error"]
    detail: str
    reported_at: datetime


class ResourceExecution(Answer):
    """The one claim to run an approved call (POST …/execution), and its reported outcome."""

    claim_id: Annotated[str, Field(pattern=r"^exc_[0-9a-f]{24}$")]
    claimed_at: datetime
    outcome: ResourceOutcome | None


class ApprovalResource(Answer):
    """The body of every answer about an approval (and of the callback, without ``delivery``)."""

    approval_id: Annotated[str, Field(pattern=models.APPROVAL_ID.pattern)]
    status: models.Status
    agent: str = Field(description="The agent the bearer token belongs to.")
    request_id: str
    session_id: str
    tool: ResourceTool
    arguments_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] = Field(
        description="SHA-256 (hex) of tool.arguments in RFC 8785 canonical form."
    )
    requester: ResourceRequester
    summary: str
    framework: models.Framework
    required: ResourceRequired
    rule: str = Field(description="The policy rule that matched.")
    why: str = Field(description="The conditions that made the rule match.")
    decided_by: list[DecidedBy]
    edit: ResourceEdit | None = Field(
        description="A reviewer's edit of the arguments, null if none: once approved, only "
        "edit.arguments may run (tool.arguments and arguments_sha256 stay the requested ones)."
    )
    edit_of: str | None = Field(
        description="A call again with exactly the edited arguments of another approval, "
        "approved at once on that edit (docs/edits.md): that approval's id. Null otherwise."
    )
    grant: ResourceGrantUse | None = Field(
        description="Approved at once by a standing grant (docs/grants.md): which, and which "
        "use of it. Null otherwise."
    )
    decided_by_policy: PolicyDecision | None = Field(
        description="Approved at once by the policy: a rule that approves by itself "
        "(decide: approve), which decided_by (then empty) does not name. Null otherwise."
    )
    reason: str | None
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None
    valid_until: datetime | None = Field(
        description="Approved: the last instant the call may be claimed to run (decided_at + "
        "the rule's valid_for); null otherwise."
    )
    execution: ResourceExecution | None = Field(
        description="The claim to run the approved call, once made; null before."
    )
    policy_version: str
    resume: dict[str, JsonValue] | None = Field(
        description="The decision in the agent framework's own shape; null while pending."
    )
    card: models.CardState = Field(
        description="The card in Slack: pending (error: why the last try failed), posted "
        "(channel, ts) or failed (its post dead-lettered; error says why)."
    )
    delivery: models.Delivery = Field(
        description="The callback to the agent: none (it long-polls), pending, delivered or "
        "dead_letter."
    )


# -- the audit of one approval (approvals/resource.py: events) --------------------------------


class CreatedEvent(Answer):
    kind: Literal["created"]
    at: datetime
    rule: str
    required: models.Required
    policy_version: str


class AttemptEvent(Answer):
    """A click on the card, counted or not (``outcome`` says why)."""

    kind: Literal["attempt"]
    at: datetime
    slack_user_id: str
    name: str | None
    action: Literal["approve", "deny"]
    outcome: models.AttemptOutcome
    detail: str


class TimerEvent(Answer):
    """A reminder or an escalation to on-call that fired."""

    kind: Literal["timer"]
    at: datetime
    outcome: Literal["reminded", "escalated"]
    due_at: datetime


class SettlementEvent(Answer):
    kind: Literal["settlement"]
    at: datetime
    status: models.Status
    decided_by: list[str]
    reason: str | None
    policy_version: str


class ExecutionEvent(Answer):
    """The claim to run the approved call."""

    kind: Literal["execution"]
    at: datetime
    claim_id: str


class OutcomeEvent(Answer):
    """What the agent reported after running the call."""

    kind: Literal["outcome"]
    at: datetime
    claim_id: str
    status: Literal["ok", "error"]
    detail: str


Event = Annotated[
    CreatedEvent | AttemptEvent | TimerEvent | SettlementEvent | ExecutionEvent | OutcomeEvent,
    Field(discriminator="kind"),
]


class ApprovalEvents(Answer):
    """``GET /v1/approvals/{approval_id}/events``, oldest first."""

    approval_id: str
    events: list[Event]


# -- lead-facing turns (approvals/resource.py: turn) -------------------------------------------


class EvaluatedCheck(Answer):
    """One guard check the verdict went through."""

    rule: str
    outcome: Literal["allow", "refuse", "escalate"]
    reason_code: str
    detail: str


class TurnTool(Answer):
    name: str
    call_id: str


class TurnVerdict(Answer):
    """The verdict on a lead-facing turn's tool call (never a question to the lead)."""

    verdict: Literal["allow", "refuse", "escalate"]
    rule: str
    reason_code: str
    message: str
    approval_id: str | SkipJsonSchema[None] = Field(
        None, description="Only for escalate: the internal approval that decides."
    )
    approval_status: models.Status | SkipJsonSchema[None] = Field(
        None, description="That approval's status, in the answer of POST /v1/turns."
    )
    evaluated: list[EvaluatedCheck]
    session_id: str
    request_id: str
    channel: str
    lead_id: str
    tool: TurnTool
    inputs_sha256: str
    policy_version: str
    at: datetime


class GrantConstraintAnswer(Answer):
    kind: Literal["exactly", "any", "at_most"]
    value: JsonValue = Field(
        description="exactly: the value a call must carry; at_most: the largest number; any: null."
    )


class GrantGrantedBy(Answer):
    slack_user_id: str
    name: str | None


class GrantAnswer(Answer):
    """A standing grant (docs/grants.md): later calls that meet it are approved at once."""

    grant_id: Annotated[str, Field(pattern=r"^grt_[0-9a-f]{24}$")]
    approval_id: str = Field(description="The approval whose approval made the grant.")
    agent: str
    scope: models.GrantScope
    session_id: str | None = Field(
        description="The session a session grant is for; null for agent."
    )
    tool_name: str
    rule: str
    constraints: dict[str, GrantConstraintAnswer] = Field(
        description="One per argument: a call with another set of arguments does not match."
    )
    uses: int
    max_uses: int
    granted_by: GrantGrantedBy
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None


class GrantList(Answer):
    """``GET /v1/grants``: the calling agent's live standing grants, newest first."""

    grants: list[GrantAnswer]


class TurnHistory(Answer):
    """``GET /v1/turns?session_id=``: the session's verdicts."""

    session_id: str
    turns: list[TurnVerdict]


# -- the error body (bot/http_errors.py) -------------------------------------------------------


class FieldProblem(Answer):
    field: str = Field(description="The field's path, dot-separated, or (body).")
    message: str


class ClaimHeld(Answer):
    claim_id: str
    claimed_at: datetime


class Problem(Answer):
    code: str = Field(description="Machine-readable, e.g. invalid_request, conflict, too_large.")
    message: str
    fields: list[FieldProblem]
    claim: ClaimHeld | SkipJsonSchema[None] = Field(
        None, description="already_claimed: the claim that holds the execution."
    )
    status: models.Status | SkipJsonSchema[None] = Field(
        None, description="not_approved: the approval's status."
    )
    valid_until: datetime | SkipJsonSchema[None] = Field(
        None, description="decision_lapsed: when the approval stopped being valid."
    )
    arguments_sha256: str | SkipJsonSchema[None] = Field(
        None, description="not_these_arguments: the hash of the arguments approved to run."
    )
    called_again_as: str | SkipJsonSchema[None] = Field(
        None, description="called_again: the approval of the call again that runs the edit."
    )


class ErrorBody(Answer):
    """Every 4xx of the agent API (and the rare logged 500)."""

    error: Problem


# -- the document --------------------------------------------------------------------------------

MODELS: tuple[tuple[type[BaseModel], JsonSchemaMode], ...] = (
    (models.ApprovalRequest, "validation"),
    (models.TurnRequest, "validation"),
    (wire.CancelRequest, "validation"),
    (models.ExecutionClaim, "validation"),
    (models.OutcomeReport, "validation"),
    (ApprovalResource, "serialization"),
    (ApprovalEvents, "serialization"),
    (TurnVerdict, "serialization"),
    (TurnHistory, "serialization"),
    (GrantList, "serialization"),
    (ErrorBody, "serialization"),
)

# pydantic writes JsonValue as {} (any JSON); the webhook takes only I-JSON (RFC 7493), so that
# every value can be hashed and stored exactly. JSON Schema cannot tell an integer literal from
# an equal float (1e20 is taken, 100000000000000000000 is not), so the limits are said in words.
I_JSON_VALUE: dict[str, Any] = {
    "description": "Any JSON value within I-JSON (RFC 7493): integers within ±(2^53 − 1), no "
    "number beyond a double's range, strings without NUL or lone surrogates, no key twice in "
    "one object. Anything else is a 422 naming the field (400 for a key twice)."
}

# The validator of a requester / operator needs one identity, or four eyes could not be
# checked; the document says so (as "required" only: a branch that also retyped the property
# would keep generators from building the object at all)
ONE_IDENTITY = [{"required": ["slack_user_id"]}, {"required": ["email"]}]


def _components() -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The schema reference of each model (by model and mode), and every schema by name."""
    refs, top = models_json_schema(MODELS, ref_template=COMPONENTS)
    schemas: dict[str, Any] = top["$defs"]
    schemas["JsonValue"] = I_JSON_VALUE
    for name in ("Requester", "Operator"):
        schemas[name]["anyOf"] = ONE_IDENTITY
        schemas[name]["description"] += "\nNeeds slack_user_id or email (not null), or both."
    return {model.__name__: ref for (model, _), ref in refs.items()}, schemas


def _json(ref: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ref}}}


ERRORS = {
    "400": "Not JSON, or a key twice in one object (code malformed_json).",
    "401": "No bearer token, or not one of an agent's (code unauthorized).",
    "404": "No approval with that id for this agent (code not_found).",
    "409": "Already settled, or the ids are bound to other content (never a silent rebind).",
    "409 claim": "Not executed: already_claimed (error.claim names the claim holding it), "
    "not_approved (error.status), decision_lapsed (error.valid_until: ask again) or "
    "not_these_arguments (error.arguments_sha256: the hash of what was approved to run; after "
    "an edit a claim must name it) or called_again (error.called_again_as: the edit runs as "
    "that approval).",
    "409 outcome": "not_claimed (no claim with that idempotency_key) or "
    "outcome_already_reported (another outcome is stored).",
    "413": f"The body is over {wire.MAX_BODY} bytes (code too_large).",
    "415": "The body is not application/json (code unsupported_media_type).",
    "422": "A field is invalid, named in error.fields (code invalid_request, "
    "callback_not_allowed).",
}


def _operation(
    summary: str,
    answers: dict[str, dict[str, Any]],
    errors: str,
    error_ref: dict[str, Any],
    *,
    body: dict[str, Any] | None = None,
    body_required: bool = True,
    parameters: list[dict[str, Any]] | None = None,
    conflict: str | None = None,
) -> dict[str, Any]:
    """One operation: its answers, then the documented errors by status (``conflict``: the
    key of :data:`ERRORS` that says what its 409 means)."""
    responses = dict(answers)
    for status in errors.split():
        responses[status] = _json(error_ref, ERRORS[status])
    if conflict is not None:
        responses["409"] = _json(error_ref, ERRORS[conflict])
    operation: dict[str, Any] = {"summary": summary}
    if parameters:
        operation["parameters"] = parameters
    if body is not None:
        operation["requestBody"] = {
            "required": body_required,
            "content": {"application/json": {"schema": body}},
        }
    operation["responses"] = responses
    return operation


APPROVAL_ID_PARAMETER = {
    "name": "approval_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": models.APPROVAL_ID.pattern},
}


# (path step, summary, the 200 answer, request body, the ERRORS key saying what a 409 means)
_EXECUTION_STEPS = (
    (
        "execution",
        "Claim the one execution an approved call allows, before running it (within "
        "valid_until). The same idempotency_key again gets the same claim back.",
        "Claimed: run the call, checking the bound fields.",
        "ExecutionClaim",
        "409 claim",
    ),
    (
        "outcome",
        "Report what happened when the claimed call ran; the card shows it. Once; the "
        "same report again is answered as stored.",
        "Stored.",
        "OutcomeReport",
        "409 outcome",
    ),
)


def _paths(ref: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Every path of the document, in the order it lists them."""
    return {**_approval_paths(ref), **_execution_paths(ref), **_audit_and_turn_paths(ref)}


def _approval_paths(ref: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Submitting an approval, reading (or long-polling) it, and cancelling it."""
    error = ref["ErrorBody"]
    approval = ref["ApprovalResource"]
    return {
        "/v1/approvals": {
            "post": _operation(
                "Submit a tool call for a human decision (idempotent on session_id + request_id).",
                {
                    "201": _json(approval, "Created: a card is on its way to the reviewers."),
                    "200": _json(approval, "The same ids and the same content: the approval."),
                },
                "400 401 409 413 415 422",
                error,
                body=ref["ApprovalRequest"],
            )
        },
        "/v1/approvals/{approval_id}": {
            "get": _operation(
                "The approval; with wait, long-poll until it is settled.",
                {"200": _json(approval, "The approval (still pending when wait ran out).")},
                "401 404 422",
                error,
                parameters=[
                    APPROVAL_ID_PARAMETER,
                    {
                        "name": "wait",
                        "in": "query",
                        "required": False,
                        "description": "Seconds to wait for the settlement.",
                        "schema": {"type": "number", "minimum": 0, "maximum": wire.MAX_WAIT},
                    },
                ],
            )
        },
        "/v1/approvals/{approval_id}/cancel": {
            "post": _operation(
                "The agent withdraws the request; the card says so.",
                {"200": _json(approval, "Cancelled.")},
                "400 401 404 409 413 415 422",
                error,
                body=ref["CancelRequest"],
                body_required=False,
                parameters=[APPROVAL_ID_PARAMETER],
            )
        },
    }


def _execution_paths(ref: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Claiming the one run an approved call allows, and reporting its outcome."""
    return {
        f"/v1/approvals/{{approval_id}}/{step}": {
            "post": _operation(
                summary,
                {"200": _json(ref["ApprovalResource"], answer)},
                "400 401 404 413 415 422",
                ref["ErrorBody"],
                body=ref[body],
                parameters=[APPROVAL_ID_PARAMETER],
                conflict=conflict,
            )
        }
        for step, summary, answer, body, conflict in _EXECUTION_STEPS
    }


def _audit_and_turn_paths(ref: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """An approval's audit, lead-facing turns, and this document itself."""
    error = ref["ErrorBody"]
    return {
        "/v1/approvals/{approval_id}/events": {
            "get": _operation(
                "The audit: creation, every click attempt, reminders, escalations, the "
                "settlement, the claim to run the call and its outcome.",
                {"200": _json(ref["ApprovalEvents"], "The events, oldest first.")},
                "401 404",
                error,
                parameters=[APPROVAL_ID_PARAMETER],
            )
        },
        "/v1/turns": {
            "post": _operation(
                "A lead-facing turn's tool call, for a verdict: allow, refuse, or escalate to "
                "an internal reviewer.",
                {"200": _json(ref["TurnVerdict"], "The verdict (stored for the audit).")},
                "400 401 409 413 415 422",
                error,
                body=ref["TurnRequest"],
            ),
            "get": _operation(
                "The verdicts of one session.",
                {"200": _json(ref["TurnHistory"], "The session's verdicts.")},
                "401 422",
                error,
                parameters=[
                    {
                        "name": "session_id",
                        "in": "query",
                        "required": True,
                        "schema": {"type": "string", "minLength": 1, "maxLength": 200},
                    }
                ],
            ),
        },
        "/v1/grants": {
            "get": _operation(
                "The agent's live standing grants (read only: people make and revoke them, in "
                "Slack or with countersign grants).",
                {"200": _json(ref["GrantList"], "The live grants, newest first.")},
                "401",
                error,
            )
        },
        DOCUMENT_PATH: {
            "get": {
                "summary": "This document.",
                "security": [],
                "responses": {
                    "200": {
                        "description": "OpenAPI 3.1",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            }
        },
    }


@functools.cache
def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of wire contract v1 (built once; treat it as read-only)."""
    refs, schemas = _components()
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Countersign agent API",
            "version": "1",
            "description": "Wire contract v1: out-of-band human approval of AI-agent tool calls. "
            f"JSON (UTF-8), bodies up to {wire.MAX_BODY} bytes; every error is "
            '{"error": {"code", "message", "fields": [{"field", "message"}]}}.',
        },
        "security": [{"agentToken": []}],
        "paths": _paths(refs),
        "components": {
            "schemas": dict(sorted(schemas.items())),
            "securitySchemes": {
                "agentToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The agent's token (its token_env in the policy file); the "
                    "agent's name comes from it, never from the body.",
                }
            },
        },
    }


@functools.cache
def render() -> str:
    """The document as committed in docs/openapi.json (stable key order, final newline)."""
    return json.dumps(document(), indent=2, ensure_ascii=False) + "\n"


async def _serve(request: web.Request) -> web.Response:
    return web.Response(text=render(), content_type="application/json")


def add_routes(app: web.Application) -> None:
    """Serve the document at ``GET /v1/openapi.json``, without a token (it holds no secret)."""
    app.router.add_get(DOCUMENT_PATH, _serve)


def main() -> None:
    """``python -m bot.openapi > docs/openapi.json``"""
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
