"""Frozen, keyword-only models of the approval domain.

Rows become these models only in the store modules; everything above the store works with them.
The wire input (:class:`ApprovalRequest`) is validated strictly: unknown fields are errors, so a
typo in an agent's payload is a 422 naming the field instead of a silently ignored value.
"""

from __future__ import annotations

import json
import re
import unicodedata
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal, Self, TypeVar, assert_never

from pydantic import Field, JsonValue, StringConstraints, TypeAdapter, model_validator

from approvals import hashing

# the identity types live in approvals.identity; importable from here as they always were
from approvals.identity import (
    EMAIL,
    EMAIL_PATTERN,
    SLACK_USER_ID,
    Email,
    Frozen,
    LeadChannel,
    SlackUserId,
)

__all__ = [
    "APPROVAL_ID",
    "EMAIL",
    "EMAIL_PATTERN",
    "PAGE_SERVICES",
    "SKIP_IF_CLAIMED",
    "SKIP_IF_REPORTED",
    "SLACK_USER_ID",
    "TURN_REQUEST_PREFIX",
    "Approval",
    "ApprovalRequest",
    "Attempt",
    "AttemptOutcome",
    "AuditEvent",
    "Callback",
    "CardRef",
    "CardState",
    "CardStatus",
    "CheckDeciders",
    "Decider",
    "Delivery",
    "Edit",
    "Email",
    "Escalate",
    "Execution",
    "ExecutionClaim",
    "ExecutionOutcome",
    "Framework",
    "Frozen",
    "Grant",
    "GrantConstraint",
    "GrantLimits",
    "GrantScope",
    "GrantTerms",
    "GrantUse",
    "Lead",
    "LeadWindow",
    "LogLine",
    "Operator",
    "OutboxEntry",
    "OutboxItem",
    "OutboxKind",
    "OutcomeReport",
    "Outsider",
    "Page",
    "PageEvent",
    "PageOnCall",
    "PageService",
    "PasskeyUse",
    "PostCard",
    "Remind",
    "Requester",
    "Required",
    "Severity",
    "SlackUserId",
    "Status",
    "TimerEntry",
    "TimerKind",
    "ToolCall",
    "TurnKey",
    "TurnRecord",
    "TurnRequest",
    "Unless",
    "UpdateCard",
    "Work",
    "card_update",
    "lead_key",
    "page_entry",
    "timer_outbox",
    "timer_outcome",
    "work_from_row",
    "work_payload",
]


class Status(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


# "mcp": the MCP gateway of the client distribution (countersign-mcp-gateway), for any MCP client
Framework = Literal["generic", "maf", "ag-ui", "langgraph", "openai-agents", "claude-code", "mcp"]
# the on-call services an escalation may page (bot/paging.py speaks to each)
PageService = Literal["pagerduty", "opsgenie"]
PAGE_SERVICES: tuple[PageService, ...] = ("pagerduty", "opsgenie")
# PagerDuty's four severities (Opsgenie's priorities are mapped from them at the edge)
Severity = Literal["critical", "error", "warning", "info"]
PageEvent = Literal["trigger", "resolve"]

APPROVAL_ID = re.compile(r"^apr_[0-9a-f]{24}$")  # what service.new_approval_id mints
# request ids of approvals created by a guard's escalation of a lead-facing turn; reserved, so
# an agent can neither pre-empt such an approval nor dress a plain one up as lead-facing
TURN_REQUEST_PREFIX = "turn:"
Identifier = Annotated[str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True)]


class ToolCall(Frozen):
    name: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    call_id: Identifier
    arguments: dict[str, JsonValue] = Field(default_factory=dict)


class Requester(Frozen):
    """Who asked. At least one identity is needed, or four eyes could not be checked."""

    slack_user_id: SlackUserId | None = None
    email: Email | None = None
    name: Annotated[str, StringConstraints(max_length=200)] | None = None

    @model_validator(mode="after")
    def _has_identity(self) -> Self:
        if self.slack_user_id is None and self.email is None:
            who = type(self).__name__.lower()
            raise ValueError(f"{who} needs slack_user_id or email (or both)")
        return self


class Outsider(Frozen):
    """Someone outside the company (a lead) who must never decide: compared by id and e-mail."""

    slack_user_id: SlackUserId | None = None
    email: Email | None = None


class ApprovalRequest(Frozen):
    """The body of ``POST /v1/approvals`` (wire contract v1). The agent comes from the token."""

    request_id: Identifier
    session_id: Identifier
    tool: ToolCall
    requester: Requester
    summary: Annotated[str, StringConstraints(max_length=2000)] = ""
    context: dict[str, JsonValue] = Field(default_factory=dict)
    callback_url: Annotated[str, StringConstraints(max_length=2000)] | None = None
    expires_in: Annotated[int, Field(ge=1, strict=True)] | None = None  # true is not 1 s
    framework: Framework = "generic"


class Required(Frozen):
    role: str
    approvals: int = 1
    deny_reason: bool = False  # a Deny needs a written reason (the modal enforces it)
    any_of: tuple[str, ...] = ()  # further roles that may decide as well
    # "passkey": an approval counts only when confirmed with a passkey (docs/step-up.md)
    verify: Literal["passkey"] | None = None

    @property
    def roles(self) -> tuple[str, ...]:
        return (self.role, *self.any_of)


class Decider(Frozen):
    """A person who decided, as Slack told us at click time, and the version of the arguments
    their decision was for (``arguments_sha256``: the requested ones, or an edit's; None on
    votes recorded before edits existed, all of them for the requested arguments)."""

    slack_user_id: str
    name: str | None = None
    email: str | None = None
    at: datetime
    arguments_sha256: str | None = None
    # the passkey that confirmed this vote, on a rule with verify: passkey
    passkey: PasskeyUse | None = None


class PasskeyUse(Frozen):
    """A vote confirmed with a passkey: which credential (its id, base64url) and when."""

    credential_id: Annotated[str, StringConstraints(min_length=1, max_length=1400)]
    at: datetime


class Edit(Frozen):
    """A reviewer's edit of the call's arguments (docs/edits.md): the edited arguments, as the
    RFC 8785 text that was hashed (``arguments_jcs``) and parsed from it, their SHA-256, the
    change as an RFC 6902 JSON Patch against the requested arguments, who edited and when, and
    their note. ``number`` counts the approval's edits (1 for the first)."""

    number: Annotated[int, Field(ge=1)]
    arguments: dict[str, JsonValue]
    arguments_jcs: str
    arguments_sha256: str
    patch: tuple[dict[str, JsonValue], ...]
    by: Decider
    at: datetime
    note: str | None = None
    policy_version: str  # the policy the edited call was routed by


GrantScope = Literal["session", "agent"]  # the same agent session, or any session of the agent


class GrantLimits(Frozen):
    """A rule's ``grants:`` as an approval keeps it (the policy's model is not imported here)."""

    max_seconds: int
    max_uses: int
    scopes: tuple[GrantScope, ...]


ConstraintKind = Literal["exactly", "any", "at_most"]


class GrantConstraint(Frozen):
    """What a later call must carry in one argument to use a grant: ``exactly`` the granted
    call's value (``value``, compared as RFC 8785 JSON), ``any`` value, or a number ``at_most``
    ``value``."""

    kind: ConstraintKind
    value: JsonValue = None


class GrantTerms(Frozen):
    """What the granter chose in the form: the scope, for how long and for how many more calls,
    and per argument of the granted call the kind of constraint (``exactly`` unless chosen)."""

    scope: GrantScope
    seconds: int
    uses: int
    kinds: dict[str, ConstraintKind] = Field(default_factory=dict)


class Grant(Frozen):
    """A standing grant (docs/grants.md): made by ``granted_by`` on approving ``approval_id``,
    it approves at once up to ``max_uses`` later calls of ``tool_name`` by ``agent`` (in
    ``session_id`` for the ``session`` scope) whose arguments meet ``constraints`` (one per
    argument: a call with another set of arguments does not match) and that the policy still
    routes to ``rule`` with the requirement it had (``requirement_sha256``), until
    ``expires_at`` or a revocation; the granter's authority is checked again at every use."""

    grant_id: str
    approval_id: str
    agent: str
    scope: GrantScope
    session_id: str
    tool_name: str
    rule: str
    requirement_sha256: str
    required: Required
    constraints: dict[str, GrantConstraint]
    max_uses: int
    uses: int = 0
    granted_by: Decider
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None
    revoked_by: str | None = None  # the Slack id of who revoked it, or "cli"
    policy_version: str

    def state(self, now: datetime) -> Literal["live", "revoked", "expired", "used_up"]:
        """Whether it can still be used at ``now``, or why not."""
        if self.revoked_at is not None:
            return "revoked"
        if self.uses >= self.max_uses:
            return "used_up"
        if now >= self.expires_at:
            return "expired"
        return "live"


class GrantUse(Frozen):
    """On an approval approved by a grant: which grant, which use of it, of how many."""

    id: str
    use: int
    of: int


class CardRef(Frozen):
    channel: str
    ts: str


CardStatus = Literal["pending", "posted", "failed"]


class CardState(Frozen):
    """Where the approval's card stands in Slack, as the resource shows it: ``pending`` until
    it is posted (``error`` then says why the last try failed, if one did), ``posted`` (its
    ``channel`` and ``ts``), or ``failed`` when its post was dead-lettered (``error`` says why;
    ``countersign redrive`` posts it again)."""

    status: CardStatus = "pending"
    channel: str | None = None
    ts: str | None = None
    error: str | None = None


DeliveryStatus = Literal["none", "pending", "delivered", "dead_letter"]


class Delivery(Frozen):
    """State of the callback to the agent; ``none`` when the agent long-polls instead."""

    status: DeliveryStatus = "none"
    attempts: int = 0
    last_error: str | None = None
    delivered_at: datetime | None = None


# What a caller may choose as its claim's idempotency key: printable, no NUL (stored as text).
ClaimKey = Annotated[
    str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")
]
OUTCOME_DETAIL_LIMIT = 500  # characters of an outcome's text kept; longer is refused


SHA256_HEX = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class ExecutionClaim(Frozen):
    """The body of ``POST /v1/approvals/{id}/execution``: claim the one run an approval allows
    (of the arguments whose SHA-256 is ``arguments_sha256``: needed once the call was edited,
    checked whenever given)."""

    idempotency_key: ClaimKey
    arguments_sha256: SHA256_HEX | None = None


class OutcomeReport(Frozen):
    """The body of ``POST /v1/approvals/{id}/outcome``: what happened when the tool ran."""

    idempotency_key: ClaimKey  # the claim's, so that only the claimer reports
    status: Literal["ok", "error"]
    detail: Annotated[str, StringConstraints(max_length=OUTCOME_DETAIL_LIMIT)] = ""


class ExecutionOutcome(Frozen):
    status: Literal["ok", "error"]
    detail: str = ""
    reported_at: datetime


class Execution(Frozen):
    """The one claim to run an approved call, and the outcome reported after it ran."""

    claim_id: str
    idempotency_key: str
    claimed_at: datetime
    outcome: ExecutionOutcome | None = None


class Approval(Frozen):
    approval_id: str
    status: Status
    agent: str
    request_id: str
    session_id: str
    tool: ToolCall
    arguments_sha256: str
    # tool.arguments as the RFC 8785 text that was hashed: every answer embeds it verbatim, so
    # the agent gets back the very bytes of arguments_sha256 (the parsed dict above is for the
    # card and the guards). Written from tool.arguments when not given (see _arguments_text).
    arguments_jcs: str = ""
    requester: Requester
    summary: str = ""
    context: dict[str, JsonValue] = Field(default_factory=dict)
    callback_url: str | None = None
    framework: Framework = "generic"
    required: Required
    rule: str
    why: str = ""  # the conditions that made the rule match, e.g. "arguments.amount 12000 > 10000"
    decided_by: tuple[Decider, ...] = ()
    reason: str | None = None
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None = None
    policy_version: str
    fingerprint: str
    card: CardRef | None = None
    card_state: CardState = CardState()
    delivery: Delivery = Delivery()
    outsiders: tuple[Outsider, ...] = ()
    escalated_at: datetime | None = None  # when an escalation to on-call fired
    # the services its escalation ladder may page (named by its timers when it was created),
    # and those a page was queued for so far (a trigger row in the outbox)
    pages: tuple[PageService, ...] = ()
    paged: tuple[PageService, ...] = ()
    argument_schemas: tuple[str, ...] = ()  # the tools: globs whose schema the arguments passed
    # the rule's, kept with the approval: seconds after the decision a claim to run it is
    # accepted, and after a claim by when an outcome is expected
    valid_for: int = 900
    report_within: int = 3600
    # where the card goes: the rule's channel or the reviewer channel, as the policy said at
    # creation (None on approvals from before: the reviewer channel in force)
    review_channel: str | None = None
    execution: Execution | None = None
    # the argument paths reviewers may change (the rule's editable: as the policy said at
    # creation, or at the latest edit), and that edit
    editable: tuple[str, ...] = ()
    edit: Edit | None = None
    # a call again with exactly an edit's arguments, approved at once on that edit: the
    # approval it stands for (docs/edits.md); and on that one, the call again that took its place
    edit_of: str | None = None
    called_again_as: str | None = None
    # the rule's grants: (docs/grants.md) as the policy said at creation; and on an approval
    # approved at once by a standing grant, that grant and use
    grants: GrantLimits | None = None
    grant: GrantUse | None = None
    # approved at once by a rule that decides by itself (decide: approve): that rule's name
    decided_by_policy: str | None = None

    @property
    def run_arguments(self) -> dict[str, JsonValue]:
        """What may run: the latest edit's arguments, else the requested ones."""
        return self.edit.arguments if self.edit is not None else self.tool.arguments

    @property
    def run_sha256(self) -> str:
        """The hash of what may run: every vote, claim and decision is bound to it."""
        return self.edit.arguments_sha256 if self.edit is not None else self.arguments_sha256

    @property
    def edit_no(self) -> int:
        """The version of the arguments: 0 as requested, n after the n-th edit."""
        return self.edit.number if self.edit is not None else 0

    @property
    def settled(self) -> bool:
        return self.status is not Status.PENDING

    @property
    def valid_until(self) -> datetime | None:
        """The last instant an approved call may be claimed to run; None unless approved."""
        if self.status is not Status.APPROVED or self.decided_at is None:
            return None
        return self.decided_at + timedelta(seconds=self.valid_for)

    def outcome_overdue(self, now: datetime) -> bool:
        """Claimed, and no outcome reported within ``report_within`` of the claim."""
        execution = self.execution
        return (
            execution is not None
            and execution.outcome is None
            and now >= execution.claimed_at + timedelta(seconds=self.report_within)
        )

    @property
    def lead_facing(self) -> bool:
        """Created by a guard's escalation of a lead-facing turn (never by an agent's body)."""
        return self.request_id.startswith(TURN_REQUEST_PREFIX)

    @model_validator(mode="before")
    @classmethod
    def _arguments_text(cls, data: Any) -> Any:
        """Keep ``arguments_jcs`` when it is the text of ``tool.arguments``; write it from them
        when it is missing, or stale (an ``evolve`` that changed the tool)."""
        if not isinstance(data, dict):
            return data
        tool = data.get("tool")
        arguments = tool.arguments if isinstance(tool, ToolCall) else None
        if isinstance(tool, dict):
            arguments = tool.get("arguments", {})
        if not isinstance(arguments, dict):
            return data  # the field validation names what is wrong
        text = data.get("arguments_jcs")
        if isinstance(text, str) and text and _same_json(_loads_or_none(text), arguments):
            return data
        return {**data, "arguments_jcs": hashing.canonical_json(arguments).decode("utf-8")}


def _loads_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _same_json(one: Any, other: Any) -> bool:
    """Equal as JSON values: ``1`` and ``1.0`` are one number, ``true`` is not ``1``."""
    if isinstance(one, bool) or isinstance(other, bool):
        return type(one) is type(other) and one == other
    if isinstance(one, dict):
        return (
            isinstance(other, dict)
            and one.keys() == other.keys()
            and all(_same_json(value, other[key]) for key, value in one.items())
        )
    if isinstance(one, list):
        return (
            isinstance(other, list)
            and len(one) == len(other)
            and all(_same_json(a, b) for a, b in zip(one, other, strict=True))
        )
    if isinstance(one, int | float) and isinstance(other, int | float):  # bools handled above
        return one == other
    return type(one) is type(other) and one == other


class AttemptOutcome(StrEnum):
    """Why a click counted or not. Every click is stored with one of these."""

    ACCEPTED = "accepted"
    SELF = "self"
    NO_AUTHORITY = "no_authority"
    LOOKUP_FAILED = "lookup_failed"
    STALE = "stale"
    EXPIRED = "expired"
    OVER_LIMIT = "over_limit"  # holds the role, but its ceiling is below this call
    OUTSIDE_ORGANISATION = "outside_organisation"  # a user of another org (Slack Connect)
    GUEST = "guest"  # a guest account, for a role that does not admit guests
    DUPLICATE = "duplicate"  # already counted towards the quorum
    VOTE_DROPPED = "vote_dropped"  # counted once, but its voter no longer held it at settlement
    EDITED = "edited"  # an approval of a version of the arguments an edit has replaced
    INVALID_EDIT = "invalid_edit"  # an edit no reviewer's form could send (a path not editable)
    INVALID_GRANT = "invalid_grant"  # a grant no reviewer's form could send (past the policy)
    # an approval on a verify: passkey rule that would count: a confirmation link was given
    PASSKEY_ASKED = "passkey_asked"
    # an edit made on such a rule: the editor's approval waits for their passkey
    EDITED_ASKING_PASSKEY = "edited_asking_passkey"
    # a passkey confirmation that failed (the wrong person, assertion, link or call)
    PASSKEY_REFUSED = "passkey_refused"


class Attempt(Frozen):
    approval_id: str
    slack_user_id: str
    email: str | None = None
    name: str | None = None
    action: Literal["approve", "deny", "edit"]
    outcome: AttemptOutcome
    detail: str = ""
    at: datetime


class OutboxKind(StrEnum):
    """The kinds of work the outbox holds: the ``kind`` column of its rows, the key of the
    relay's handlers and of the delivery metrics."""

    POST_CARD = "post_card"
    UPDATE_CARD = "update_card"
    CALLBACK = "callback"
    REMIND = "remind"  # a reminder in the card's thread
    ESCALATE = "escalate"  # a post in the on-call channel linking the card
    PAGE = "page"  # one event to a paging service: a trigger, or a resolve once settled
    CHECK_DECIDERS = "check_deciders"  # the core's, queued by earlier versions: can anyone decide?
    LOG_LINE = "log_line"  # one line in a rule's log channel: a call the policy approved


# A card update due at a deadline is needless once the approval has moved past what it would
# show: it says when to skip it.
Unless = Literal["claimed", "reported"]
SKIP_IF_CLAIMED: Unless = "claimed"  # the lapse of an approval: it was claimed in time
SKIP_IF_REPORTED: Unless = "reported"  # the outcome's deadline: the outcome came


class PostCard(Frozen):
    """Post the approval's card in its review channel."""

    kind: Literal["post_card"] = "post_card"


class UpdateCard(Frozen):
    """Re-render the approval's card from its state then; skipped ``unless`` the approval has
    not been claimed (or its outcome reported) by then (see :meth:`needless`)."""

    kind: Literal["update_card"] = "update_card"
    unless: Unless | None = None

    def needless(self, approval: Approval) -> bool:
        """Whether this update would show nothing new on ``approval``'s card."""
        execution = approval.execution
        match self.unless:
            case None:
                return False
            case "claimed":
                return execution is not None
            case "reported":
                return execution is not None and execution.outcome is not None
            case unreachable:
                assert_never(unreachable)


class Callback(Frozen):
    """Deliver the settled approval to its agent: ``body`` is the resource as rendered at
    settlement (every redelivery sends these very bytes), ``agent`` whose secret signs it."""

    kind: Literal["callback"] = "callback"
    url: str
    body: str
    agent: str


class Remind(Frozen):
    """A reminder in the card's thread, from the ladder's ``step``."""

    kind: Literal["remind"] = "remind"
    step: int


class Escalate(Frozen):
    """A post in the on-call channel linking the card, from the ladder's ``step``."""

    kind: Literal["escalate"] = "escalate"
    step: int


class PageOnCall(Frozen):
    """One paging event for one service: ``trigger`` (with the severity and the ladder's step
    that paged) or ``resolve`` (``again``: a repeated resolve the service asked for). Holds no
    secret and no argument: the handler reads the approval and the service's key when it
    sends."""

    kind: Literal["page"] = "page"
    service: PageService
    event: PageEvent
    severity: Severity | None = None
    step: int | None = None
    again: bool = False


class CheckDeciders(Frozen):
    """The core's own work, which earlier versions queued once the card was posted: when the
    roles' user groups, resolved now, leave nobody but the requester who could decide, escalate
    at once. Nothing queues it any more (the check runs in the card's own delivery); rows a
    database still holds are run."""

    kind: Literal["check_deciders"] = "check_deciders"


class LogLine(Frozen):
    """One line in ``channel`` saying that the policy approved the call (a rule that decides by
    itself and names a ``log_channel``): there is no card to show it."""

    kind: Literal["log_line"] = "log_line"
    channel: str


Work = Annotated[
    PostCard | UpdateCard | Callback | Remind | Escalate | PageOnCall | CheckDeciders | LogLine,
    Field(discriminator="kind"),
]
"""What an outbox row asks the relay to do: one model per :class:`OutboxKind`."""

_WORK: TypeAdapter[Work] = TypeAdapter(Work)
W = TypeVar(
    "W", PostCard, UpdateCard, Callback, Remind, Escalate, PageOnCall, CheckDeciders, LogLine
)


def work_from_row(kind: str, payload: dict[str, JsonValue]) -> Work:
    """The work of a stored row: its ``kind`` column and its ``payload`` (validated; raises
    pydantic's ValidationError for a row this version cannot read)."""
    return _WORK.validate_python({**payload, "kind": kind})


def work_payload(work: Work) -> dict[str, JsonValue]:
    """The ``payload`` column of ``work`` (its kind is a column of its own): the fields that
    differ from their defaults, the shape every earlier version wrote and reads."""
    payload: dict[str, JsonValue] = work.model_dump(mode="json", exclude_defaults=True)
    return payload


class OutboxEntry(Frozen):
    """Work to do after a commit: written in the same transaction as the state change; due at
    once, or at ``due_at`` (e.g. a card update that shows an outcome overdue)."""

    approval_id: str
    work: Work
    due_at: datetime | None = None

    @property
    def kind(self) -> OutboxKind:
        return OutboxKind(self.work.kind)


def card_update(
    approval_id: str, due_at: datetime | None = None, *, unless: Unless | None = None
) -> OutboxEntry:
    """The outbox entry that re-renders an approval's card from its state then (now, or at
    ``due_at``: a deadline the card shows once it has passed, skipped ``unless`` the approval
    has been claimed or its outcome reported by then)."""
    return OutboxEntry(approval_id=approval_id, work=UpdateCard(unless=unless), due_at=due_at)


TimerKind = Literal["remind", "escalate"]


class Page(Frozen):
    """Whom an escalation pages, and how loudly: fixed when its approval is created."""

    services: tuple[PageService, ...]
    severity: Severity = "warning"


class TimerEntry(Frozen):
    """A reminder or escalation due at ``due_at`` (a row; fires once); an escalation may page."""

    approval_id: str
    kind: TimerKind
    step: int
    due_at: datetime
    page: Page | None = None

    @property
    def outcome(self) -> str:
        """What the audit calls this timer once it fired."""
        return timer_outcome(self.kind)


def timer_outcome(kind: TimerKind) -> Literal["reminded", "escalated"]:
    """The audit's word for a fired timer of ``kind`` (the API's events and the export)."""
    return "reminded" if kind == "remind" else "escalated"


def timer_outbox(fired: tuple[TimerEntry, ...] | list[TimerEntry]) -> list[OutboxEntry]:
    """What fired timers ask the relay to do (an escalation also re-renders the card, and
    triggers a page in each service it names: one row each, so one service's outage never
    holds back the other's page)."""
    entries = []
    for t in fired:
        chase: Remind | Escalate = (
            Remind(step=t.step) if t.kind == "remind" else Escalate(step=t.step)
        )
        entries.append(OutboxEntry(approval_id=t.approval_id, work=chase))
        if t.kind == "escalate":
            entries.append(card_update(t.approval_id))
            if t.page is not None:
                entries += [
                    page_entry(t.approval_id, service, "trigger", t.page.severity, t.step)
                    for service in t.page.services
                ]
    return entries


def page_entry(
    approval_id: str,
    service: PageService,
    event: PageEvent,
    severity: Severity | None = None,
    step: int | None = None,
    *,
    again_at: datetime | None = None,
) -> OutboxEntry:
    """One paging event for the relay (see :class:`PageOnCall`); ``again_at``: a repeated
    resolve, due then."""
    work = PageOnCall(
        service=service, event=event, severity=severity, step=step, again=again_at is not None
    )
    return OutboxEntry(approval_id=approval_id, work=work, due_at=again_at)


class OutboxItem(Frozen):
    """An outbox row claimed by a relay."""

    id: int
    approval_id: str
    work: Work
    attempts: int  # attempts whose outcome was recorded (failed, or the one that succeeded)
    # times claimed without being handed back untried, this claim included: above 1, an
    # earlier claim may have delivered without recording it (a crash, a shutdown mid-call)
    claims: int
    # this claim's number, never reused: what the relay records applies only while it is the
    # row's latest claim (a claim whose lease lapsed and was taken since changes nothing)
    claim_no: int
    created_at: datetime

    @property
    def kind(self) -> OutboxKind:
        return OutboxKind(self.work.kind)

    def work_as(self, kind: type[W]) -> W:
        """This row's work as ``kind``, the one its handler does (TypeError if it is not)."""
        if not isinstance(self.work, kind):
            raise TypeError(f"a {kind.__name__} handler was given {self.work.kind} work")
        return self.work

    @property
    def maybe_delivered_before(self) -> bool:
        return self.attempts > 0 or self.claims > 1


Channel = LeadChannel


# A phone number as agents write it: an optional leading +, digits and the usual separators.
PHONE = re.compile(r"^[\s().\-/]*\+?[\d\s().\-/]+$")
PHONE_DIGITS = range(7, 16)  # E.164 allows at most 15 digits; fewer than 7 is no phone number


def lead_key(lead_id: str) -> str:
    """The one spelling of a lead's identity, for per-lead limits and "never decides".

    The id is first folded to Unicode NFKC (full-width letters and digits, a full-width at sign,
    no-break and thin spaces become their plain forms), then: shaped like an e-mail → that
    e-mail lower-cased; shaped like a phone number → ``+`` and its digits; anything else → the
    id exactly as given (an opaque CRM id may be case-sensitive). Folding can only merge
    spellings, never split one lead in two: a limit counted by this key can't be dodged by
    writing the same address or number another way.
    """
    folded = unicodedata.normalize("NFKC", lead_id).strip()
    if EMAIL.fullmatch(folded):
        return folded.lower()
    if PHONE.fullmatch(folded):
        # \d is any decimal digit (Arabic-Indic ones too): each becomes its ASCII digit
        digits = "".join(str(unicodedata.decimal(c)) for c in folded if c.isdecimal())
        if len(digits) in PHONE_DIGITS:
            return "+" + digits
    return lead_id


class Lead(Frozen):
    """The outside party of a lead-facing conversation."""

    id: Identifier
    name: Annotated[str, StringConstraints(max_length=200)] | None = None
    phone: Annotated[str, StringConstraints(max_length=40)] | None = None
    email: Email | None = None
    slack_user_id: SlackUserId | None = None  # a lead in a shared (Slack Connect) channel

    @property
    def key(self) -> str:
        """The lead as per-lead limits count it (:func:`lead_key` of its id)."""
        return lead_key(self.id)

    def outsiders(self) -> tuple[Outsider, ...]:
        """Every identity the lead may have in Slack: the given Slack id and e-mail, and the
        lead id itself when it is shaped like a Slack id or (by :func:`lead_key`) an e-mail (an
        e-mail channel's natural lead id). Each must never decide."""
        slack_ids = {i for i in (self.slack_user_id, self.id) if i and SLACK_USER_ID.fullmatch(i)}
        keys = {lead_key(e) for e in (self.email, self.id) if e}
        emails = {k for k in keys if EMAIL.fullmatch(k)}
        return tuple(
            [Outsider(slack_user_id=i) for i in sorted(slack_ids)]
            + [Outsider(email=e) for e in sorted(emails)]
        )


class Operator(Requester):
    """The internal person responsible for the agent or the conversation (an identity like a
    requester's: it becomes the requester of the turn's escalation)."""


class TurnRequest(Frozen):
    """The body of ``POST /v1/turns``: a lead-facing turn's pending tool call and its facts."""

    session_id: Identifier
    request_id: Identifier
    channel: Channel
    lead: Lead
    operator: Operator | None = None
    funnel: dict[str, JsonValue] = Field(default_factory=dict)
    tool: ToolCall
    summary: Annotated[str, StringConstraints(max_length=2000)] = ""
    callback_url: Annotated[str, StringConstraints(max_length=2000)] | None = None
    expires_in: Annotated[int, Field(ge=1, strict=True)] | None = None  # true is not 1 s
    framework: Framework = "generic"


class TurnKey(Frozen):
    """What makes a turn idempotent, as for approvals: the same ids are the same turn."""

    agent: str
    session_id: str
    request_id: str


class LeadWindow(Frozen):
    """The allowed turns a per-lead limit counts: one agent's calls of one tool for one lead
    (by :func:`lead_key`, whatever the session) after ``since``."""

    agent: str
    lead_key: str
    tool_name: str
    since: datetime


class TurnRecord(Frozen):
    """One stored verdict (the audit of lead-facing turns); one per :class:`TurnKey`."""

    agent: str
    session_id: str
    request_id: str
    channel: str
    lead_id: str
    tool_name: str
    call_id: str
    inputs_sha256: str
    policy_version: str
    verdict: Literal["allow", "refuse", "escalate"]
    rule: str
    reason_code: str
    message: str
    evaluated: tuple[dict[str, str], ...]
    approval_id: str | None = None
    at: datetime

    @property
    def key(self) -> TurnKey:
        return TurnKey(agent=self.agent, session_id=self.session_id, request_id=self.request_id)

    @property
    def lead_key(self) -> str:
        """The lead as per-lead limits count it (stored beside ``lead_id`` for the index)."""
        return lead_key(self.lead_id)


AuditKind = Literal[
    "created",
    "attempt",
    "settlement",
    "timer",
    "execution",
    "outcome",
    "turn",
    "delivery",
    "edit",
    "grant",
    "passkey",
]


class AuditEvent(Frozen):
    """One line of the audit, each kind read from the table that holds it: an approval
    created, a click attempt, a settlement, a timer fired, the claim to run an approved call,
    the outcome reported, a lead-facing turn's verdict (no approval id unless it escalated), a
    callback delivered or a card posted (``delivery``, in the audit chain and its export)."""

    kind: AuditKind
    approval_id: str | None
    at: datetime
    data: dict[str, JsonValue]
