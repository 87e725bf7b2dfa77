"""The core of Countersign: models, the pure lifecycle, the service, the repository, the audit
chain's store and the outbox relay.

Nothing here imports Slack or aiohttp; only :mod:`approvals.pg_db` imports asyncpg.
"""

__all__ = [
    "audit_chain",
    "audit_store",
    "clock",
    "core",
    "db",
    "errors",
    "frameworks",
    "hashing",
    "identity",
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
