"""The core, wired once: the approval service, the turn service and the outbox relay over one
store, one policy source and one clock.

The edges build a :class:`Core` and use its parts; none of them passes the policy or the clock
to a service of its own. The relay's handlers for the edges' kinds of work (Slack, agent
callbacks, paging) come in from outside as a plain mapping from kind to handler; the core adds
its own for its own work and never hands itself to an edge:

- once an edge's handler has posted a card, the core checks at once whether anyone but the
  requester could decide (only when an on-call channel and a user group make it matter), with
  the members of each user group from a plain port the edge supplies (``members``): nobody else
  can decide → escalate at once. (Rows of :class:`~approvals.models.CheckDeciders` work, which
  earlier versions queued for that check, are still run.)
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import assert_never

from approvals import errors, models, outbox, policy, retry, service, turn_service
from approvals.clock import Clock, utcnow
from approvals.repository import Repository

__all__ = ["EDGE_KINDS", "Core", "CurrentPolicy", "Handlers", "UsergroupMembers", "timer_sleep"]

log = logging.getLogger(__name__)

# The policy in force now: called on every use, so a reload is seen at once.
CurrentPolicy = Callable[[], policy.Policy]

# How soon the timer loop looks again at a row due but not taken (another replica's, in flight).
TIMER_RETRY_SECONDS = 0.005


def timer_sleep(
    until: float | None, took: bool, retry: float, interval: float
) -> tuple[float, float]:
    """How long the timer loop sleeps after a sweep, and its next ``retry``: ``until`` is the
    seconds to the earliest unfired timer or pending expiry (None: nothing waits, negative:
    due already), ``took`` whether the sweep expired or fired anything, ``retry`` how long it
    would wait for a row due but not taken, ``interval`` the longest sleep."""
    if until is None:
        return interval, TIMER_RETRY_SECONDS
    if until > 0:
        return min(interval, until), TIMER_RETRY_SECONDS
    if took:
        # fell due while the sweep ran (1 000 expiries falling due within a second or two): at
        # once. Backing off here, as for a row not taken, made each sweep of such a wave wait
        # twice as long as the one before (5, 10 … 160 ms late).
        return 0.0, TIMER_RETRY_SECONDS
    # due yet not taken (another replica holds it, SKIP LOCKED, or nothing could settle it):
    # look again soon, then less and less often, never spin
    return min(interval, retry), min(interval, retry * 2)


Handlers = Mapping[models.OutboxKind, outbox.Handler]
"""The edges' handler for each kind of outbox work they do (the kinds of :data:`EDGE_KINDS`)."""

EDGE_KINDS = frozenset(models.OutboxKind) - {models.OutboxKind.CHECK_DECIDERS}
"""The kinds of work whose I/O the edges do; the others are the core's own."""

UsergroupMembers = Callable[[str], Awaitable[frozenset[str]]]
"""A user group's members by Slack id (cached by the edge); raises when they cannot be told."""


class Core:
    """The services of one process, sharing its store, policy source and clock."""

    def __init__(
        self,
        *,
        store: Repository,
        policy: CurrentPolicy,
        handlers: Handlers,
        members: UsergroupMembers | None = None,
        clock: Clock = utcnow,
        delivery_budget: timedelta = timedelta(hours=24),
        delivery_max_delay: timedelta = timedelta(seconds=retry.MAX_DELAY),
        relay_concurrency: int = outbox.CONCURRENCY,
        poll_interval: float = 1.0,
        on_rest: Callable[[int], None] | None = None,
    ) -> None:
        if not_the_edges := sorted(handlers.keys() - EDGE_KINDS):
            raise ValueError(f"outbox work {not_the_edges} is the core's: no handler of an edge's")
        self.policy = policy
        self.clock = clock
        self._store = store
        self._members = members
        self.approvals = service.ApprovalService(store=store, policy=policy, clock=clock)
        self.turns = turn_service.TurnService(
            approvals=self.approvals, store=store, policy=policy, clock=clock
        )
        self.relay = outbox.Relay(
            store=store,
            handlers={
                kind: handler
                for kind in models.OutboxKind
                if (handler := self._handler(kind, handlers)) is not None
            },
            budget=delivery_budget,
            max_delay=delivery_max_delay,
            clock=clock,
            concurrency=relay_concurrency,
            poll_interval=poll_interval,
            on_rest=on_rest,
        )

    def _handler(self, kind: models.OutboxKind, edge: Handlers) -> outbox.Handler | None:
        """The relay's handler for ``kind``: the edge's, the core's, or the edge's followed by
        the core's (None: an edge's kind the edge does not do, e.g. in a test's world)."""
        match kind:
            case models.OutboxKind.POST_CARD:
                post = edge.get(kind)
                return None if post is None else functools.partial(self._post_card, post)
            case models.OutboxKind.CHECK_DECIDERS:
                return self._check_deciders
            case (
                models.OutboxKind.UPDATE_CARD
                | models.OutboxKind.CALLBACK
                | models.OutboxKind.REMIND
                | models.OutboxKind.ESCALATE
                | models.OutboxKind.PAGE
                | models.OutboxKind.LOG_LINE
            ):
                return edge.get(kind)
            case unreachable:
                assert_never(unreachable)

    async def _post_card(self, post: outbox.Handler, item: models.OutboxItem) -> None:
        """The edge posts the card; then (again after a retry: at least once) the core checks
        who could decide, in the same delivery: no second row to queue, claim and record per
        card. A failure to escalate fails the row; its retry finds the card posted and checks
        again."""
        await post(item)
        await self._check_deciders(item)

    async def _check_deciders(self, item: models.OutboxItem) -> None:
        await self.approvals.escalate_if_nobody_can_decide(
            item.approval_id, functools.partial(self._group_members, item.approval_id)
        )

    async def _group_members(self, approval_id: str, usergroup: str) -> frozenset[str] | None:
        """A user group's members, or None when they cannot be told now: the card is up either
        way, so the early-escalation check is skipped (logged) and the ordinary ladder runs."""
        try:
            if self._members is None:
                raise LookupError("no user group directory was given to the core")
            return await self._members(usergroup)
        except Exception as exc:  # any failure means "unknown", never "nobody holds the role"
            log.warning(
                "user group lookup failed: no early escalation",
                extra={
                    "action": "check_deciders",
                    "approval_id": approval_id,
                    "usergroup": usergroup,
                    "error": repr(exc),
                },
                exc_info=exc,
            )
            return None

    async def run_timers(self, interval: float) -> None:
        """Reminders, escalations and expiry, each as soon as it is due, until cancelled.

        The loop sleeps until the earliest unfired timer or pending expiry, and is woken early
        by a notification when an approval or timer due sooner is created (on any replica);
        ``interval`` bounds every sleep, so a notification lost (the listening connection
        reopening) costs at most that much delay. All state is in the store: a restart loses
        nothing and fires what fell due meanwhile."""
        store = self._store
        retry = TIMER_RETRY_SECONDS
        while True:
            timeout = interval
            try:
                took = False  # whether this sweep expired or fired anything
                # expiry first: a reminder for a request already past expires_at is noise
                while await self.approvals.expire_due() > 0:
                    took = True
                while await self.approvals.fire_timers() > 0:
                    took = True
                due = await store.timers_next_due()
                until = None if due is None else (due - self.clock()).total_seconds()
                timeout, retry = timer_sleep(until, took, retry, interval)
            except errors.DatabaseUnavailable as exc:  # no traceback: the database says why
                log.warning("timer sweep: %s", exc, extra={"action": "timers"})
            except Exception:
                log.exception("timer sweep failed", extra={"action": "timers"})
            await store.wait_for_timers(self.clock() + timedelta(seconds=timeout), timeout)

    async def run_sealer(self, interval: float) -> None:
        """Seal the audit's new events every ``interval`` seconds until cancelled (each replica
        runs this; one seals at a time, the others skip their turn). Each seal's hash is logged:
        kept outside the database, it is what ``countersign audit verify --head`` checks
        against."""
        while True:
            try:
                seal = await self._store.audit.seal(self.clock())
                if seal is not None:
                    log.info(
                        "audit sealed",
                        extra={
                            "action": "audit_seal",
                            "seq": seal.seq,
                            "events": seal.count,
                            "hash": seal.hash,
                        },
                    )
            except errors.DatabaseUnavailable as exc:  # no traceback: the database says why
                log.warning("audit seal: %s", exc, extra={"action": "audit_seal"})
            except Exception:
                log.exception("audit seal failed", extra={"action": "audit_seal"})
            await asyncio.sleep(interval)
