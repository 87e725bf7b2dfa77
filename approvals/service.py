"""The approval service: every use case of the core, each one state change in one transaction.

The edges (agent webhook, Slack listeners, timers) call these methods; this module knows
nothing of HTTP or Slack. Time comes from an injected clock so tests control it.
"""

from __future__ import annotations

import dataclasses
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol

from approvals import (
    call_again,
    edits,
    errors,
    frameworks,
    grants,
    hashing,
    metrics,
    models,
    policy,
    resource,
    states,
    step_up,
)
from approvals.clock import Clock, utcnow
from approvals.repository import Repository
from guards import authority

__all__ = [
    "IMMEDIATE_ESCALATION_STEP",
    "QUEUE_WINDOW",
    "UNJUDGED_COUNTED",
    "ApprovalService",
    "ApproverDirectory",
    "ClickResult",
    "Duplicate",
    "EditRefused",
    "EditResult",
    "Escalation",
    "Expired",
    "GrantRefused",
    "GrantResult",
    "GroupMembers",
    "Outdated",
    "Queue",
    "Refused",
    "RevokeResult",
    "Settled",
    "Stale",
    "Voted",
    "new_approval_id",
    "role_members",
]

log = logging.getLogger(__name__)

Action = Literal["approve", "deny"]


def new_approval_id() -> str:
    return "apr_" + secrets.token_hex(12)


def new_claim_id() -> str:
    return "exc_" + secrets.token_hex(12)


def _same_key(stored: str, given: str) -> bool:
    """Whether ``given`` is the claim's key, in constant time over its UTF-8 bytes (keys may be
    any printable text; ``compare_digest`` takes only ASCII strings)."""
    return hmac.compare_digest(stored.encode(), given.encode())


class ApproverDirectory(Protocol):
    """Fetches a clicker's facts at click time (the Slack edge implements it)."""

    async def approver(self, slack_user_id: str, usergroups: frozenset[str]) -> authority.Approver:
        """The clicker's facts; membership checked only for ``usergroups``. Never raises:
        a failed lookup is reported in ``Approver.lookup_error`` (fail closed)."""
        ...


GroupMembers = Callable[[str], Awaitable[frozenset[str] | None]]
"""A user group's members by Slack id, or None when they could not be fetched (never raises)."""


@dataclass(frozen=True)
class _ClickOutcome:
    approval: models.Approval  # as it stands after the click


class Settled(_ClickOutcome):
    """The click settled the approval."""


@dataclass(frozen=True)
class Refused(_ClickOutcome):
    """The clicker may not decide; the approval stays pending for someone who may."""

    verdict: authority.Verdict


class Stale(_ClickOutcome):
    """The approval had settled before this click."""


class Expired(_ClickOutcome):
    """The click arrived after ``expires_at``: the approval is expired, never approved."""


class Voted(_ClickOutcome):
    """The click counted towards the quorum; more approvals are needed."""


class Duplicate(_ClickOutcome):
    """This person's approval was already counted: one person never counts twice."""


class Outdated(_ClickOutcome):
    """An approval of a version of the arguments that an edit has replaced: it does not count
    (every vote is bound to one version); the card shows the edited call."""


@dataclass(frozen=True)
class EditRefused(_ClickOutcome):
    """The edit cannot apply as submitted: each problem at its field (``path``; None for the
    edit as a whole). Nothing changed."""

    problems: tuple[edits.Problem, ...]


@dataclass(frozen=True)
class GrantRefused(_ClickOutcome):
    """The grant's terms cannot be taken as submitted: each problem at its field. Nothing
    changed (the call is not approved either)."""

    problems: tuple[grants.Problem, ...]


@dataclass(frozen=True)
class RevokeResult:
    """What became of a Revoke: ``revoked`` now, or why not (``refusal``, shown to whoever
    asked); ``grant`` as it stands after it (None: no such grant)."""

    grant: models.Grant | None
    revoked: bool
    refusal: str | None = None


QUORUM_RETRIES = 25
ONE_SECOND = timedelta(seconds=1)


@dataclass(frozen=True)
class PasskeyAsked(_ClickOutcome):
    """The click would count, but its rule says ``verify: passkey``: nothing counted yet; the
    clicker confirms through ``link`` (single use, theirs only, bound to this version)."""

    link: step_up.StepUp


@dataclass(frozen=True)
class PasskeyRefused:
    """A passkey confirmation that counts nothing (``why``); recorded when its link names an
    approval (``approval``: as it stands; None for a link that names none)."""

    approval: models.Approval | None
    why: str


ClickResult = Settled | Voted | Duplicate | Refused | Stale | Expired | Outdated | PasskeyAsked
EditResult = Settled | Voted | Refused | Stale | Expired | EditRefused | PasskeyAsked
ConfirmResult = ClickResult | PasskeyRefused
VerifyPasskey = Callable[[bytes], Awaitable[models.PasskeyUse]]
"""Checks a passkey assertion against the challenge given (the edge's WebAuthn verification):
returns the passkey used, or raises :class:`~approvals.step_up.PasskeyFailed`."""
GrantResult = Settled | Refused | Stale | Expired | Outdated | GrantRefused


@dataclass(frozen=True)
class Escalation:
    """A guard's escalation of a lead-facing turn: the role that decides, the guard rule that
    escalated, and the outsiders (the lead) who must never decide."""

    role: str
    rule: str
    outsiders: tuple[models.Outsider, ...]
    why: str = ""


def _settlement_outbox(approval: models.Approval) -> list[models.OutboxEntry]:
    """What a settlement (or a quorum vote) asks the relay to do: re-render the card, call the
    agent back, show the decision's lapse, resolve the pages."""
    entries = [models.card_update(approval.approval_id)]
    if approval.callback_url and approval.settled:
        # The body is frozen now so every redelivery sends the very same bytes; it embeds the
        # arguments as the text that was hashed.
        body = resource.render(approval, with_delivery=False).decode("utf-8")
        callback = models.Callback(url=approval.callback_url, body=body, agent=approval.agent)
        entries.append(models.OutboxEntry(approval_id=approval.approval_id, work=callback))
    if approval.valid_until is not None:
        # once more when the decision lapses, to say so on the card if it was never claimed
        lapsed = approval.valid_until + timedelta(seconds=1)
        entries.append(
            models.card_update(approval.approval_id, lapsed, unless=models.SKIP_IF_CLAIMED)
        )
    if approval.settled:
        entries += _resolves(approval)
    return entries


def _resolves(approval: models.Approval) -> list[models.OutboxEntry]:
    """A resolve for every service its ladder may page, not only those paged so far: a timer
    that fires while this settlement commits was not seen by the read it started from. The
    resolve handler sends nothing for a service that no trigger was ever queued for. A service
    that wants its incident resolved once more (its settings say when) gets a second one."""
    entries = []
    for service in approval.pages:
        entries.append(models.page_entry(approval.approval_id, service, "resolve"))
        again_after = policy.resolve_again_after(service)
        if again_after is not None and approval.decided_at is not None:
            again_at = approval.decided_at + again_after
            entries.append(
                models.page_entry(approval.approval_id, service, "resolve", again_at=again_at)
            )
    return entries


IMMEDIATE_ESCALATION_STEP = -1
"""The ``step`` of the escalation timer scheduled when nobody but the requester could decide:
outside every ladder (whose rungs count from 0), so it fires once beside them."""


def _immediate_escalation(approval: models.Approval) -> models.TimerEntry:
    return models.TimerEntry(
        approval_id=approval.approval_id,
        kind="escalate",
        step=IMMEDIATE_ESCALATION_STEP,
        due_at=approval.created_at,
    )


def role_members(current: policy.Policy, name: str) -> authority.RoleMembers:
    """The role ``name`` as the policy in force defines it, in the guard's terms."""
    role = current.roles.get(name, policy.Role())  # a role removed since: nobody holds it
    return authority.RoleMembers(
        name=name,
        users=frozenset(role.users),
        usergroups=frozenset(role.usergroups),
        ceiling=role.ceiling,
        guests=role.guests,
    )


def _roles(approval: models.Approval, current: policy.Policy) -> list[authority.RoleMembers]:
    """Every role the approval accepts (the required one and its ``any_of``), as of now."""
    return [role_members(current, name) for name in approval.required.roles]


def _usergroups(roles: list[authority.RoleMembers]) -> frozenset[str]:
    return frozenset(g for role in roles for g in role.usergroups)


def _judge(
    approval: models.Approval, approver: authority.Approver, roles: list[authority.RoleMembers]
) -> authority.Verdict:
    """The guard's verdict on ``approver`` settling ``approval``, any one of ``roles`` sufficing."""
    return authority.can_decide_any(
        approver,
        authority.Person.of(approval.requester),
        roles,
        [authority.Person.of(o) for o in approval.outsiders],
        approval.run_arguments,  # an edited call is judged on what will run
    )


def _check_callback(agent: str, agent_policy: policy.AgentPolicy, url: str | None) -> None:
    if url is None:
        return
    if not policy.callback_allowed(url, agent_policy.callback_hosts):
        raise errors.CallbackNotAllowed(
            f"callback_url host is not on the allow-list of agent {agent!r}"
        )
    if agent_policy.callback_secret_env is None:
        raise errors.CallbackNotAllowed(
            f"agent {agent!r} has no callback_secret_env, so callbacks cannot be signed"
        )


@dataclass(frozen=True, kw_only=True)
class _Routing:
    """What decides a new request: the matched rule (or, for a guard's escalation, a rule that
    requires the escalation's role with no quorum, ladder or cap of its own), and why."""

    rule: policy.Rule
    name: str
    why: str
    schemas: tuple[str, ...] = ()
    outsiders: tuple[models.Outsider, ...] = ()


def _route(
    current: policy.Policy, request: models.ApprovalRequest, escalation: Escalation | None
) -> _Routing:
    """The routing of ``request``; raises InvalidArguments for arguments the rules can't judge."""
    if escalation is not None:
        return _Routing(
            rule=policy.Rule(tool=request.tool.name, require=escalation.role),
            name=escalation.rule,
            why=escalation.why,
            outsiders=escalation.outsiders,
        )
    tool = request.tool
    problems = current.argument_problems(tool.name, tool.arguments, request.context)
    if problems:
        raise errors.InvalidArguments([(p.field, p.message) for p in problems])
    matched = current.match(tool.name, tool.arguments, request.context)
    return _Routing(
        rule=matched.rule, name=matched.name, why=matched.explanation, schemas=matched.schemas
    )


@dataclass(frozen=True, kw_only=True)
class _Click:
    """One button click with the clicker's facts as fetched for it, at one instant ``at``."""

    approval_id: str
    slack_user_id: str
    action: Action | Literal["edit"]
    approver: authority.Approver
    at: datetime
    arguments_sha256: str  # the version of the arguments the click decides on
    passkey: models.PasskeyUse | None = None  # the passkey that confirmed it (verify: passkey)

    def attempt(self, outcome: models.AttemptOutcome, detail: str = "") -> models.Attempt:
        if self.passkey is not None and outcome is models.AttemptOutcome.ACCEPTED:
            # in the audit (chain and export): which passkey confirmed this vote, and when
            verified = f"verified with passkey {self.passkey.credential_id}"
            detail = f"{detail}; {verified}" if detail else verified
        return models.Attempt(
            approval_id=self.approval_id,
            slack_user_id=self.slack_user_id,
            email=self.approver.email,
            name=self.approver.name,
            action=self.action,
            outcome=outcome,
            detail=detail,
            at=self.at,
        )

    @property
    def decider(self) -> models.Decider:
        return models.Decider(
            slack_user_id=self.slack_user_id,
            name=self.approver.name,
            email=self.approver.email,
            at=self.at,
            arguments_sha256=self.arguments_sha256,
            passkey=self.passkey,
        )

    def decision(self, reason: str | None) -> states.Decision:
        decider = self.decider
        if self.action == "approve":
            return states.Approve(by=decider)
        return states.Deny(by=decider, reason=reason or None)


# The newest pending requests a queue judges for its viewer (the eligibility check runs on each).
QUEUE_WINDOW = 200
# How far the older pending requests are counted: past it the queue says "more than", so an
# App Home open costs the same with ten thousand pending as with a thousand.
UNJUDGED_COUNTED = 1000


@dataclass(frozen=True)
class Queue:
    """A person's queue: every request they may decide among the :data:`QUEUE_WINDOW` newest
    pending (newest first, uncut: the surface shows what fits and counts the rest), how many
    older pending requests were not judged for them (``unjudged``, counted up to
    :data:`UNJUDGED_COUNTED`; ``unjudged_more``: there are more than that), and what they
    requested."""

    decidable: list[models.Approval]
    unjudged: int
    requested: list[models.Approval]
    unjudged_more: bool = False


class ApprovalService:
    def __init__(
        self,
        *,
        store: Repository,
        policy: Callable[[], policy.Policy],
        clock: Clock = utcnow,
        new_id: Callable[[], str] = new_approval_id,
    ) -> None:
        self._store = store
        self._policy = policy
        self._clock = clock
        self._new_id = new_id

    def now(self) -> datetime:
        """The service's clock (the edges render deadlines against it)."""
        return self._clock()

    async def submit(
        self,
        agent: str,
        request: models.ApprovalRequest,
        *,
        escalation: Escalation | None = None,
        directory: ApproverDirectory | None = None,
    ) -> tuple[models.Approval, bool]:
        """Create the approval, or return the one these ids already made (``created=False``).

        The policy's rules decide the role, unless ``escalation`` (a guard's verdict on a
        lead-facing turn) names it. A call that a live standing grant covers is approved at
        once, on the granter's authority as ``directory`` finds it now (without a directory, no
        grant is used). Raises CallbackNotAllowed for a callback host off the agent's
        allow-list and RequestConflict when the ids are bound to different content.
        """
        current = self._policy()
        _check_callback(agent, current.agents[agent], request.callback_url)
        routing = _route(current, request, escalation)
        approval = self._new_approval(agent, request, routing, current)
        by_itself = escalation is None and routing.rule.decide == "approve"
        # (False from _decide_by_policy: these request ids exist; the stored approval answers)
        if by_itself and await self._decide_by_policy(approval, routing.rule.log_channel):
            return await self.get(approval.approval_id), True
        if escalation is None and not by_itself and any(r.editable for r in current.rules):
            again = await self._call_again(approval)
            if again is not None:
                return again, True
        if escalation is None and directory is not None and routing.rule.grants is not None:
            used = await self._use_grant(approval, routing.rule, current, directory)
            if used is not None:
                return used, True
        post_card = models.OutboxEntry(approval_id=approval.approval_id, work=models.PostCard())
        timers = self._timers(approval, routing.rule.escalation, current)
        stored, created = await self._store.create_approval(approval, [post_card], timers)
        if not created and stored.fingerprint != approval.fingerprint:
            raise errors.RequestConflict(stored.approval_id)
        if created:
            # DEBUG: one line per request on the intake path costs throughput at INFO; the
            # approvals_created_total counter and the audit record every one
            log.debug(
                "approval created",
                extra={"action": "submit", "approval_id": stored.approval_id, "agent": agent},
            )
        return stored, created

    async def _call_again(self, call: models.Approval) -> models.Approval | None:
        """``call`` approved at once, when it is the call again of an approval with edits that
        its agent's framework could not run (:mod:`approvals.call_again`); else None, and it
        goes to a human as usual. Looked for only while a rule lets reviewers edit (an edit
        made under an earlier policy then waits for a human: never a yes by default)."""
        found = await self._store.recall_candidate(
            call.agent, call.session_id, call.tool.name, call.arguments_sha256
        )
        if found is None:
            return None
        original = await self.get(found)
        now = self._clock()
        why_not = call_again.refusal(original, call, now)
        if why_not is None:
            approved = call_again.approved(original, call, now)
            entries = call_again.outbox(original, approved)
            created = await self._store.call_again(original, approved, entries)
            if created is None:
                return None  # these request ids exist already: the stored approval answers
            if created:
                metrics.EDITS_CALLED_AGAIN.inc()
                log.info(
                    "called again with edits",
                    extra={"action": "call_again", "approval_id": approved.approval_id},
                )
                return approved
            why_not = "the original was claimed, called again or lapsed meanwhile"
        log.info(
            "not a call again: a human decides",
            extra={"action": "call_again", "approval_id": found, "reason": why_not},
        )
        return None

    async def _decide_by_policy(self, call: models.Approval, log_channel: str | None) -> bool:
        """Approve ``call`` at once, by the rule it matched (``decide: approve``): no card, no
        person; delivered, claimable once and audited like any decision, and one line in the
        rule's ``log_channel`` if it names one. False when its request ids exist already."""
        now = self._clock()
        approved = call.evolve(
            status=models.Status.APPROVED, decided_at=now, decided_by_policy=call.rule
        )
        # nothing to show in Slack: no card is ever posted for it
        outbox = [
            e for e in _settlement_outbox(approved) if e.kind is not models.OutboxKind.UPDATE_CARD
        ]
        if log_channel is not None:
            line = models.LogLine(channel=log_channel)
            outbox.append(models.OutboxEntry(approval_id=call.approval_id, work=line))
        if not await self._store.create_decided(approved, outbox):
            return False
        metrics.POLICY_APPROVALS.labels(call.rule).inc()
        _count_settlement(approved)
        log.info(
            "approved by the policy",
            extra={"action": "policy_decision", "approval_id": call.approval_id, "rule": call.rule},
        )
        return True

    async def _use_grant(
        self,
        call: models.Approval,
        rule: policy.Rule,
        current: policy.Policy,
        directory: ApproverDirectory,
    ) -> models.Approval | None:
        """``call`` approved at once by a live standing grant it meets (docs/grants.md), the
        granter's authority judged now as a click's is; None when none does (or the request ids
        exist already): it goes to a human as usual. Looked for only while the rule the call
        matches allows grants."""
        now = self._clock()
        roles = _roles(call, current)
        requirement: str | None = None  # hashed once a grant's terms meet the call
        for grant in await self._store.live_grants(
            call.agent, call.tool.name, call.session_id, now
        ):
            extra = {"action": "grant_use", "grant_id": grant.grant_id}
            why_not = grants.mismatch(grant, call, now)
            if why_not is None and requirement is None:
                requirement = grants.requirement_sha256(current, rule)
            if why_not is None and grant.requirement_sha256 != requirement:
                why_not = "the policy changed the rule's requirement since it was granted"
            if why_not is not None:
                log.debug("standing grant does not apply", extra={**extra, "reason": why_not})
                continue
            granter = grant.granted_by
            facts = await directory.approver(granter.slack_user_id, _usergroups(roles))
            verdict = _judge(call, facts, roles)
            if not verdict.allowed:
                log.info("standing grant not used", extra={**extra, "reason": verdict.reason})
                continue
            decider = models.Decider(
                slack_user_id=granter.slack_user_id,
                name=facts.name or granter.name,
                email=facts.email or granter.email,
                at=now,
                arguments_sha256=call.arguments_sha256,
            )
            approved = call.evolve(
                status=models.Status.APPROVED, decided_by=(decider,), decided_at=now
            )
            used = await self._store.use_grant(grant, approved, _settlement_outbox)
            if used is None:
                return None  # these request ids exist already: the stored approval answers
            if not used:
                continue  # used up, revoked or expired meanwhile
            stored = await self.get(approved.approval_id)
            metrics.GRANT_APPROVALS.labels(call.rule).inc()
            _count_settlement(stored)
            log.info(
                "approved by a standing grant", extra={**extra, "approval_id": stored.approval_id}
            )
            return stored
        return None

    def _new_approval(
        self,
        agent: str,
        request: models.ApprovalRequest,
        routing: _Routing,
        current: policy.Policy,
    ) -> models.Approval:
        now = self._clock()
        rule = routing.rule
        role, *any_of = rule.roles or ("",)  # none: a rule that decides by itself
        arguments = hashing.canonical_json(request.tool.arguments)  # hashed, stored, echoed
        return models.Approval(
            approval_id=self._new_id(),
            status=models.Status.PENDING,
            agent=agent,
            request_id=request.request_id,
            session_id=request.session_id,
            tool=request.tool,
            arguments_sha256=hashing.sha256_hex(arguments),
            arguments_jcs=arguments.decode("utf-8"),
            requester=request.requester,
            summary=request.summary,
            context=request.context,
            callback_url=request.callback_url,
            framework=request.framework,
            required=models.Required(
                role=role,
                approvals=rule.approvals,
                deny_reason=rule.deny_reason == "required",
                any_of=tuple(any_of),
                verify=rule.verify,
            ),
            rule=routing.name,
            why=routing.why,
            created_at=now,
            expires_at=now + timedelta(seconds=current.expires_in(request.expires_in, rule)),
            policy_version=current.version,
            fingerprint=hashing.sha256_hex(hashing.canonical_json(request.model_dump(mode="json"))),
            outsiders=routing.outsiders,
            argument_schemas=routing.schemas,
            valid_for=rule.valid_for,
            report_within=rule.report_within,
            review_channel=rule.channel or current.slack.reviewer_channel,
            editable=rule.editable,
            grants=(
                models.GrantLimits(
                    max_seconds=rule.grants.max_seconds,
                    max_uses=rule.grants.max_uses,
                    scopes=rule.grants.scopes,
                )
                if rule.grants is not None
                else None
            ),
        )

    @staticmethod
    def _timers(
        approval: models.Approval, steps: tuple[policy.Step, ...], current: policy.Policy
    ) -> list[models.TimerEntry]:
        """The rule's ladder; and, when no role the approval accepts has a user group (resolved
        only once the card is up) or a listed user besides the requester, an escalation now."""
        timers = [
            models.TimerEntry(
                approval_id=approval.approval_id,
                kind=step.action,
                step=i,
                due_at=approval.created_at + timedelta(seconds=step.after),
                # what the step pages is kept with the timer, as the approval keeps its rule
                page=(
                    models.Page(services=step.page, severity=step.severity)
                    if step.page is not None and step.action == "escalate"
                    else None
                ),
            )
            for i, step in enumerate(steps)
        ]
        nobody = not authority.eligible_exists(
            _roles(approval, current), authority.Person.of(approval.requester)
        )
        # Nobody holds the role: a set-up problem that on-call cannot decide either, so it goes
        # to the on-call channel (when there is one) and pages nobody.
        if current.oncall is not None and current.oncall.channel is not None and nobody:
            timers.append(_immediate_escalation(approval))
        return timers

    async def escalate_if_nobody_can_decide(self, approval_id: str, members: GroupMembers) -> bool:
        """Once the approval's card is up: escalate at once when the roles' user groups,
        resolved now, leave nobody but the requester (and those whose vote already counts) who
        could decide, rather than wait for expiry. Only where it can matter: the policy has an
        on-call channel and a role the approval accepts has a user group (roles without groups
        were judged at submit). A group that could not be resolved decides nothing: the ladder
        runs. Returns whether it escalated."""
        current = self._policy()
        if current.oncall is None or current.oncall.channel is None:
            return False
        approval = await self.get(approval_id)
        roles = _roles(approval, current)
        if not _usergroups(roles):
            return False
        resolved: dict[str, frozenset[str]] = {}
        for group in sorted(_usergroups(roles)):
            found = await members(group)
            if found is None:
                return False
            resolved[group] = found
        voters = [d.slack_user_id for d in approval.decided_by]
        requester = authority.Person.of(approval.requester)
        if authority.eligible_exists(roles, requester, resolved, voters):
            return False
        await self._store.schedule_timer(_immediate_escalation(approval))
        log.info(
            "nobody else can decide: escalating now",
            extra={"action": "escalate", "approval_id": approval.approval_id},
        )
        return True

    async def get(self, approval_id: str, *, agent: str | None = None) -> models.Approval:
        """The approval; an agent sees only its own (another agent's id is NotFound)."""
        approval = await self._store.get_approval(approval_id)
        if approval is None or (agent is not None and approval.agent != agent):
            raise errors.NotFound(approval_id)
        return approval

    async def events(
        self, approval_id: str, *, agent: str
    ) -> tuple[models.Approval, list[models.Attempt], list[tuple[models.TimerEntry, datetime]]]:
        """The approval, every attempt on it and the timers that fired (the audit trail)."""
        approval = await self.get(approval_id, agent=agent)
        attempts = await self._store.attempts(approval_id)
        return approval, attempts, await self._store.fired_timers(approval_id)

    async def wait(self, approval_id: str, *, agent: str, timeout: float) -> models.Approval:
        """Long-poll: the approval once settled, or as it is after ``timeout`` seconds."""
        deadline = self._clock() + timedelta(seconds=timeout)
        approval = await self.get(approval_id, agent=agent)
        while True:
            remaining = (deadline - self._clock()).total_seconds()
            if approval.settled or remaining <= 0:
                return approval
            # A notification ends the wait early; the cap makes polling the backstop. Settled
            # by a click in this process, the approval comes with the wake-up: no read.
            settled_here = await self._store.wait_for_settlement(approval_id, min(remaining, 2.0))
            approval = settled_here or await self.get(approval_id, agent=agent)

    async def _settle(
        self,
        approval: models.Approval,
        decision: states.Decision,
        attempt: models.Attempt | None,
        now: datetime,
        *,
        seen: tuple[models.Decider, ...] | None = None,
        dropped: tuple[models.Attempt, ...] = (),
        grant: models.Grant | None = None,
        as_stored: bool = True,
    ) -> models.Approval | None:
        """The settled approval, or None when another decision won the compare-and-set.

        ``now`` is the same instant the caller checked expiry with, so a click that arrives
        across ``expires_at`` is judged once, consistently. ``seen`` is the votes as read (when
        ``approval`` already has votes ``dropped`` at settlement taken out). ``grant``: the
        standing grant this approval makes, written with it. ``as_stored=False``: the approval
        as this settlement wrote it (the callback's body is built from it too), not read
        again: what a read just after the commit returns, the relay's progress since aside;
        for a click's outcome (a burst of clicks then reads each approval once, not twice)."""
        settled = states.settle(approval, decision, now)
        votes_seen = approval.decided_by if seen is None else seen
        outbox = _settlement_outbox(settled)
        if grant is not None:
            # once more when the grant expires, for its card to say so
            outbox.append(models.card_update(approval.approval_id, grant.expires_at + ONE_SECOND))
        if not await self._store.settle(
            settled,
            attempt,
            outbox,
            votes_before=tuple(d.slack_user_id for d in votes_seen),
            dropped=dropped,
            grant=grant,
        ):
            return None
        if settled.settled:  # else a quorum vote; still pending
            _count_settlement(settled)
        if not as_stored:
            return states.as_written(settled, outbox)
        return await self.get(settled.approval_id)

    async def cancel(
        self, approval_id: str, *, agent: str, reason: str | None = None
    ) -> models.Approval:
        """The agent withdraws its request. Raises InvalidTransition once it has settled."""
        approval = await self.get(approval_id, agent=agent)
        now = self._clock()
        cancelled = await self._settle(approval, states.Cancel(at=now, reason=reason), None, now)
        if cancelled is None:
            current = await self.get(approval_id)
            raise errors.InvalidTransition(current.status.value, "cancel")
        return cancelled

    async def claim_execution(
        self,
        approval_id: str,
        *,
        agent: str,
        idempotency_key: str,
        arguments_sha256: str | None = None,
    ) -> models.Approval:
        """Claim the one execution an approved call allows, within its ``valid_for``, of the
        arguments whose hash is ``arguments_sha256`` (needed after an edit: only the edited
        arguments may run). The same ``idempotency_key`` again gets the same claim back (a
        retry after a lost answer); any other claim is refused: NotTheseArguments,
        AlreadyClaimed, CalledAgain (its edit runs as another approval), NotApproved or
        DecisionLapsed."""
        approval = await self.get(approval_id, agent=agent)
        if (arguments_sha256 is None and approval.edit is not None) or (
            arguments_sha256 is not None and arguments_sha256 != approval.run_sha256
        ):
            metrics.EXECUTIONS.labels("not_these_arguments").inc()
            raise errors.NotTheseArguments(approval.run_sha256, arguments_sha256)
        now = self._clock()
        if approval.execution is None and approval.status is models.Status.APPROVED:
            # an agent whose framework reports nothing after the tool runs (see
            # approvals.frameworks): no outcome can come, so none is waited for
            outcome_due = (
                None
                if not frameworks.reports_outcomes(approval.framework)
                else now + timedelta(seconds=approval.report_within)
            )
            claim_id = new_claim_id()
            if await self._store.claim_execution(
                approval_id, claim_id, idempotency_key, now, outcome_due
            ):
                metrics.EXECUTIONS.labels("claimed").inc()
                log.info(
                    "execution claimed",
                    extra={"action": "claim", "approval_id": approval_id, "claim_id": claim_id},
                )
        current = await self.get(approval_id)
        execution = current.execution
        if execution is not None:
            if _same_key(execution.idempotency_key, idempotency_key):
                return current
            metrics.EXECUTIONS.labels("already_claimed").inc()
            raise errors.AlreadyClaimed(execution.claim_id, execution.claimed_at)
        if current.called_again_as is not None:
            metrics.EXECUTIONS.labels("called_again").inc()
            raise errors.CalledAgain(current.called_again_as)
        valid_until = current.valid_until
        if valid_until is None:
            raise errors.NotApproved(current.status.value)
        metrics.EXECUTIONS.labels("lapsed").inc()
        raise errors.DecisionLapsed(valid_until)

    async def report_outcome(
        self, approval_id: str, *, agent: str, report: models.OutcomeReport
    ) -> models.Approval:
        """Store what happened when the claimed call ran (once; the same report again is
        answered as stored). Only the claim's own key reports: NotClaimed otherwise, and
        OutcomeAlreadyReported for a different second report."""
        approval = await self.get(approval_id, agent=agent)
        execution = approval.execution
        if execution is None or not _same_key(execution.idempotency_key, report.idempotency_key):
            raise errors.NotClaimed("no claim to run this approval was made with that key")
        outcome = models.ExecutionOutcome(
            status=report.status, detail=report.detail, reported_at=self._clock()
        )
        if execution.outcome is None and await self._store.report_outcome(
            approval_id, report.idempotency_key, outcome
        ):
            metrics.EXECUTIONS.labels(f"outcome_{report.status}").inc()
            log.info(
                "execution outcome reported",
                extra={"action": "outcome", "approval_id": approval_id, "status": report.status},
            )
        current = await self.get(approval_id)
        stored = current.execution.outcome if current.execution is not None else None
        if stored is None or (stored.status, stored.detail) != (report.status, report.detail):
            raise errors.OutcomeAlreadyReported(
                f"an outcome ({stored.status if stored else '?'}) was reported already"
            )
        return current

    async def queue_for(
        self, slack_user_id: str, directory: ApproverDirectory, limit: int = 20
    ) -> Queue:
        """What this person may decide now (pending, eligible by the same rule a click uses,
        not already voted), and the ``limit`` newest they requested (with status)."""
        current = self._policy()
        groups = frozenset(g for role in current.roles.values() for g in role.usergroups)
        approver = await directory.approver(slack_user_id, groups)
        decidable = []
        window = await self._store.list_pending(QUEUE_WINDOW)
        for approval in window:
            verdict = _judge(approval, approver, _roles(approval, current))
            voted = any(d.slack_user_id == slack_user_id for d in approval.decided_by)
            if verdict.allowed and not voted and not states.is_expired(approval, self._clock()):
                decidable.append(approval)
        requested = await self._store.list_requested_by(slack_user_id, approver.email, limit)
        # counted only when the window is full: the rest of the pending are past it; one past
        # the cap tells "more than" from "exactly"
        unjudged = 0
        if len(window) == QUEUE_WINDOW:
            counted = await self._store.count_pending(QUEUE_WINDOW + UNJUDGED_COUNTED + 1)
            unjudged = max(counted - QUEUE_WINDOW, 0)
        return Queue(
            decidable=decidable,
            unjudged=min(unjudged, UNJUDGED_COUNTED),
            requested=requested,
            unjudged_more=unjudged > UNJUDGED_COUNTED,
        )

    async def fire_timers(self, limit: int = 100) -> int:
        """Fire due reminders and escalations (each once, whichever replica gets it). An
        escalation that pages nobody lapses when the policy in force has no on-call channel for
        it to post to (rather than claim on the card that on-call was told)."""
        oncall = self._policy().oncall
        channel = oncall is not None and oncall.channel is not None

        def nowhere(timer: models.TimerEntry) -> bool:
            return timer.kind == "escalate" and timer.page is None and not channel

        fired = await self._store.fire_due_timers(self._clock(), limit, nowhere)
        for timer in fired:
            log.info(
                "timer fired",
                extra={"action": timer.kind, "approval_id": timer.approval_id, "step": timer.step},
            )
        return len(fired)

    async def expire_due(self, limit: int = 100) -> int:
        """Expire pending approvals past ``expires_at``, up to ``limit`` of them, all in one
        statement (:meth:`Repository.settle_many`); returns how many this call expired.

        Each is settled as a click settles one: compare-and-set from pending with the votes it
        was read with, so one settled meanwhile (a click, another replica) is left as it is,
        with the same outbox rows, settlement row, notification, metric and log. The clock is
        read for them once they are read and rendered, just before that statement, so
        ``decided_at`` is when they settled, not when the sweep began."""
        due = await self._store.pending_expired(self._clock(), limit)
        if not due:
            return 0
        approvals = await self._store.get_approvals(due)
        now = self._clock()
        # is_expired: a clock set back since (a resync with the database's) expires nothing early
        expired = [
            states.settle(a, states.Expire(at=now), now)
            for a in approvals
            if states.is_expired(a, now)
        ]
        moved = await self._store.settle_many([(e, _settlement_outbox(e)) for e in expired])
        for settled in expired:
            if settled.approval_id in moved:
                _count_settlement(settled)
        return len(moved)

    async def click(
        self,
        approval_id: str,
        *,
        action: Action,
        slack_user_id: str,
        directory: ApproverDirectory,
        reason: str | None = None,
        arguments_sha256: str | None = None,
    ) -> ClickResult:
        """A Slack button click: settle if the clicker may decide, else record why not.

        ``arguments_sha256`` is the version of the arguments the clicker was shown (the
        card's); an approval counts only for that version, and a click that does not say is
        taken as one on the requested arguments. Raises NotFound for an unknown id. Every
        outcome is stored as an attempt.
        """
        started = time.monotonic()
        result = await self._click(
            approval_id, action, slack_user_id, directory, reason, arguments_sha256
        )
        if isinstance(result, Settled):
            metrics.CLICK_SETTLED_SECONDS.observe(time.monotonic() - started)
        return result

    async def _click(
        self,
        approval_id: str,
        action: Action,
        slack_user_id: str,
        directory: ApproverDirectory,
        reason: str | None,
        seen: str | None,
    ) -> ClickResult:
        approval = await self.get(approval_id)
        if approval.settled:
            return await self._stale(approval, slack_user_id, action)
        click = await self._eligible_click(approval, action, slack_user_id, directory, seen)
        if not isinstance(click, _Click):
            return click
        if action == "approve" and approval.required.verify == "passkey":
            # a click never counts here, whatever reaches /slack/events: only a confirmation
            return await self._ask_passkey(approval, click, "a passkey confirmation was asked")
        return await self._count(approval, click.decision(reason), click, directory)

    async def _ask_passkey(
        self, approval: models.Approval, click: _Click, detail: str
    ) -> PasskeyAsked:
        link = step_up.new(approval, click.slack_user_id, click.arguments_sha256, click.at)
        await self._store.passkeys.add_step_up(link)
        await self._store.record_attempt(click.attempt(models.AttemptOutcome.PASSKEY_ASKED, detail))
        return PasskeyAsked(approval, link)

    async def confirm_with_passkey(
        self,
        token: str,
        *,
        slack_user_id: str,
        directory: ApproverDirectory,
        verify: VerifyPasskey,
    ) -> ConfirmResult:
        """An approval confirmed on the step-up page by ``slack_user_id`` (signed in): the link
        must be theirs, unused, unexpired and for the approval as it is now; ``verify`` checks
        the passkey assertion against the challenge of exactly that. Then every check of a
        click is made again, with facts fetched now, and the vote counts as a click's would,
        recording the passkey. A failure counts a try against the link and is recorded."""
        link = await self._store.passkeys.step_up(token)
        approval = None if link is None else await self._store.get_approval(link.approval_id)
        now = self._clock()
        why = step_up.why_not(link, slack_user_id, approval, now)
        if why is None and link is not None and approval is not None:
            try:
                used = await verify(step_up.expected_challenge(link, approval))
            except step_up.PasskeyFailed as exc:
                await self._store.passkeys.count_try(token)
                why = f"the passkey did not confirm this call: {exc}"
            else:
                if await self._store.passkeys.use_step_up(token, now):
                    return await self._confirmed(approval, link, used, directory)
                why = "this confirmation link was used already: click Approve on the card again"
        if approval is not None:
            await self._store.record_attempt(
                models.Attempt(
                    approval_id=approval.approval_id,
                    slack_user_id=slack_user_id,
                    action="approve",
                    outcome=models.AttemptOutcome.PASSKEY_REFUSED,
                    detail=why or "",
                    at=now,
                )
            )
        log.info(
            "passkey confirmation refused",
            extra={"action": "step_up", "slack_user_id": slack_user_id, "error": why},
        )
        return PasskeyRefused(approval, why or "not confirmed")

    async def _confirmed(
        self,
        approval: models.Approval,
        link: step_up.StepUp,
        used: models.PasskeyUse,
        directory: ApproverDirectory,
    ) -> ClickResult:
        click = await self._eligible_click(
            approval, "approve", link.slack_user_id, directory, link.arguments_sha256
        )
        if not isinstance(click, _Click):
            return click
        click = dataclasses.replace(click, passkey=used)
        return await self._count(approval, click.decision(None), click, directory)

    async def _eligible_click(
        self,
        approval: models.Approval,
        action: Action,
        slack_user_id: str,
        directory: ApproverDirectory,
        seen: str | None,
    ) -> _Click | Expired | Stale | Outdated | Refused:
        """The click on pending ``approval`` with the clicker's facts fetched now, once it
        passed every check of a click (not past the expiry, on the version shown, the authority
        the approval needs); else what became of it, recorded."""
        roles = _roles(approval, self._policy())
        click = _Click(
            approval_id=approval.approval_id,
            slack_user_id=slack_user_id,
            action=action,
            approver=await directory.approver(slack_user_id, _usergroups(roles)),
            at=self._clock(),
            arguments_sha256=seen or approval.arguments_sha256,
        )
        if states.is_expired(approval, click.at):
            return await self._expire_on_click(approval, click)
        if _outdated(approval, click):
            return await self._outdated(approval, click)
        verdict = _judge(approval, click.approver, roles)
        if not verdict.allowed:
            return await self._refuse(approval, click, verdict)
        return click

    async def edit(
        self,
        approval_id: str,
        *,
        slack_user_id: str,
        changes: Mapping[str, object],
        directory: ApproverDirectory,
        note: str | None = None,
        seen: str | None = None,
    ) -> EditResult:
        """Approve with edits (docs/edits.md): set the fields of ``changes`` (dotted paths of
        the approval's ``editable``, each to a value of its JSON type) and approve what results,
        as a click approves, judged on the edited call: routed by the policy again, and the
        editor must be allowed to approve *that* (not the requester; the role of the rule it
        now matches; ceilings compared with the edited values). The edit is the editor's vote
        for the edited version; votes given to another version no longer count. ``seen`` is the
        version the editor's form was opened on: an edit that came in since makes this one
        refused, not applied on top.

        Returns EditRefused (nothing changed) for a submission that cannot apply, Refused for
        an editor who may not approve the edited call, else as a click. Raises NotFound."""
        approval = await self.get(approval_id)
        for _ in range(QUORUM_RETRIES):
            if approval.settled:
                break
            result = await self._edit_once(approval, slack_user_id, changes, directory, note, seen)
            if result is not None:
                return result
            approval = await self.get(approval_id)
            seen = seen or approval.arguments_sha256
        return await self._stale(approval, slack_user_id, "edit")

    async def _edit_once(
        self,
        approval: models.Approval,
        slack_user_id: str,
        changes: Mapping[str, object],
        directory: ApproverDirectory,
        note: str | None,
        seen: str | None,
    ) -> EditResult | None:
        """One round of :meth:`edit`: None when another decision won the compare-and-set."""
        current = self._policy()
        applied = _apply_edit(approval, changes, seen, current, note)
        if isinstance(applied, list):
            return await self._edit_refused(approval, slack_user_id, applied)
        tool = approval.tool
        matched = current.match(tool.name, applied.arguments, approval.context)
        roles = [role_members(current, name) for name in matched.rule.roles]
        click = _Click(
            approval_id=approval.approval_id,
            slack_user_id=slack_user_id,
            action="edit",
            approver=await directory.approver(slack_user_id, _usergroups(roles)),
            at=self._clock(),
            arguments_sha256=hashing.sha256_hex(applied.canonical),
        )
        if states.is_expired(approval, click.at):
            return await self._expire_on_click(approval, click)
        rerouted = _rerouted(approval, applied, matched, click, current.version, note)
        verdict = _judge(rerouted, click.approver, roles)
        if not verdict.allowed:
            needs = f"role {' or '.join(matched.rule.roles)} ({matched.name})"
            because = f"the edited call needs {needs}: {verdict.reason}"
            refusal = authority.Verdict(outcome=verdict.outcome, reason=because)
            return await self._refuse(approval, click, refusal)
        # the edit is the editor's vote, except where the call needs a passkey: then the edit
        # is made and the editor confirms the edited call with their passkey, as a click would
        step_up_needed = rerouted.required.verify == "passkey"
        edited = (
            rerouted.evolve(decided_by=())
            if step_up_needed
            else states.settle(rerouted, states.Approve(by=click.decider), click.at)
        )
        dropped = tuple(
            _dropped(approval, vote, f"no longer counts: {BEFORE_THE_EDIT}", click.at)
            for vote in approval.decided_by
        )
        changed = ", ".join(edits.dotted(op) for op in applied.patch) or "back to as requested"
        attempt = (
            click.attempt(models.AttemptOutcome.EDITED_ASKING_PASSKEY, f"edited: {changed}")
            if step_up_needed
            else click.attempt(models.AttemptOutcome.ACCEPTED, f"edited: {changed}")
        )
        if not await self._store.edit(
            edited,
            attempt,
            _settlement_outbox(edited),
            votes_before=[d.slack_user_id for d in approval.decided_by],
            dropped=dropped,
        ):
            return None
        log.info(
            "approval edited",
            extra={"action": "edit", "approval_id": approval.approval_id, "edit": edited.edit_no},
        )
        metrics.EDITS.inc()
        if edited.settled:
            _count_settlement(edited)
        stored = await self.get(approval.approval_id)
        if step_up_needed and not stored.settled:
            link = step_up.new(stored, slack_user_id, stored.run_sha256, click.at)
            await self._store.passkeys.add_step_up(link)
            return PasskeyAsked(stored, link)
        return Settled(stored) if stored.settled else Voted(stored)

    async def check_edit(
        self,
        approval_id: str,
        changes: Mapping[str, object],
        seen: str | None = None,
        note: str | None = None,
    ) -> EditRefused | None:
        """What :meth:`edit` would refuse in these changes by themselves (the form, the tool's
        schema, the argument contract), without asking who edits or writing anything: the
        edge answers a form with it before it closes. None: nothing wrong with them as such
        (the edit itself checks everything again)."""
        approval = await self.get(approval_id)
        if approval.settled:
            return None  # the edit answers that, as a click is answered
        applied = _apply_edit(approval, changes, seen, self._policy(), note)
        return EditRefused(approval, tuple(applied)) if isinstance(applied, list) else None

    async def _edit_refused(
        self, approval: models.Approval, slack_user_id: str, problems: list[edits.Problem]
    ) -> EditRefused:
        """A submission that cannot apply; one no form of ours sends (forged) is recorded."""
        forged = [f"{p.path}: {p.message}" for p in problems if p.forged]
        await self._record_forged(approval, slack_user_id, "edit", forged)
        return EditRefused(approval, tuple(problems))

    async def _record_forged(
        self,
        approval: models.Approval,
        slack_user_id: str,
        form: Literal["edit", "grant"],
        forged: list[str],
    ) -> None:
        """Record a ``form``'s submission that no form of ours sends (``forged``: what in it,
        each ``field: why``) as an attempt of its own; nothing when it holds none."""
        if not forged:
            return
        await self._store.record_attempt(
            models.Attempt(
                approval_id=approval.approval_id,
                slack_user_id=slack_user_id,
                action="edit" if form == "edit" else "approve",
                outcome=(
                    models.AttemptOutcome.INVALID_EDIT
                    if form == "edit"
                    else models.AttemptOutcome.INVALID_GRANT
                ),
                detail="; ".join(forged)[:500],
                at=self._clock(),
            )
        )
        log.warning(
            f"{form} refused: not what the form offers",
            extra={"action": form, "approval_id": approval.approval_id},
        )

    async def grant(
        self,
        approval_id: str,
        *,
        slack_user_id: str,
        terms: Mapping[str, object],
        directory: ApproverDirectory,
        seen: str | None = None,
    ) -> GrantResult:
        """Approve & allow more (docs/grants.md): approve the call as a click approves it (every
        check of a click: not the requester, the authority, the version shown, the expiry), and
        in the same transaction create the standing grant ``terms`` ask for (``scope``,
        ``seconds``, ``uses``, ``kinds``: a constraint kind per argument), within what the rule
        in force allows. Terms it does not allow are refused whole (GrantRefused, nothing
        written but the attempt of a forged one): never a grant wider than the policy's."""
        approval = await self.get(approval_id)
        if approval.settled:
            return await self._stale(approval, slack_user_id, "approve")
        current = self._policy()
        taken = _grant_terms(approval, terms, current)
        if isinstance(taken, list):
            return await self._grant_refused(approval, slack_user_id, taken)
        granted, rule = taken
        click = await self._eligible_click(approval, "approve", slack_user_id, directory, seen)
        if not isinstance(click, _Click):
            return click
        requirement = grants.requirement_sha256(current, rule)
        grant = grants.grant_for(approval, granted, click.decider, requirement, click.at)
        detail = f"approved, and granted {grant.grant_id}"
        settled = await self._settle(
            approval,
            click.decision(None),
            click.attempt(models.AttemptOutcome.ACCEPTED, detail),
            click.at,
            grant=grant,
        )
        if settled is None:  # decided meanwhile by someone else: no grant either
            return await self._stale(await self.get(approval_id), slack_user_id, "approve")
        metrics.GRANTS.labels("granted").inc()
        log.info(
            "standing grant made",
            extra={"action": "grant", "approval_id": approval_id, "grant_id": grant.grant_id},
        )
        return Settled(settled)

    async def check_grant(
        self, approval_id: str, terms: Mapping[str, object]
    ) -> GrantRefused | None:
        """What :meth:`grant` would refuse in these terms by themselves, without asking who
        grants or writing anything (the edge answers the form with it before it closes)."""
        approval = await self.get(approval_id)
        if approval.settled:
            return None  # the grant answers that, as a click is answered
        taken = _grant_terms(approval, terms, self._policy())
        return GrantRefused(approval, tuple(taken)) if isinstance(taken, list) else None

    async def _grant_refused(
        self, approval: models.Approval, slack_user_id: str, problems: list[grants.Problem]
    ) -> GrantRefused:
        """Terms that cannot be taken; those no form of ours sends (forged) are recorded."""
        forged = [f"{p.field}: {p.message}" for p in problems if p.forged]
        await self._record_forged(approval, slack_user_id, "grant", forged)
        return GrantRefused(approval, tuple(problems))

    async def revoke_grant(
        self, grant_id: str, *, slack_user_id: str | None, directory: ApproverDirectory | None
    ) -> RevokeResult:
        """Revoke a standing grant: its granter, or anyone holding a role its rule requires
        (membership as the directory finds it now), may; ``slack_user_id`` None is an operator
        at the command line (``countersign grants revoke``), who always may."""
        grant = await self._store.get_grant(grant_id)
        if grant is None:
            return RevokeResult(None, False, "no such grant")
        if slack_user_id is not None and slack_user_id != grant.granted_by.slack_user_id:
            roles = [role_members(self._policy(), name) for name in grant.required.roles]
            facts = (
                await directory.approver(slack_user_id, _usergroups(roles))
                if directory is not None
                else None
            )
            holds = (
                facts is not None
                and facts.lookup_error is None
                and any(authority.holds(facts, role) for role in roles)
            )
            if not holds:
                needs = " or ".join(grant.required.roles)
                return RevokeResult(grant, False, f"only its granter or role {needs} may revoke it")
        now = self._clock()
        revoked = await self._store.revoke_grant(
            grant_id, slack_user_id or "cli", now, lambda on: [models.card_update(on)]
        )
        if revoked:
            metrics.GRANTS.labels("revoked").inc()
            log.info("standing grant revoked", extra={"action": "revoke", "grant_id": grant_id})
        after = await self._store.get_grant(grant_id)
        return RevokeResult(after, revoked, None if revoked else "it was revoked already")

    async def list_grants(
        self, *, agent: str | None = None, live: bool = True, limit: int = 200
    ) -> list[models.Grant]:
        """Standing grants, newest first: of ``agent`` (None: all), only live ones if ``live``."""
        return await self._store.list_grants(
            agent=agent, live_at=self._clock() if live else None, limit=limit
        )

    async def revocable_grants(
        self, slack_user_id: str, directory: ApproverDirectory, limit: int = 200
    ) -> list[models.Grant]:
        """The live grants this person may revoke (theirs, and those of rules whose role they
        hold, membership as the directory finds it now), newest first."""
        live = await self.list_grants(live=True, limit=limit)
        if not live:
            return []
        current = self._policy()
        groups = frozenset(g for role in current.roles.values() for g in role.usergroups)
        facts = await directory.approver(slack_user_id, groups)

        def may_revoke(grant: models.Grant) -> bool:
            if grant.granted_by.slack_user_id == slack_user_id:
                return True
            roles = [role_members(current, name) for name in grant.required.roles]
            return facts.lookup_error is None and any(authority.holds(facts, r) for r in roles)

        return [g for g in live if may_revoke(g)]

    async def grants_of(self, approval_id: str) -> list[models.Grant]:
        """The grant made on approving ``approval_id``, if one was."""
        return await self._store.grants_of(approval_id)

    async def _expire_on_click(self, approval: models.Approval, click: _Click) -> Expired | Stale:
        expired = await self._settle(
            approval,
            states.Expire(at=click.at),
            click.attempt(models.AttemptOutcome.EXPIRED),
            click.at,
        )
        if expired is None:  # settled meanwhile by someone else
            return await self._stale(
                await self.get(click.approval_id), click.slack_user_id, click.action
            )
        return Expired(expired)

    async def _refuse(
        self, approval: models.Approval, click: _Click, verdict: authority.Verdict
    ) -> Refused:
        await self._store.record_attempt(
            click.attempt(models.AttemptOutcome(verdict.outcome.value), verdict.reason)
        )
        log.info(
            "click refused",
            extra={
                "action": "click",
                "approval_id": click.approval_id,
                "outcome": verdict.outcome.value,
                "slack_user_id": click.slack_user_id,
            },
        )
        return Refused(approval, verdict)

    async def _count(
        self,
        approval: models.Approval,
        decision: states.Decision,
        click: _Click,
        directory: ApproverDirectory,
    ) -> ClickResult:
        """Apply an eligible click. Concurrent quorum votes race on the compare-and-set: the
        loser re-reads and applies its vote again on top of the winner's (bounded; each round
        someone's vote landed)."""
        for _ in range(QUORUM_RETRIES):
            if approval.settled:
                break
            if isinstance(decision, states.Approve) and _already_counted(approval, click):
                await self._store.record_attempt(
                    click.attempt(models.AttemptOutcome.DUPLICATE, "already counted")
                )
                return Duplicate(approval)
            result = await self._apply_vote(approval, decision, click, directory)
            if result is not None:
                return result
            approval = await self.get(click.approval_id)
            if not approval.settled and _outdated(approval, click):
                return await self._outdated(approval, click)  # an edit won the race
        return await self._stale(approval, click.slack_user_id, click.action)

    async def _outdated(self, approval: models.Approval, click: _Click) -> Outdated:
        detail = "the arguments were edited since this was shown; the card shows the edit"
        await self._store.record_attempt(click.attempt(models.AttemptOutcome.EDITED, detail))
        return Outdated(approval)

    async def _apply_vote(
        self,
        approval: models.Approval,
        decision: states.Decision,
        click: _Click,
        directory: ApproverDirectory,
    ) -> Settled | Voted | None:
        """One round of :meth:`_count`: None when another vote won the compare-and-set."""
        kept, dropped = await self._votes_that_hold(approval, decision, directory, click.at)
        settled = await self._settle(
            approval.evolve(decided_by=kept) if dropped else approval,
            decision,
            click.attempt(models.AttemptOutcome.ACCEPTED),
            click.at,
            seen=approval.decided_by,
            dropped=dropped,
            as_stored=False,
        )
        if settled is None:
            return None
        return Settled(settled) if settled.settled else Voted(settled)

    async def _votes_that_hold(
        self,
        approval: models.Approval,
        decision: states.Decision,
        directory: ApproverDirectory,
        now: datetime,
    ) -> tuple[tuple[models.Decider, ...], tuple[models.Attempt, ...]]:
        """At the moment an approval would reach its quorum, every vote counted so far is
        judged again by the rule a click uses, with facts fetched now (fail closed: a lookup that
        fails drops the vote). Returns the votes that still hold and an attempt for each vote
        dropped; the request then stays pending if too few remain."""
        votes = approval.decided_by
        completes = len(votes) + 1 >= approval.required.approvals
        if not isinstance(decision, states.Approve) or not votes or not completes:
            return votes, ()
        roles = _roles(approval, self._policy())
        kept: list[models.Decider] = []
        dropped: list[models.Attempt] = []
        for vote in votes:
            facts = await directory.approver(vote.slack_user_id, _usergroups(roles))
            verdict = _judge(approval, facts, roles)
            confirmed = approval.required.verify is None or vote.passkey is not None
            if verdict.allowed and _for_this_version(approval, vote) and confirmed:
                kept.append(vote)
                continue
            why = (
                verdict.reason
                if not verdict.allowed
                else "it was not confirmed with a passkey"
                if not confirmed
                else "it was given to another version"
            )
            dropped.append(_dropped(approval, vote, f"no longer counts at settlement: {why}", now))
        return tuple(kept), tuple(dropped)

    async def _stale(
        self, approval: models.Approval, slack_user_id: str, action: Action | Literal["edit"]
    ) -> Stale:
        await self._store.record_attempt(
            models.Attempt(
                approval_id=approval.approval_id,
                slack_user_id=slack_user_id,
                action=action,
                outcome=models.AttemptOutcome.STALE,
                detail=f"already {approval.status.value}",
                at=self._clock(),
            )
        )
        return Stale(approval)


def _count_settlement(settled: models.Approval) -> None:
    """The metric and the log line of one settlement, however it was written."""
    metrics.SETTLEMENTS.labels(settled.status.value).inc()
    log.info(
        "approval settled",
        extra={
            "action": "settle",
            "approval_id": settled.approval_id,
            "status": settled.status.value,
        },
    )


def _grant_terms(
    approval: models.Approval, terms: Mapping[str, object], current: policy.Policy
) -> tuple[models.GrantTerms, policy.Rule] | list[grants.Problem]:
    """The grant ``terms`` ask for on ``approval`` within the limits of the rule the policy in
    force routes it to, which must be its own rule, still allowing grants to one person."""
    matched = current.match(approval.tool.name, approval.run_arguments, approval.context)
    rule = matched.rule
    if (
        approval.grants is None
        or approval.lead_facing
        or matched.name != approval.rule
        or rule.grants is None
        or rule.approvals != 1
        or approval.required.approvals != 1
        # a call that needs a passkey is never approved by a click, nor its like by a grant
        or approval.required.verify is not None
        or rule.verify is not None
    ):
        return [grants.Problem("scope", "the policy in force allows no grant on this call")]
    limits = models.GrantLimits(
        max_seconds=rule.grants.max_seconds,
        max_uses=rule.grants.max_uses,
        scopes=rule.grants.scopes,
    )
    read = grants.read_terms(terms, limits, approval.run_arguments)
    return read if isinstance(read, list) else (read, rule)


BEFORE_THE_EDIT = "it was given to the version before an edit"
EDITED_MEANWHILE = (
    "someone edited this call since the form was opened: close it and look at the card again"
)


def _apply_edit(
    approval: models.Approval,
    changes: Mapping[str, object],
    seen: str | None,
    current: policy.Policy,
    note: str | None = None,
) -> edits.Result | list[edits.Problem]:
    """The edited arguments, or why they cannot be: another edit came since the form opened
    (``seen``), the form's own rules (:func:`approvals.edits.apply`), the tool's schema and
    the argument contract on the edited arguments."""
    if (seen or approval.arguments_sha256) != approval.run_sha256:
        return [edits.Problem(path=None, message=EDITED_MEANWHILE)]
    applied = edits.apply(
        approval.tool.arguments, approval.run_arguments, approval.editable, changes
    )
    if isinstance(applied, list):
        return applied + edits.note_problems(note)
    if edits.note_problems(note):
        return edits.note_problems(note)
    found = current.argument_problems(approval.tool.name, applied.arguments, approval.context)
    if found:
        return [edits.Problem(path=_edited_path(p.field), message=p.message) for p in found]
    return applied


def _edited_path(field: str) -> str | None:
    """The dotted argument path of a problem's field (``tool.arguments.amount``), or None for
    one about the call as a whole."""
    prefix = "tool.arguments."
    return field.removeprefix(prefix) if field.startswith(prefix) else None


def _rerouted(
    approval: models.Approval,
    applied: edits.Result,
    matched: policy.MatchedRule,
    click: _Click,
    policy_version: str,
    note: str | None,
) -> models.Approval:
    """The approval as it stands with this edit, still pending: the edited arguments, and what
    the rule the edited call matches requires, with no votes (the editor's comes next)."""
    rule = matched.rule
    role, *any_of = rule.roles
    edit = models.Edit(
        number=approval.edit_no + 1,
        arguments=applied.arguments,
        arguments_jcs=applied.canonical.decode("utf-8"),
        arguments_sha256=click.arguments_sha256,
        patch=applied.patch,
        by=click.decider,
        at=click.at,
        note=note or None,
        policy_version=policy_version,
    )
    return approval.evolve(
        edit=edit,
        required=models.Required(
            role=role,
            approvals=rule.approvals,
            deny_reason=rule.deny_reason == "required",
            any_of=tuple(any_of),
            verify=rule.verify,
        ),
        rule=matched.name,
        why=matched.explanation,
        valid_for=rule.valid_for,
        report_within=rule.report_within,
        editable=rule.editable,
        decided_by=(),
    )


def _dropped(
    approval: models.Approval, vote: models.Decider, detail: str, at: datetime
) -> models.Attempt:
    """The attempt that records a quorum vote no longer counted, and why (``detail``)."""
    return models.Attempt(
        approval_id=approval.approval_id,
        slack_user_id=vote.slack_user_id,
        email=vote.email,
        name=vote.name,
        action="approve",
        outcome=models.AttemptOutcome.VOTE_DROPPED,
        detail=detail,
        at=at,
    )


def _outdated(approval: models.Approval, click: _Click) -> bool:
    """An approval given to a version of the arguments that is no longer the one to run."""
    return click.action == "approve" and click.arguments_sha256 != approval.run_sha256


def _for_this_version(approval: models.Approval, vote: models.Decider) -> bool:
    """A vote counts only for the version it was given to (votes from before edits existed
    were all given to the requested arguments)."""
    return (vote.arguments_sha256 or approval.arguments_sha256) == approval.run_sha256


def _already_counted(approval: models.Approval, click: _Click) -> bool:
    """Whether the clicker's approval is among the votes already (by Slack id or e-mail)."""
    person = authority.Person(slack_user_id=click.slack_user_id, email=click.approver.email)
    return any(person.is_same(authority.Person.of(d)) for d in approval.decided_by)
