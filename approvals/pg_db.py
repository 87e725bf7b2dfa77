"""The PostgreSQL :class:`~approvals.db.Database`, through asyncpg, and the migrations.

The only module that imports asyncpg. It runs the named queries of ``sql/queries.sql`` and hands
back asyncpg's rows as they are (the repository reads them by column name); what the rows mean
is :mod:`approvals.repository`'s business.

A pool serves the statements; one more connection, of its own, listens for notifications.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import asyncpg

from approvals import db, sql_loader

__all__ = ["DATABASE_UNAVAILABLE", "PostgresDatabase", "migrate"]

log = logging.getLogger(__name__)

# Any constant works: it only has to be the same in every process that migrates.
MIGRATION_LOCK = 0x636F756E7465  # "counte"

_QUERIES = sql_loader.queries()
_NOTIFY = "SELECT pg_notify($1, $2)"

# Connection-level failures, for callers that must not import asyncpg (the CLI).
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (asyncpg.PostgresError, asyncpg.InterfaceError)
Conn = asyncpg.Connection | asyncpg.pool.PoolConnectionProxy


def _sql(query: str) -> str:
    try:
        return _QUERIES[query]
    except KeyError:
        raise LookupError(f"no query named {query!r} in sql/queries.sql") from None


async def _init_connection(conn: Conn) -> None:
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name, encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
        )


async def _keep_session(conn: Conn) -> None:
    """Pool connections never LISTEN, SET or take advisory locks (the listener and migrations
    use their own connections), so asyncpg's reset query on every release is pure overhead: it
    cost ~15 % of intake throughput in `make bench`. asyncpg still rolls back an open
    transaction before calling this."""


async def migrate(dsn: str) -> list[int]:
    """Apply the migrations not applied yet; returns their versions.

    Idempotent, and safe when several processes start at once: an advisory lock serialises
    them, and each migration commits together with its row in ``schema_migrations``.
    """
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
            applied = []
            for version, name, sql in sql_loader.migrations():
                if version in done:
                    continue
                async with conn.transaction():
                    await conn.execute(sql)
                    await conn.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                        version,
                        name,
                    )
                log.info("migration applied", extra={"action": "migrate", "version": version})
                applied.append(version)
            return applied
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)
    finally:
        await conn.close()


class _Connection:
    """One pooled connection, in a transaction: NOTIFY sent here is delivered on commit."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        rows: list[asyncpg.Record] = await self._conn.fetch(_sql(query), *args)
        return rows

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        row: asyncpg.Record | None = await self._conn.fetchrow(_sql(query), *args)
        return row

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self._conn.fetchval(_sql(query), *args)

    async def execute(self, query: str, *args: Any) -> None:
        await self._conn.execute(_sql(query), *args)

    async def executemany(self, query: str, args: Iterable[Sequence[Any]]) -> None:
        await self._conn.executemany(_sql(query), args)

    async def notify(self, channel: str, payload: str = "") -> None:
        await self._conn.execute(_NOTIFY, channel, payload)


class PostgresDatabase:
    """A pool of connections plus one listening connection for notifications."""

    def __init__(self, pool: asyncpg.Pool, listener: asyncpg.Connection | None) -> None:
        self._pool = pool
        self._listener = listener

    @classmethod
    async def connect(
        cls, dsn: str, *, min_size: int = 2, max_size: int = 10, listen: bool = True
    ) -> PostgresDatabase:
        pool = await asyncpg.create_pool(
            dsn, min_size=min_size, max_size=max_size, init=_init_connection, reset=_keep_session
        )
        listener = await asyncpg.connect(dsn) if listen else None
        return cls(pool, listener)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[_Connection]:
        async with self._pool.acquire() as conn, conn.transaction():
            yield _Connection(conn)

    # One statement, one pooled connection: no context manager of our own in between, as
    # these run for every request.
    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with self._pool.acquire() as conn:
            rows: list[asyncpg.Record] = await conn.fetch(_sql(query), *args)
            return rows

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        async with self._pool.acquire() as conn:
            row: asyncpg.Record | None = await conn.fetchrow(_sql(query), *args)
            return row

    async def fetchval(self, query: str, *args: Any) -> Any:
        async with self._pool.acquire() as conn:
            return await conn.fetchval(_sql(query), *args)

    async def execute(self, query: str, *args: Any) -> None:
        async with self._pool.acquire() as conn:
            await conn.execute(_sql(query), *args)

    async def executemany(self, query: str, args: Iterable[Sequence[Any]]) -> None:
        async with self._pool.acquire() as conn:
            await conn.executemany(_sql(query), args)

    async def notify(self, channel: str, payload: str = "") -> None:
        async with self._pool.acquire() as conn:
            await conn.execute(_NOTIFY, channel, payload)

    async def listen(self, channel: str, listener: db.Listener) -> None:
        if self._listener is None:
            return  # connected with listen=False: waiters fall back on their timeouts

        def deliver(_conn: Conn, _pid: int, _channel: str, payload: object) -> None:
            listener(str(payload))

        await self._listener.add_listener(channel, deliver)

    async def close(self) -> None:
        if self._listener is not None:
            await self._listener.close()
        await self._pool.close()
