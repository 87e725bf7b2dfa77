"""Prometheus metrics of the core (served by the bot at ``/metrics``)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

__all__ = [
    "APPROVALS_CREATED",
    "CLICKS",
    "DEAD_LETTERS",
    "DELIVERIES",
    "DELIVERY_SECONDS",
    "SETTLEMENTS",
    "SLACK_ERRORS",
]

APPROVALS_CREATED = Counter("countersign_approvals_created", "Approvals created", ["agent"])
SETTLEMENTS = Counter("countersign_settlements", "Approvals settled", ["status"])
CLICKS = Counter("countersign_clicks", "Button clicks by outcome", ["outcome"])
DELIVERIES = Counter(
    "countersign_outbox_deliveries", "Outbox delivery attempts", ["kind", "result"]
)
DEAD_LETTERS = Counter(
    "countersign_outbox_dead_letters", "Outbox rows given up after the retry budget", ["kind"]
)
DELIVERY_SECONDS = Histogram(
    "countersign_outbox_delivery_seconds", "Duration of one delivery attempt", ["kind"]
)
SLACK_ERRORS = Counter(
    "countersign_slack_errors",
    "Slack Web API calls refused, by Slack's error code; permanent: only a person can fix it "
    "(the log says how)",
    ["code", "permanent"],
)
