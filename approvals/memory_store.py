"""An in-memory :class:`~approvals.store.Store` for unit tests: same protocol, same semantics."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from approvals import models

__all__ = ["MemoryStore"]


@dataclass
class _Row:
    entry: models.OutboxEntry
    id: int
    created_at: datetime
    next_attempt_at: datetime
    attempts: int = 0
    locked_until: datetime | None = None
    done_at: datetime | None = None
    dead_at: datetime | None = None
    last_error: str | None = None

    @property
    def open(self) -> bool:
        return self.done_at is None and self.dead_at is None


class MemoryStore:
    def __init__(self) -> None:
        self._approvals: dict[str, models.Approval] = {}
        self._by_request: dict[tuple[str, str, str], str] = {}
        self._attempts: list[models.Attempt] = []
        self._turns: list[models.TurnRecord] = []
        self._turn_by_request: dict[models.TurnKey, models.TurnRecord] = {}
        self._turn_lock = asyncio.Lock()
        # (approval_id, kind, step) → [timer, fired_at]
        self._timers: dict[tuple[str, str, int], list[Any]] = {}
        self._outbox: list[_Row] = []
        self._ids = itertools.count(1)
        self._changed = asyncio.Condition()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _add_outbox(self, entries: Sequence[models.OutboxEntry], now: datetime) -> None:
        for entry in entries:
            self._outbox.append(_Row(entry, next(self._ids), now, now))

    async def create_approval(
        self,
        approval: models.Approval,
        outbox: Sequence[models.OutboxEntry],
        timers: Sequence[models.TimerEntry] = (),
    ) -> tuple[models.Approval, bool]:
        key = (approval.agent, approval.session_id, approval.request_id)
        existing = self._by_request.get(key)
        if existing is not None:
            stored = await self.get_approval(existing)
            assert stored is not None
            return stored, False
        self._approvals[approval.approval_id] = approval.evolve(
            decided_by=(), reason=None, decided_at=None, card=None, delivery=models.Delivery()
        )
        self._by_request[key] = approval.approval_id
        self._add_outbox(outbox, approval.created_at)
        for timer in timers:
            await self.schedule_timer(timer)
        await self._notify()
        stored = await self.get_approval(approval.approval_id)
        assert stored is not None
        return stored, True

    async def get_approval(self, approval_id: str) -> models.Approval | None:
        approval = self._approvals.get(approval_id)
        if approval is None:
            return None
        escalations = [
            e[1]
            for k, e in self._timers.items()
            if k[0] == approval_id and k[1] == "escalate" and e[1]
        ]
        if escalations:
            approval = approval.evolve(escalated_at=min(escalations))
        callbacks = [
            r
            for r in self._outbox
            if r.entry.approval_id == approval_id and r.entry.kind is models.OutboxKind.CALLBACK
        ]
        if callbacks:
            last = callbacks[-1]
            status: models.DeliveryStatus = (
                "delivered" if last.done_at else "dead_letter" if last.dead_at else "pending"
            )
            delivery = models.Delivery(
                status=status,
                attempts=last.attempts,
                last_error=last.last_error,
                delivered_at=last.done_at,
            )
            approval = approval.evolve(delivery=delivery)
        return approval

    async def settle(
        self,
        settled: models.Approval,
        attempt: models.Attempt | None,
        outbox: Sequence[models.OutboxEntry],
        *,
        votes_before: Sequence[str] = (),
        dropped: Sequence[models.Attempt] = (),
    ) -> bool:
        current = self._approvals[settled.approval_id]
        seen = [d.slack_user_id for d in current.decided_by]
        if current.status is not models.Status.PENDING or seen != list(votes_before):
            return False
        self._approvals[settled.approval_id] = current.evolve(
            status=settled.status,
            decided_by=settled.decided_by,
            reason=settled.reason,
            decided_at=settled.decided_at,
        )
        self._attempts.extend(dropped)
        if attempt is not None:
            self._attempts.append(attempt)
        now = settled.decided_at or (attempt.at if attempt else None)
        assert now is not None, "a quorum vote always comes with its attempt"
        self._add_outbox(outbox, now)
        await self._notify()
        return True

    async def record_attempt(self, attempt: models.Attempt) -> None:
        self._attempts.append(attempt)

    async def attempts(self, approval_id: str) -> list[models.Attempt]:
        return [a for a in self._attempts if a.approval_id == approval_id]

    async def set_card(self, approval_id: str, card: models.CardRef) -> None:
        self._approvals[approval_id] = self._approvals[approval_id].evolve(card=card)

    async def pending_expired(self, now: datetime, limit: int) -> list[str]:
        due = [
            a
            for a in self._approvals.values()
            if a.status is models.Status.PENDING and a.expires_at <= now
        ]
        return [a.approval_id for a in sorted(due, key=lambda a: a.expires_at)[:limit]]

    async def claim_outbox(
        self, now: datetime, lease_until: datetime, limit: int
    ) -> list[models.OutboxItem]:
        due = [
            r
            for r in self._outbox
            if r.open
            and r.next_attempt_at <= now
            and (r.locked_until is None or r.locked_until <= now)
        ]
        due.sort(key=lambda r: (r.next_attempt_at, r.id))
        claimed = []
        for row in due[:limit]:
            row.locked_until = lease_until
            claimed.append(
                models.OutboxItem(
                    id=row.id,
                    kind=row.entry.kind,
                    approval_id=row.entry.approval_id,
                    payload=row.entry.payload,
                    attempts=row.attempts,
                    created_at=row.created_at,
                )
            )
        return claimed

    def _row(self, item_id: int) -> _Row:
        return next(r for r in self._outbox if r.id == item_id)

    async def outbox_done(self, item_id: int, now: datetime) -> None:
        row = self._row(item_id)
        row.attempts += 1
        row.done_at, row.locked_until, row.last_error = now, None, None

    async def outbox_retry(self, item_id: int, next_attempt_at: datetime, error: str) -> None:
        row = self._row(item_id)
        row.attempts += 1
        row.next_attempt_at, row.last_error, row.locked_until = next_attempt_at, error, None

    async def outbox_release(self, item_id: int) -> None:
        row = self._row(item_id)
        if row.done_at is None:
            row.locked_until = None

    async def outbox_dead(
        self,
        item_id: int,
        now: datetime,
        error: str,
        follow_up: Sequence[models.OutboxEntry] = (),
    ) -> None:
        row = self._row(item_id)
        row.attempts += 1
        row.dead_at, row.last_error, row.locked_until = now, error, None
        self._add_outbox(follow_up, now)

    async def redrive(
        self, approval_id: str, now: datetime, follow_up: Sequence[models.OutboxEntry] = ()
    ) -> int:
        rows = [r for r in self._outbox if r.entry.approval_id == approval_id and r.dead_at]
        for row in rows:
            row.dead_at, row.locked_until = None, None
            row.next_attempt_at = row.created_at = now
        if rows:
            self._add_outbox(follow_up, now)
        await self._notify()
        return len(rows)

    async def outbox_next_due(self) -> datetime | None:
        return min(
            (
                max(r.next_attempt_at, r.locked_until or r.next_attempt_at)
                for r in self._outbox
                if r.open
            ),
            default=None,
        )

    async def outbox_counts(self) -> tuple[int, int]:
        return (
            sum(1 for r in self._outbox if r.open),
            sum(1 for r in self._outbox if r.dead_at is not None),
        )

    async def _wait(self, timeout: float) -> None:
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._changed.wait()

    async def wait_for_outbox(self, timeout: float) -> None:
        await self._wait(timeout)

    async def wait_for_settlement(self, approval_id: str, timeout: float) -> None:
        await self._wait(timeout)

    async def close(self) -> None:
        return None

    async def get_turn(self, key: models.TurnKey) -> models.TurnRecord | None:
        return self._turn_by_request.get(key)

    async def record_turn(self, record: models.TurnRecord) -> tuple[models.TurnRecord, bool]:
        stored = self._turn_by_request.get(record.key)
        if stored is not None:
            return stored, False
        self._turns.append(record)
        self._turn_by_request[record.key] = record
        return record, True

    async def decide_turn(
        self,
        key: models.TurnKey,
        counted: models.LeadWindow | None,
        decide: Callable[[int | None], models.TurnRecord | None],
    ) -> tuple[models.TurnRecord | None, bool]:
        # one lock for every lead: the stand-in for PostgreSQL's advisory lock, so a step that
        # ever awaits between the count and the record still can't interleave with another
        async with self._turn_lock:
            stored = self._turn_by_request.get(key)
            if stored is not None:
                return stored, False
            record = decide(None if counted is None else self._count_allowed(counted))
            if record is None:
                return None, False
            return await self.record_turn(record)

    async def turns_for_session(self, agent: str, session_id: str) -> list[models.TurnRecord]:
        return [t for t in self._turns if (t.agent, t.session_id) == (agent, session_id)]

    def _count_allowed(self, window: models.LeadWindow) -> int:
        return sum(
            1
            for t in self._turns
            if (t.agent, t.lead_key, t.tool_name, t.verdict)
            == (window.agent, window.lead_key, window.tool_name, "allow")
            and t.at > window.since
        )

    async def audit_since(self, since: datetime) -> list[models.AuditEvent]:
        events = [
            models.AuditEvent(
                kind="attempt",
                approval_id=a.approval_id,
                at=a.at,
                data=a.model_dump(
                    mode="json",
                    include={"slack_user_id", "email", "name", "action", "outcome", "detail"},
                ),
            )
            for a in self._attempts
            if a.at >= since
        ] + [
            models.AuditEvent(
                kind="settlement",
                approval_id=a.approval_id,
                at=a.decided_at,
                data={
                    "status": a.status.value,
                    "decided_by": [d.model_dump(mode="json") for d in a.decided_by],
                    "reason": a.reason,
                    "policy_version": a.policy_version,
                },
            )
            for a in self._approvals.values()
            if a.decided_at is not None and a.decided_at >= since
        ]
        events += [
            models.AuditEvent(
                kind="timer",
                approval_id=t.approval_id,
                at=fired_at,
                data={
                    "outcome": "reminded" if t.kind == "remind" else "escalated",
                    "step": t.step,
                    "due_at": t.due_at.isoformat(),
                },
            )
            for t, fired_at in (e for e in self._timers.values() if e[1] is not None)
            if fired_at >= since
        ]
        return sorted(events, key=lambda e: (e.at, e.kind))

    async def schedule_timer(self, timer: models.TimerEntry) -> None:
        self._timers.setdefault((timer.approval_id, timer.kind, timer.step), [timer, None])

    async def fire_due_timers(self, now: datetime, limit: int) -> list[models.TimerEntry]:
        due = sorted(
            (
                entry
                for entry in self._timers.values()
                if entry[1] is None and entry[0].due_at <= now
            ),
            key=lambda e: e[0].due_at,
        )[:limit]
        fired = []
        for entry in due:
            entry[1] = now
            approval = self._approvals[entry[0].approval_id]
            if approval.status is models.Status.PENDING:
                fired.append(entry[0])
        self._add_outbox(models.timer_outbox(fired), now)
        if fired:
            await self._notify()
        return fired

    async def list_pending(self, limit: int) -> list[models.Approval]:
        pending = [a for a in self._approvals.values() if a.status is models.Status.PENDING]
        newest = sorted(pending, key=lambda a: a.created_at, reverse=True)[:limit]
        return [a for a in [await self.get_approval(x.approval_id) for x in newest] if a]

    async def list_requested_by(
        self, slack_user_id: str, email: str | None, limit: int
    ) -> list[models.Approval]:
        mine = [
            a
            for a in self._approvals.values()
            if a.requester.slack_user_id == slack_user_id
            or (email is not None and a.requester.email == email)
        ]
        newest = sorted(mine, key=lambda a: a.created_at, reverse=True)[:limit]
        return [a for a in [await self.get_approval(x.approval_id) for x in newest] if a]

    async def fired_timers(self, approval_id: str) -> list[tuple[models.TimerEntry, datetime]]:
        fired = [(e[0], e[1]) for k, e in self._timers.items() if k[0] == approval_id and e[1]]
        return sorted(fired, key=lambda pair: pair[1])
