"""What tests read back from a store, through the store's own production reads (no query of
their own, none kept in ``sql/queries.sql`` for them)."""

from __future__ import annotations

from datetime import UTC, datetime

from approvals import models
from approvals.repository import Repository

__all__ = ["audit_events", "outbox_counts"]

# later than any row a test writes: every row not delivered is counted as waiting
_END_OF_TIME = datetime(9999, 1, 1, tzinfo=UTC)


async def outbox_counts(store: Repository) -> tuple[int, int]:
    """(rows still to deliver, dead-lettered rows), due now or later: the gauges' reads."""
    snapshot = await store.snapshot(_END_OF_TIME)
    backlog = sum(b.rows for b in snapshot.backlog.values())
    return backlog, sum(snapshot.dead.values())


async def audit_events(store: Repository, since: datetime) -> list[models.AuditEvent]:
    """The audit's events at or after ``since``, oldest first (at one instant, by kind), as the
    export reads them; deliveries aside (what the approval's own trail records)."""
    held, _seals = await store.audit.export(since)
    return [e.audit_event() for e, _ in held if e.kind != "delivery"]
