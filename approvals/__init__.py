"""The core of Countersign: models, the pure lifecycle, the service, stores and the outbox relay.

Nothing here imports Slack or aiohttp; only :mod:`approvals.pg_store` imports asyncpg.
"""

__all__ = [
    "errors",
    "hashing",
    "memory_store",
    "metrics",
    "models",
    "outbox",
    "pg_store",
    "policy",
    "resource",
    "retry",
    "service",
    "sql_loader",
    "states",
    "store",
    "turn_policy",
    "turn_service",
]
