"""The store protocol: everything the core needs from persistence, nothing more.

Two implementations keep to it: :mod:`approvals.pg_store` (PostgreSQL, the real one) and
:mod:`approvals.memory_store` (in memory, for unit tests). One set of contract tests
(``tests/integration/test_store_contract.py``) runs against both so the fake cannot drift.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol

from approvals import models

__all__ = ["Store"]


class Store(Protocol):
    async def create_approval(
        self,
        approval: models.Approval,
        outbox: Sequence[models.OutboxEntry],
        timers: Sequence[models.TimerEntry] = (),
    ) -> tuple[models.Approval, bool]:
        """Insert ``approval``, its outbox rows and its timers in one transaction.

        Idempotent on (agent, session_id, request_id): when those ids exist already, nothing is
        written and the stored approval comes back with ``False``.
        """

    async def get_approval(self, approval_id: str) -> models.Approval | None: ...

    async def settle(
        self,
        settled: models.Approval,
        attempt: models.Attempt | None,
        outbox: Sequence[models.OutboxEntry],
        *,
        votes_before: Sequence[str] = (),
        dropped: Sequence[models.Attempt] = (),
    ) -> bool:
        """Compare-and-set from pending with exactly the quorum votes ``votes_before`` (the
        voters' Slack ids, in order) to ``settled`` (a settled status with its settlement row,
        or still pending with its new votes), with the attempt, the attempts of votes
        ``dropped`` at settlement and the outbox rows, in one transaction. ``False`` (and
        nothing written) when the approval had moved on: somebody else settled it or voted."""

    async def record_attempt(self, attempt: models.Attempt) -> None: ...

    async def attempts(self, approval_id: str) -> list[models.Attempt]: ...

    async def set_card(self, approval_id: str, card: models.CardRef) -> None: ...

    async def pending_expired(self, now: datetime, limit: int) -> list[str]:
        """Ids of pending approvals whose ``expires_at`` has passed."""

    async def claim_outbox(
        self, now: datetime, lease_until: datetime, limit: int
    ) -> list[models.OutboxItem]:
        """Lease up to ``limit`` due outbox rows (SKIP LOCKED: replicas never share a row)."""

    async def outbox_done(self, item_id: int, now: datetime) -> None: ...

    async def outbox_retry(self, item_id: int, next_attempt_at: datetime, error: str) -> None: ...

    async def outbox_dead(
        self,
        item_id: int,
        now: datetime,
        error: str,
        follow_up: Sequence[models.OutboxEntry] = (),
    ) -> None:
        """Dead-letter the row and, in the same transaction, queue ``follow_up`` (the card
        update that makes the dead letter visible)."""

    async def outbox_release(self, item_id: int) -> None:
        """Give a leased row back unchanged (the relay is stopping)."""

    async def redrive(
        self, approval_id: str, now: datetime, follow_up: Sequence[models.OutboxEntry] = ()
    ) -> int:
        """Make dead-lettered rows of ``approval_id`` due again (and queue ``follow_up`` if
        any were); returns how many."""

    async def outbox_next_due(self) -> datetime | None: ...

    async def outbox_counts(self) -> tuple[int, int]:
        """(rows still to deliver, dead-lettered rows)."""

    async def wait_for_outbox(self, timeout: float) -> None:
        """Return when new outbox work may exist (a notification) or after ``timeout``."""

    async def wait_for_settlement(self, approval_id: str, timeout: float) -> None:
        """Return when ``approval_id`` may have settled (a notification) or after ``timeout``."""

    async def get_turn(self, key: models.TurnKey) -> models.TurnRecord | None:
        """The verdict stored for these request ids, if any."""

    async def record_turn(self, record: models.TurnRecord) -> tuple[models.TurnRecord, bool]:
        """Store a lead-facing turn's verdict (append-only), idempotent on its :class:`TurnKey`:
        when those ids are stored already, nothing is written and the stored verdict comes back
        with ``False`` (whatever ``record`` says; the caller compares fingerprints)."""

    async def turns_for_session(self, agent: str, session_id: str) -> list[models.TurnRecord]:
        """The verdicts of one agent session, oldest first."""

    async def decide_turn(
        self,
        key: models.TurnKey,
        counted: models.LeadWindow | None,
        decide: Callable[[int | None], models.TurnRecord | None],
    ) -> tuple[models.TurnRecord | None, bool]:
        """Count, decide and record a turn as one atomic step (no I/O but the store's own).

        With the turn's lead serialised (for ``counted``: its agent, lead key and tool), the
        stored verdict for ``key`` comes back with ``False`` if there is one; else ``decide`` is
        called with how many calls ``counted`` allowed (``None`` without a limit) and the record
        it returns is stored like :meth:`record_turn`'s. ``decide`` is pure and quick: it runs
        inside the transaction. It returns ``None`` for a verdict that needs work outside the
        transaction first (an escalation's approval); then nothing is written: ``(None, False)``.
        """

    async def audit_since(self, since: datetime) -> list[models.AuditEvent]:
        """Every attempt and settlement at or after ``since``, oldest first."""

    async def schedule_timer(self, timer: models.TimerEntry) -> None:
        """Add a timer (ignored if that approval already has one of that kind and step)."""

    async def fire_due_timers(self, now: datetime, limit: int) -> list[models.TimerEntry]:
        """Mark due timers fired and, for approvals still pending, queue their outbox rows
        (one transaction); returns the timers that acted."""

    async def list_pending(self, limit: int) -> list[models.Approval]:
        """Pending approvals, newest first."""

    async def list_requested_by(
        self, slack_user_id: str, email: str | None, limit: int
    ) -> list[models.Approval]:
        """Approvals whose requester is this person (Slack id or e-mail), newest first."""

    async def fired_timers(self, approval_id: str) -> list[tuple[models.TimerEntry, datetime]]:
        """The reminders and escalations that fired for this approval, with when."""

    async def close(self) -> None: ...
