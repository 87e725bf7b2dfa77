"""Prometheus metrics of the core (served by the bot at ``/metrics``).

Counters and histograms are updated where things happen. The gauges describe the database (the
outbox backlog and its age, dead letters, pending approvals): they are set from a
:class:`Snapshot` that the ``/metrics`` handler reads just before each scrape is rendered, so they
are never staler than the scrape and cost nothing between scrapes. Every replica reports the
same database-wide values: aggregate them with ``max``, not ``sum``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client import Counter, Gauge, Histogram

from approvals import models

__all__ = [
    "APPROVALS_CREATED",
    "CARD_POSTED_SECONDS",
    "CLICKS",
    "CLICK_SETTLED_SECONDS",
    "CLOCK_OFFSET_SECONDS",
    "DATABASE_UP",
    "DEAD_LETTERS",
    "DELIVERIES",
    "DELIVERY_SECONDS",
    "EDITS",
    "EDITS_CALLED_AGAIN",
    "EXECUTIONS",
    "GRANTS",
    "GRANT_APPROVALS",
    "OUTBOX_BACKLOG",
    "OUTBOX_DEAD",
    "OUTBOX_OLDEST_SECONDS",
    "PENDING_APPROVALS",
    "POLICY_APPROVALS",
    "READY",
    "SETTLED_DELIVERED_SECONDS",
    "SETTLEMENTS",
    "SLACK_ERRORS",
    "SLACK_PACED_WAITS",
    "Backlog",
    "Snapshot",
    "publish",
]

APPROVALS_CREATED = Counter("countersign_approvals_created", "Approvals created", ["agent"])
SETTLEMENTS = Counter("countersign_settlements", "Approvals settled", ["status"])
CLICKS = Counter("countersign_clicks", "Button clicks by outcome", ["outcome"])
EDITS = Counter("countersign_edits", "Edits applied by reviewers (approve with edits)")
EDITS_CALLED_AGAIN = Counter(
    "countersign_edits_called_again",
    "Calls again with a reviewer's edited arguments, approved at once on that edit",
)
GRANTS = Counter(
    "countersign_grants", "Standing grants, by what happened to them", ["event"]
)  # event: granted, revoked
POLICY_APPROVALS = Counter(
    "countersign_policy_approvals",
    "Calls approved at once by a rule that decides by itself (decide: approve), per rule",
    ["rule"],
)
GRANT_APPROVALS = Counter(
    "countersign_grant_approvals",
    "Calls approved at once by a standing grant, per rule",
    ["rule"],
)
EXECUTIONS = Counter(
    "countersign_executions",
    "Claims to run approved calls and their outcomes (claimed, already_claimed, called_again, "
    "lapsed, outcome_ok, outcome_error)",
    ["result"],
)
DELIVERIES = Counter(
    "countersign_outbox_deliveries", "Outbox delivery attempts", ["kind", "result"]
)
DEAD_LETTERS = Counter(
    "countersign_outbox_dead_letters", "Outbox rows given up after the retry budget", ["kind"]
)
DELIVERY_SECONDS = Histogram(
    "countersign_outbox_delivery_seconds", "Duration of one delivery attempt", ["kind"]
)
SLACK_PACED_WAITS = Counter(
    "countersign_slack_paced_waits",
    "Slack writes that waited their channel's turn (pacing under Slack's rate limits), by call",
    ["call"],
)
SLACK_ERRORS = Counter(
    "countersign_slack_errors",
    "Slack Web API calls refused, by Slack's error code; permanent: only a person can fix it "
    "(the log says how)",
    ["code", "permanent"],
)

# From a second to a day: a card or a callback waits out Slack's or the agent's outages
_WAIT_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 86400)
CARD_POSTED_SECONDS = Histogram(
    "countersign_card_posted_seconds",
    "From an approval's submission to its card posted in Slack",
    buckets=_WAIT_BUCKETS,
)
CLICK_SETTLED_SECONDS = Histogram(
    "countersign_click_settled_seconds",
    "From an approver's click arriving to the approval settled by it",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
SETTLED_DELIVERED_SECONDS = Histogram(
    "countersign_settled_delivered_seconds",
    "From an approval's settlement to its decision delivered to the agent's callback",
    buckets=_WAIT_BUCKETS,
)

OUTBOX_BACKLOG = Gauge(
    "countersign_outbox_backlog", "Outbox rows not delivered yet (nor dead), by kind", ["kind"]
)
OUTBOX_OLDEST_SECONDS = Gauge(
    "countersign_outbox_oldest_seconds",
    "Age of the oldest outbox row not delivered yet, by kind (0 without one)",
    ["kind"],
)
OUTBOX_DEAD = Gauge(
    "countersign_outbox_dead",
    "Outbox rows dead-lettered and not redriven, by kind (countersign redrive <approval_id>)",
    ["kind"],
)
PENDING_APPROVALS = Gauge(
    "countersign_pending_approvals", "Approvals waiting for a decision, by policy rule", ["rule"]
)
DATABASE_UP = Gauge(
    "countersign_database_up",
    "1 when this scrape read the gauges above from the database; 0: it did not answer, and "
    "they hold the values of the last scrape that could",
)
READY = Gauge(
    "countersign_ready",
    "1 when this process passes the readiness check, by check (database, slack, relay): what "
    "/readyz answers, read at each scrape",
    ["check"],
)
CLOCK_OFFSET_SECONDS = Gauge(
    "countersign_clock_offset_seconds",
    "How far the database's clock is ahead of this host's (this process keeps time by the "
    "database's, so that replicas agree on due times)",
)


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """What the database holds now, for the gauges."""

    backlog: Mapping[models.OutboxKind, Backlog]
    dead: Mapping[models.OutboxKind, int]
    pending: Mapping[str, int]  # by rule


@dataclass(frozen=True, kw_only=True)
class Backlog:
    """The outbox rows of one kind still to deliver."""

    rows: int
    oldest_seconds: float


def publish(snapshot: Snapshot) -> None:
    """Set the gauges to ``snapshot``: every outbox kind has a value (0 when it has no rows),
    and a rule with nothing pending any more drops out."""
    for kind in models.OutboxKind:
        backlog = snapshot.backlog.get(kind, Backlog(rows=0, oldest_seconds=0.0))
        OUTBOX_BACKLOG.labels(kind.value).set(backlog.rows)
        OUTBOX_OLDEST_SECONDS.labels(kind.value).set(backlog.oldest_seconds)
        OUTBOX_DEAD.labels(kind.value).set(snapshot.dead.get(kind, 0))
    PENDING_APPROVALS.clear()
    for rule, count in snapshot.pending.items():
        PENDING_APPROVALS.labels(rule).set(count)
