"""The core of Countersign: models, the pure lifecycle, the service, the repository and the
outbox relay.

Nothing here imports Slack or aiohttp; only :mod:`approvals.pg_db` imports asyncpg.
"""

__all__ = [
    "core",
    "db",
    "errors",
    "hashing",
    "identity",
    "memory_db",
    "metrics",
    "models",
    "outbox",
    "pg_db",
    "policy",
    "repository",
    "resource",
    "retry",
    "service",
    "sql_loader",
    "states",
    "turn_service",
]
