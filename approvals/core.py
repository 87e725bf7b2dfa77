"""The core, wired once: the approval service, the turn service and the outbox relay over one
store, one policy source and one clock.

The edges build a :class:`Core` and use its parts; none of them passes the policy or the clock
to a service of its own. The relay's handlers are the edges' (Slack, agent callbacks), so they
come in from outside, as a factory the core calls once its services exist: a handler that needs
a service (the card publisher escalates through the approval service) gets this core's, never a
second one with a clock of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import timedelta

from approvals import errors, models, outbox, policy, retry, service, turn_service
from approvals.repository import Repository

__all__ = ["Core", "CurrentPolicy", "Handlers"]

log = logging.getLogger(__name__)

# The policy in force now: called on every use, so a reload is seen at once.
CurrentPolicy = Callable[[], policy.Policy]

# How soon the timer loop looks again at a row due but not taken (another replica's, in flight).
TIMER_RETRY_SECONDS = 0.005

# The relay's handler for each kind of outbox row, built for the core that will run them.
Handlers = Callable[["Core"], Mapping[models.OutboxKind, outbox.Handler]]


class Core:
    """The services of one process, sharing its store, policy source and clock."""

    def __init__(
        self,
        *,
        store: Repository,
        policy: CurrentPolicy,
        handlers: Handlers,
        clock: service.Clock = service.utcnow,
        delivery_budget: timedelta = timedelta(hours=24),
        delivery_max_delay: timedelta = timedelta(seconds=retry.MAX_DELAY),
        poll_interval: float = 1.0,
    ) -> None:
        self.policy = policy
        self.clock = clock
        self._store = store
        self.approvals = service.ApprovalService(store=store, policy=policy, clock=clock)
        self.turns = turn_service.TurnService(
            approvals=self.approvals, store=store, policy=policy, clock=clock
        )
        # last: the handlers are given this core, its services already built
        self.relay = outbox.Relay(
            store=store,
            handlers=handlers(self),
            budget=delivery_budget,
            max_delay=delivery_max_delay,
            clock=clock,
            poll_interval=poll_interval,
        )

    async def run_timers(self, interval: float) -> None:
        """Reminders, escalations and expiry, each as soon as it is due, until cancelled.

        The loop sleeps until the earliest unfired timer or pending expiry, and is woken early
        by a notification when an approval or timer due sooner is created (on any replica);
        ``interval`` bounds every sleep, so a notification lost (the listening connection
        reopening) costs at most that much delay. All state is in the store: a restart loses
        nothing and fires what fell due meanwhile."""
        store = self._store
        retry = TIMER_RETRY_SECONDS  # doubled while a row stays due but untaken
        while True:
            timeout = interval
            try:
                # expiry first: a reminder for a request already past expires_at is noise
                while await self.approvals.expire_due() > 0:
                    pass
                while await self.approvals.fire_timers() > 0:
                    pass
                due = await store.timers_next_due()
                until = None if due is None else (due - self.clock()).total_seconds()
                if until is not None and until <= 0:
                    # due yet not taken (another replica holds it, SKIP LOCKED, or nothing
                    # could settle it): look again soon, then less and less often, never spin
                    timeout, retry = min(interval, retry), min(interval, retry * 2)
                elif until is not None:
                    timeout, retry = min(interval, until), TIMER_RETRY_SECONDS
            except errors.DatabaseUnavailable as exc:  # no traceback: the database says why
                log.warning("timer sweep: %s", exc, extra={"action": "timers"})
            except Exception:
                log.exception("timer sweep failed", extra={"action": "timers"})
            await store.wait_for_timers(self.clock() + timedelta(seconds=timeout), timeout)
