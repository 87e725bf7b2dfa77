"""Lead-facing turns: gather the facts, ask the pure guard engine, act on its verdict, audit it.

The lead is never asked anything. ``allow`` and ``refuse`` are answered at once; ``escalate``
creates an internal approval through the normal approval path — its requester is the turn's
operator (or the agent's owner), the lead is recorded as an outsider who can never decide, and
the card goes to the internal reviewer channel only. A repeated turn for the same session and
tool call maps to the same approval (idempotent on its request id), so there is one card per
pending question.

A turn is idempotent on (agent, session_id, request_id), as approvals are: the same body again
is answered with the stored verdict and counts nothing; other content under those ids is a
:class:`~approvals.errors.TurnConflict`. Per-lead limits count a lead by its key
(:func:`approvals.models.lead_key`), and the count, the verdict and its record are one atomic
step of the repository (:meth:`~approvals.repository.Repository.decide_turn`), so concurrent
turns can't all see "none so far". Slack is asked about the operator's role before that step,
never inside it.
An escalation's verdict is recorded after its approval exists (``submit`` is a transaction of
its own, idempotent on the call id): a crash in between leaves an approval whose turn, resent,
finds it again and records the verdict then.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from approvals import clock, errors, hashing, models, policy, service
from approvals.repository import Repository
from guards import authority, turns

__all__ = ["TurnAnswer", "TurnService", "escalation_request_id", "turn_fingerprint"]

log = logging.getLogger(__name__)

NO_GUARDS = turns.GuardPolicy(stages=(), tools={})


def escalation_request_id(call_id: str) -> str:
    """One approval per pending tool call of a session, whatever the turn's own id."""
    return f"{models.TURN_REQUEST_PREFIX}{call_id}"


def turn_fingerprint(turn: models.TurnRequest) -> str:
    """SHA-256 of the validated body in canonical form: what "the same turn again" compares."""
    return hashing.sha256_hex(hashing.canonical_json(turn.model_dump(mode="json")))


@dataclass(frozen=True)
class TurnAnswer:
    record: models.TurnRecord
    approval: models.Approval | None
    replayed: bool = False  # the stored verdict of an identical earlier request


@dataclass
class _Judgement:
    """One turn with every fact but the lead's count, which the store supplies inside its
    transaction; called there, it keeps the verdict it reached (the escalation needs it after)."""

    agent: str
    turn: models.TurnRequest
    facts: turns.Facts
    guards: turns.GuardPolicy
    policy_version: str
    fingerprint: str
    verdict: turns.Verdict | None = None

    def __call__(self, lead_recent_calls: int | None) -> models.TurnRecord | None:
        """No I/O: the record of the verdict, or None for an escalation (recorded once its
        approval exists, outside the store's transaction)."""
        facts = replace(self.facts, lead_recent_calls=lead_recent_calls)
        self.verdict = turns.evaluate(self._engine_turn(), facts, self.guards)
        return None if self.verdict.verdict == "escalate" else self.record(self.verdict)

    def _engine_turn(self) -> turns.Turn:
        turn = self.turn
        return turns.Turn(
            channel=turn.channel,
            lead_id=turn.lead.id,
            tool=turn.tool.name,
            arguments=turn.tool.arguments,
            funnel=turn.funnel,
            has_operator=turn.operator is not None,
        )

    def record(
        self, verdict: turns.Verdict, approval: models.Approval | None = None
    ) -> models.TurnRecord:
        turn = self.turn
        return models.TurnRecord(
            agent=self.agent,
            session_id=turn.session_id,
            request_id=turn.request_id,
            channel=turn.channel,
            lead_id=turn.lead.id,
            tool_name=turn.tool.name,
            call_id=turn.tool.call_id,
            inputs_sha256=self.fingerprint,
            policy_version=self.policy_version,
            verdict=verdict.verdict,
            rule=verdict.rule,
            reason_code=verdict.reason_code,
            message=verdict.message,
            evaluated=_evaluated(verdict.evaluated),
            approval_id=approval.approval_id if approval else None,
            at=self.facts.now,
        )


def _evaluated(checks: tuple[turns.Check, ...]) -> tuple[dict[str, str], ...]:
    return tuple(
        {"rule": c.rule, "outcome": c.outcome, "reason_code": c.reason_code, "detail": c.detail}
        for c in checks
    )


def _lead_window(
    agent: str, turn: models.TurnRequest, guard: turns.ToolGuard | None, now: datetime
) -> models.LeadWindow | None:
    """The lead's earlier calls the guard's per-lead limit counts, or None when it has none."""
    if guard is None or guard.per_lead is None:
        return None
    return models.LeadWindow(
        agent=agent,
        lead_key=turn.lead.key,
        tool_name=turn.tool.name,
        since=now - timedelta(seconds=guard.per_lead.within),
    )


def _named_requester(
    turn: models.TurnRequest, agent: policy.AgentPolicy
) -> models.Requester | None:
    """The turn's operator, else the agent's owner (when the policy names one)."""
    if turn.operator is not None:
        return models.Requester.model_validate(turn.operator.model_dump())
    return agent.owner  # an Owner is a Requester that names somebody (its validator holds it)


def _requester(
    turn: models.TurnRequest, agent: policy.AgentPolicy, leads: tuple[models.Outsider, ...]
) -> models.Requester | None:
    """Who stands behind an escalation, or None when nobody internal can: the lead can never
    stand as the requester of their own question."""
    requester = _named_requester(turn, agent)
    if requester is None:
        return None
    person = authority.Person.of(requester)
    if any(person.is_same(authority.Person.of(lead)) for lead in leads):
        return None
    return requester


def _unescalatable(agent: str, turn: models.TurnRequest, verdict: turns.Verdict) -> turns.Verdict:
    """An escalation with nobody internal to stand behind it: four eyes could not hold, so the
    turn is refused (fail closed), with the reason in its audit."""
    check = turns.Check(
        rule="escalation",
        outcome="refuse",
        reason_code="missing_fact",
        detail=f"operator (or agents.{agent}.owner) is needed to escalate",
    )
    return turns.Verdict(
        verdict="refuse",
        rule=f"tools.{turn.tool.name}.escalation",
        reason_code="missing_fact",
        message=turns.LEAD_MESSAGES["missing_fact"],
        evaluated=(*verdict.evaluated, check),
    )


def _escalation_request(
    turn: models.TurnRequest,
    verdict: turns.Verdict,
    requester: models.Requester,
    decided: turns.Check,
) -> models.ApprovalRequest:
    """The internal approval an escalated turn asks for; ``decided`` is the check that escalated."""
    return models.ApprovalRequest(
        request_id=escalation_request_id(turn.tool.call_id),
        session_id=turn.session_id,
        tool=turn.tool,
        requester=requester,
        summary=turn.summary or f"Lead-facing {turn.tool.name} on {turn.channel}: {decided.detail}",
        context={
            "lead_facing": True,
            "channel": turn.channel,
            "lead_id": turn.lead.id,
            "guard_rule": verdict.rule,
            "why": decided.detail,
        },
        callback_url=turn.callback_url,
        expires_in=turn.expires_in,
        framework=turn.framework,
    )


def _log_decided(agent: str, turn: models.TurnRequest, record: models.TurnRecord) -> None:
    log.info(
        "turn decided",
        extra={
            "action": "turn",
            "agent": agent,
            "session_id": turn.session_id,
            "verdict": record.verdict,
            "rule": record.rule,
            "approval_id": record.approval_id,
        },
    )


class TurnService:
    def __init__(
        self,
        *,
        approvals: service.ApprovalService,
        store: Repository,
        policy: Callable[[], policy.Policy],
        clock: clock.Clock = clock.utcnow,
    ) -> None:
        self._approvals = approvals
        self._store = store
        self._policy = policy
        self._clock = clock

    async def _operator_roles(
        self,
        current: policy.Policy,
        guard: turns.ToolGuard | None,
        operator: models.Operator | None,
        directory: service.ApproverDirectory,
    ) -> frozenset[str] | None:
        """The guard's operator role if the operator holds it, checked now (None: unknown)."""
        if guard is None or guard.operator_role is None or operator is None:
            return None
        if operator.slack_user_id is None:
            return None  # roles are held by Slack identity; an e-mail alone cannot prove one
        role = service.role_members(current, guard.operator_role)
        held = frozenset({guard.operator_role})
        if authority.holds(authority.Approver(slack_user_id=operator.slack_user_id), role):
            return held  # listed by Slack id: Slack need not be asked
        facts = await directory.approver(operator.slack_user_id, role.usergroups)
        if facts.lookup_error is not None:
            return None
        return held if authority.holds(facts, role) else frozenset()

    async def decide(
        self, agent: str, turn: models.TurnRequest, directory: service.ApproverDirectory
    ) -> TurnAnswer:
        """The verdict on ``turn``: the stored one for an identical resend, else a new one,
        recorded. Raises TurnConflict when its ids are bound to other content."""
        key = models.TurnKey(agent=agent, session_id=turn.session_id, request_id=turn.request_id)
        fingerprint = turn_fingerprint(turn)
        stored = await self._store.get_turn(key)
        if stored is not None:  # a resend: answered without asking Slack anything
            return await self._replayed(stored, fingerprint)
        current = self._policy()
        guard_policy = current.turns.guards if current.turns is not None else NO_GUARDS
        guard = guard_policy.tools.get(turn.tool.name)
        now = self._clock()
        operator_roles = await self._operator_roles(current, guard, turn.operator, directory)
        judge = _Judgement(
            agent=agent,
            turn=turn,
            facts=turns.Facts(now=now, operator_roles=operator_roles),
            guards=guard_policy,
            policy_version=current.version,
            fingerprint=fingerprint,
        )
        window = _lead_window(agent, turn, guard, now)
        record, created = await self._store.decide_turn(key, window, judge)
        approval = None
        if record is None:  # an escalation: its approval first, then its verdict
            assert judge.verdict is not None
            approval, verdict = await self._escalate(agent, turn, judge.verdict, current)
            record, created = await self._store.record_turn(judge.record(verdict, approval))
        if not created:  # a concurrent writer of the same ids stored its verdict first
            return await self._replayed(record, fingerprint)
        _log_decided(agent, turn, record)
        return TurnAnswer(record=record, approval=approval)

    async def _replayed(self, stored: models.TurnRecord, fingerprint: str) -> TurnAnswer:
        """The stored verdict again, with its approval as it is now; other content under the
        same ids is a conflict, never a second verdict."""
        if stored.inputs_sha256 != fingerprint:
            raise errors.TurnConflict(stored.request_id)
        approval = None
        if stored.approval_id is not None:
            approval = await self._store.get_approval(stored.approval_id)
        return TurnAnswer(record=stored, approval=approval, replayed=True)

    async def _escalate(
        self,
        agent: str,
        turn: models.TurnRequest,
        verdict: turns.Verdict,
        current: policy.Policy,
    ) -> tuple[models.Approval | None, turns.Verdict]:
        """The approval an escalating verdict asks for, and the verdict to record: the same
        one, or a refusal when nobody internal can stand behind the request."""
        leads = turn.lead.outsiders()
        requester = _requester(turn, current.agents[agent], leads)
        if requester is None or verdict.escalate_to is None:
            return None, _unescalatable(agent, turn, verdict)
        decided = next(c for c in verdict.evaluated if c.outcome == "escalate")
        approval, _ = await self._approvals.submit(
            agent,
            _escalation_request(turn, verdict, requester, decided),
            escalation=service.Escalation(
                role=verdict.escalate_to, rule=verdict.rule, outsiders=leads, why=decided.detail
            ),
        )
        return approval, verdict

    async def history(self, agent: str, session_id: str) -> list[models.TurnRecord]:
        return await self._store.turns_for_session(agent, session_id)
