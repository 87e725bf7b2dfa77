"""The approval service: every use case of the core, each one state change in one transaction.

The edges (agent webhook, Slack listeners, timers) call these methods; this module knows
nothing of HTTP or Slack. Time comes from an injected clock so tests control it.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol

from approvals import errors, hashing, metrics, models, policy, resource, states
from approvals.store import Store
from guards import authority

__all__ = [
    "ApprovalService",
    "ApproverDirectory",
    "ClickResult",
    "Duplicate",
    "Escalation",
    "Expired",
    "Refused",
    "Settled",
    "Stale",
    "Voted",
    "new_approval_id",
    "utcnow",
]

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
Action = Literal["approve", "deny"]


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_approval_id() -> str:
    return "apr_" + secrets.token_hex(12)


class ApproverDirectory(Protocol):
    """Fetches a clicker's facts at click time (the Slack edge implements it)."""

    async def approver(self, slack_user_id: str, usergroups: frozenset[str]) -> authority.Approver:
        """The clicker's facts; membership checked only for ``usergroups``. Never raises:
        a failed lookup is reported in ``Approver.lookup_error`` (fail closed)."""
        ...


@dataclass(frozen=True)
class Settled:
    approval: models.Approval


@dataclass(frozen=True)
class Refused:
    approval: models.Approval
    verdict: authority.Verdict


@dataclass(frozen=True)
class Stale:
    """The approval had settled before this click."""

    approval: models.Approval


@dataclass(frozen=True)
class Expired:
    """The click arrived after ``expires_at``: the approval is expired, never approved."""

    approval: models.Approval


@dataclass(frozen=True)
class Voted:
    """The click counted towards the quorum; more approvals are needed."""

    approval: models.Approval


@dataclass(frozen=True)
class Duplicate:
    """This person's approval was already counted: one person never counts twice."""

    approval: models.Approval


QUORUM_RETRIES = 25
ClickResult = Settled | Voted | Duplicate | Refused | Stale | Expired


@dataclass(frozen=True)
class Escalation:
    """A guard's escalation of a lead-facing turn: the role that decides, the guard rule that
    escalated, and the outsiders (the lead) who must never decide."""

    role: str
    rule: str
    outsiders: tuple[models.Outsider, ...]
    why: str = ""


def _settlement_outbox(approval: models.Approval) -> list[models.OutboxEntry]:
    entries = [models.card_update(approval.approval_id)]
    if approval.callback_url and approval.settled:
        # The body is frozen now so every redelivery sends the very same bytes; it embeds the
        # arguments as the text that was hashed.
        body = resource.render(approval, with_delivery=False).decode("utf-8")
        entries.append(
            models.OutboxEntry(
                kind=models.OutboxKind.CALLBACK,
                approval_id=approval.approval_id,
                payload={"url": approval.callback_url, "body": body},
            )
        )
    return entries


def _members(approval: models.Approval, current: policy.Policy) -> list[authority.RoleMembers]:
    """Who holds each role the approval accepts, from the policy in force now."""
    out = []
    for name in approval.required.roles:
        role = current.roles.get(name, policy.Role())  # a role removed since: nobody holds it
        out.append(
            authority.RoleMembers(
                name=name,
                users=frozenset(role.users),
                usergroups=frozenset(role.usergroups),
                ceiling=role.ceiling,
            )
        )
    return out


_SPECIFIC = [
    authority.Outcome.SELF,
    authority.Outcome.LOOKUP_FAILED,
    authority.Outcome.OVER_LIMIT,
    authority.Outcome.NO_AUTHORITY,
]


def _judge(
    approval: models.Approval, approver: authority.Approver, current: policy.Policy
) -> authority.Verdict:
    """The pure authority rule over every role the approval accepts: any one suffices; else
    the most telling refusal (self before lookups before ceilings before no role)."""
    requester = authority.Person(
        slack_user_id=approval.requester.slack_user_id, email=approval.requester.email
    )
    outsiders = [
        authority.Person(slack_user_id=o.slack_user_id, email=o.email) for o in approval.outsiders
    ]
    members = _members(approval, current)
    verdicts = [
        authority.can_decide(approver, requester, m, outsiders, approval.tool.arguments)
        for m in members
    ]
    allowed = next((v for v in verdicts if v.allowed), None)
    if allowed is not None:
        return allowed
    best = min(verdicts, key=lambda v: _SPECIFIC.index(v.outcome))
    if best.outcome is authority.Outcome.NO_AUTHORITY and len(members) > 1:
        names = ", ".join(repr(m.name) for m in members)
        return authority.Verdict(outcome=best.outcome, reason=f"you hold none of the roles {names}")
    return best


def _anyone_else(role: policy.Role, requester: models.Requester) -> bool:
    """Whether the role could have an eligible member: a user group (checked at click time), or
    a listed user who is not the requester."""
    return bool(role.usergroups) or any(u != requester.slack_user_id for u in role.users)


class ApprovalService:
    def __init__(
        self,
        *,
        store: Store,
        policy: Callable[[], policy.Policy],
        clock: Clock = utcnow,
        new_id: Callable[[], str] = new_approval_id,
    ) -> None:
        self._store = store
        self._policy = policy
        self._clock = clock
        self._new_id = new_id

    async def submit(
        self,
        agent: str,
        request: models.ApprovalRequest,
        *,
        escalation: Escalation | None = None,
    ) -> tuple[models.Approval, bool]:
        """Create the approval, or return the one these ids already made (``created=False``).

        The policy's rules decide the role, unless ``escalation`` (a guard's verdict on a
        lead-facing turn) names it. Raises CallbackNotAllowed for a callback host off the
        agent's allow-list and RequestConflict when the ids are bound to different content.
        """
        current = self._policy()
        agent_policy = current.agents[agent]
        if request.callback_url is not None:
            if not policy.callback_allowed(request.callback_url, agent_policy.callback_hosts):
                raise errors.CallbackNotAllowed(
                    f"callback_url host is not on the allow-list of agent {agent!r}"
                )
            if agent_policy.callback_secret_env is None:
                raise errors.CallbackNotAllowed(
                    f"agent {agent!r} has no callback_secret_env, so callbacks cannot be signed"
                )
        steps: tuple[policy.Step, ...] = ()
        if escalation is None:
            problems = current.argument_problems(
                request.tool.name, request.tool.arguments, request.context
            )
            if problems:
                raise errors.InvalidArguments([(p.field, p.message) for p in problems])
            matched = current.match(request.tool.name, request.tool.arguments, request.context)
            steps = matched.rule.escalation
            (role, *any_of), rule_name = matched.rule.roles, matched.name
            why = matched.explanation
            quorum = matched.rule.approvals
            deny_reason = matched.rule.deny_reason == "required"
            lifetime = current.expires_in(request.expires_in, matched.rule)
            schemas = matched.schemas
        else:
            role, rule_name, why, quorum = escalation.role, escalation.rule, escalation.why, 1
            deny_reason, any_of, schemas = False, [], ()
            lifetime = min(request.expires_in or current.expiry.default, current.expiry.max)
        now = self._clock()
        fingerprint = hashing.sha256_hex(hashing.canonical_json(request.model_dump(mode="json")))
        arguments = hashing.canonical_json(request.tool.arguments)  # hashed, stored, echoed
        approval = models.Approval(
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
                role=role, approvals=quorum, deny_reason=deny_reason, any_of=tuple(any_of)
            ),
            rule=rule_name,
            why=why,
            created_at=now,
            expires_at=now + timedelta(seconds=lifetime),
            policy_version=current.version,
            fingerprint=fingerprint,
            outsiders=escalation.outsiders if escalation else (),
            argument_schemas=schemas,
        )
        post_card = models.OutboxEntry(
            kind=models.OutboxKind.POST_CARD, approval_id=approval.approval_id
        )
        timers = [
            models.TimerEntry(
                approval_id=approval.approval_id,
                kind=step.action,
                step=i,
                due_at=now + timedelta(seconds=step.after),
            )
            for i, step in enumerate(steps)
        ]
        if current.oncall is not None and not any(
            _anyone_else(current.roles.get(r, policy.Role()), request.requester)
            for r in (role, *any_of)
        ):
            # nobody could ever decide: escalate at once instead of waiting for expiry
            timers.append(
                models.TimerEntry(
                    approval_id=approval.approval_id, kind="escalate", step=-1, due_at=now
                )
            )
        stored, created = await self._store.create_approval(approval, [post_card], timers)
        if not created and stored.fingerprint != fingerprint:
            raise errors.RequestConflict(stored.approval_id)
        if created:
            log.info(
                "approval created",
                extra={"action": "submit", "approval_id": stored.approval_id, "agent": agent},
            )
        return stored, created

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
        while True:
            approval = await self.get(approval_id, agent=agent)
            remaining = (deadline - self._clock()).total_seconds()
            if approval.settled or remaining <= 0:
                return approval
            # A notification ends the wait early; the cap makes polling the backstop.
            await self._store.wait_for_settlement(approval_id, min(remaining, 2.0))

    async def _settle(
        self,
        approval: models.Approval,
        decision: states.Decision,
        attempt: models.Attempt | None,
        now: datetime,
        *,
        seen: tuple[models.Decider, ...] | None = None,
        dropped: tuple[models.Attempt, ...] = (),
    ) -> models.Approval | None:
        """The settled approval, or None when another decision won the compare-and-set.

        ``now`` is the same instant the caller checked expiry with, so a click that arrives
        across ``expires_at`` is judged once, consistently. ``seen`` is the votes as read (when
        ``approval`` already has votes ``dropped`` at settlement taken out)."""
        settled = states.settle(approval, decision, now)
        votes_seen = approval.decided_by if seen is None else seen
        if not await self._store.settle(
            settled,
            attempt,
            _settlement_outbox(settled),
            votes_before=tuple(d.slack_user_id for d in votes_seen),
            dropped=dropped,
        ):
            return None
        if not settled.settled:
            return await self.get(settled.approval_id)  # a quorum vote; still pending
        metrics.SETTLEMENTS.labels(settled.status.value).inc()
        log.info(
            "approval settled",
            extra={
                "action": "settle",
                "approval_id": settled.approval_id,
                "status": settled.status.value,
            },
        )
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

    async def queue_for(
        self, slack_user_id: str, directory: ApproverDirectory, limit: int = 20
    ) -> tuple[list[models.Approval], list[models.Approval]]:
        """What this person may decide now (pending, eligible by the same rule a click uses,
        not already voted), and what they requested (with status), newest first."""
        current = self._policy()
        groups = frozenset(g for role in current.roles.values() for g in role.usergroups)
        approver = await directory.approver(slack_user_id, groups)
        decidable = []
        for approval in await self._store.list_pending(200):
            verdict = _judge(approval, approver, current)
            voted = any(d.slack_user_id == slack_user_id for d in approval.decided_by)
            if verdict.allowed and not voted and not states.is_expired(approval, self._clock()):
                decidable.append(approval)
        requested = await self._store.list_requested_by(slack_user_id, approver.email, limit)
        return decidable[:limit], requested

    async def fire_timers(self, limit: int = 100) -> int:
        """Fire due reminders and escalations (each once, whichever replica gets it)."""
        fired = await self._store.fire_due_timers(self._clock(), limit)
        for timer in fired:
            log.info(
                "timer fired",
                extra={"action": timer.kind, "approval_id": timer.approval_id, "step": timer.step},
            )
        return len(fired)

    async def expire_due(self, limit: int = 100) -> int:
        """Expire every pending approval past ``expires_at``; returns how many this call did."""
        now = self._clock()
        count = 0
        for approval_id in await self._store.pending_expired(now, limit):
            approval = await self.get(approval_id)
            if approval.settled:
                continue
            if await self._settle(approval, states.Expire(at=now), None, now) is not None:
                count += 1
        return count

    async def click(
        self,
        approval_id: str,
        *,
        action: Action,
        slack_user_id: str,
        directory: ApproverDirectory,
        reason: str | None = None,
    ) -> ClickResult:
        """A Slack button click: settle if the clicker may decide, else record why not.

        Raises NotFound for an unknown id. Every outcome is stored as an attempt.
        """
        approval = await self.get(approval_id)
        if approval.settled:
            return await self._stale(approval, slack_user_id, action)
        current = self._policy()
        approver = await directory.approver(
            slack_user_id,
            frozenset(g for m in _members(approval, current) for g in m.usergroups),
        )
        now = self._clock()

        def attempt(outcome: models.AttemptOutcome, detail: str = "") -> models.Attempt:
            return models.Attempt(
                approval_id=approval_id,
                slack_user_id=slack_user_id,
                email=approver.email,
                name=approver.name,
                action=action,
                outcome=outcome,
                detail=detail,
                at=now,
            )

        if states.is_expired(approval, now):
            expired = await self._settle(
                approval, states.Expire(at=now), attempt(models.AttemptOutcome.EXPIRED), now
            )
            if expired is None:
                return await self._stale(await self.get(approval_id), slack_user_id, action)
            return Expired(expired)
        verdict = _judge(approval, approver, current)
        if not verdict.allowed:
            await self._store.record_attempt(
                attempt(models.AttemptOutcome(verdict.outcome.value), verdict.reason)
            )
            log.info(
                "click refused",
                extra={
                    "action": "click",
                    "approval_id": approval_id,
                    "outcome": verdict.outcome.value,
                    "slack_user_id": slack_user_id,
                },
            )
            return Refused(approval, verdict)
        decider = models.Decider(
            slack_user_id=slack_user_id, name=approver.name, email=approver.email, at=now
        )
        decision: states.Decision = (
            states.Approve(by=decider)
            if action == "approve"
            else states.Deny(by=decider, reason=reason or None)
        )
        return await self._count(approval, decision, attempt, directory, now)

    async def _count(
        self,
        approval: models.Approval,
        decision: states.Decision,
        attempt: Callable[[models.AttemptOutcome, str], models.Attempt],
        directory: ApproverDirectory,
        now: datetime,
    ) -> ClickResult:
        """Apply an eligible click. Concurrent quorum votes race on the compare-and-set: the
        loser re-reads and applies its vote again on top of the winner's (bounded; each round
        someone's vote landed)."""
        approval_id = approval.approval_id
        clicker = attempt(models.AttemptOutcome.ACCEPTED, "")
        person = authority.Person(slack_user_id=clicker.slack_user_id, email=clicker.email)
        for _ in range(QUORUM_RETRIES):
            if approval.settled:
                break
            if isinstance(decision, states.Approve) and any(
                person.is_same(authority.Person(slack_user_id=d.slack_user_id, email=d.email))
                for d in approval.decided_by
            ):
                await self._store.record_attempt(
                    attempt(models.AttemptOutcome.DUPLICATE, "already counted")
                )
                return Duplicate(approval)
            kept, dropped = await self._votes_that_hold(approval, decision, directory, now)
            settled = await self._settle(
                approval.evolve(decided_by=kept) if dropped else approval,
                decision,
                clicker,
                now,
                seen=approval.decided_by,
                dropped=dropped,
            )
            if settled is not None:
                return Settled(settled) if settled.settled else Voted(settled)
            approval = await self.get(approval_id)
        return await self._stale(approval, clicker.slack_user_id, clicker.action)

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
        current = self._policy()
        groups = frozenset(g for m in _members(approval, current) for g in m.usergroups)
        kept: list[models.Decider] = []
        dropped: list[models.Attempt] = []
        for vote in votes:
            facts = await directory.approver(vote.slack_user_id, groups)
            verdict = _judge(approval, facts, current)
            if verdict.allowed:
                kept.append(vote)
                continue
            dropped.append(
                models.Attempt(
                    approval_id=approval.approval_id,
                    slack_user_id=vote.slack_user_id,
                    email=vote.email,
                    name=vote.name,
                    action="approve",
                    outcome=models.AttemptOutcome.VOTE_DROPPED,
                    detail=f"no longer counts at settlement: {verdict.reason}",
                    at=now,
                )
            )
        return tuple(kept), tuple(dropped)

    async def _stale(self, approval: models.Approval, slack_user_id: str, action: Action) -> Stale:
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
