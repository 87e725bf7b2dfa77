"""The PostgreSQL store: a :class:`~approvals.repository.Repository` over
:mod:`approvals.pg_db`, under its old names (``PostgresStore.connect(dsn, ...)``)."""

# shim: removed once imports move to approvals.repository
from approvals.pg_db import DATABASE_UNAVAILABLE, migrate
from approvals.repository import Repository as PostgresStore

__all__ = ["DATABASE_UNAVAILABLE", "PostgresStore", "migrate"]
