"""The PostgreSQL :class:`~approvals.db.Database`, through asyncpg, and the migrations.

The only module that imports asyncpg. It runs the named queries of ``sql/queries.sql`` and hands
back asyncpg's rows as they are (the repository reads them by column name); what the rows mean
is :mod:`approvals.repository`'s business.

A pool serves the statements; one more connection, of its own, listens for notifications.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any

import asyncpg

from approvals import db, errors, sql_loader

__all__ = ["DATABASE_UNAVAILABLE", "PostgresDatabase", "migrate"]

log = logging.getLogger(__name__)

# Any constant works: it only has to be the same in every process that migrates.
MIGRATION_LOCK = 0x636F756E7465  # "counte"

_QUERIES = sql_loader.queries()
_NOTIFY = "SELECT pg_notify($1, $2)"
# How long closing waits for borrowed connections before it terminates them.
CLOSE_GRACE_SECONDS = 10.0

# Connection-level failures, for callers that must not import asyncpg (the CLI).
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    errors.DatabaseUnavailable,
)

# The server is away, not the statement wrong: refused or lost connections, a server shutting
# down, starting up or out of connection slots, a pool connection that timed out. Each becomes
# errors.DatabaseUnavailable (the edges answer "try again"); any other error is a bug and stays.
_AWAY: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
)
_NOT_YET_BACK: tuple[type[BaseException], ...] = (*_AWAY, asyncpg.PostgresError)
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


def _away(exc: BaseException) -> bool:
    """Whether ``exc`` means the server is away. Besides :data:`_AWAY`: once the server drops a
    connection mid-statement, asyncpg may report its own state rather than the loss
    (``InterfaceError: ... the underlying connection is closed`` from a transaction's exit,
    ``InternalClientError: ... another operation is in progress`` from that connection)."""
    if isinstance(exc, (*_AWAY, asyncpg.InternalClientError)):
        return True
    return isinstance(exc, asyncpg.InterfaceError) and "connection is closed" in str(exc)


@contextlib.contextmanager
def _unavailable_if_away() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        if _away(exc):
            raise errors.DatabaseUnavailable(f"the database is unreachable: {exc}") from exc
        raise


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


class _Listening:
    """The one connection that LISTENs, kept listening: when the server drops it (a restart, a
    failover) it is opened again in the background and every channel subscribed again, so
    notifications come back without a restart. Meanwhile waiters poll, as they always may."""

    RETRY_SECONDS = (0.5, 1.0, 2.0, 5.0)  # then every 5 s until the server is back

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._subscriptions: dict[str, list[db.Listener]] = {}
        self._conn: asyncpg.Connection | None = None
        self._reopening: asyncio.Task[None] | None = None
        self._closed = False

    async def open(self) -> None:
        conn = await asyncpg.connect(self._dsn)
        for channel in self._subscriptions:
            await conn.add_listener(channel, self._deliver)
        conn.add_termination_listener(self._lost)
        self._conn = conn

    async def subscribe(self, channel: str, listener: db.Listener) -> None:
        first = channel not in self._subscriptions
        self._subscriptions.setdefault(channel, []).append(listener)
        if first and self._conn is not None and not self._conn.is_closed():
            await self._conn.add_listener(channel, self._deliver)

    def _deliver(self, _conn: object, _pid: int, channel: str, payload: object) -> None:
        for listener in self._subscriptions.get(channel, ()):
            listener(str(payload))

    def _lost(self, _conn: Conn) -> None:
        if self._closed or self._reopening is not None:
            return
        log.warning("notification connection lost; reopening", extra={"action": "listen"})
        self._reopening = asyncio.get_running_loop().create_task(self._reopen())

    async def _reopen(self) -> None:
        try:
            for attempt in itertools.count():
                await asyncio.sleep(self.RETRY_SECONDS[min(attempt, len(self.RETRY_SECONDS) - 1)])
                try:
                    await self.open()
                except _NOT_YET_BACK:
                    continue
                log.info("notification connection reopened", extra={"action": "listen"})
                # whatever was notified meanwhile is lost: wake every listener once to look
                for channel in self._subscriptions:
                    self._deliver(None, 0, channel, "")
                return
        finally:
            self._reopening = None

    async def close(self) -> None:
        self._closed = True
        if self._reopening is not None:
            self._reopening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reopening
        if self._conn is not None:
            self._conn.remove_termination_listener(self._lost)
            await self._conn.close()


class PostgresDatabase:
    """A pool of connections plus one listening connection for notifications."""

    def __init__(self, pool: asyncpg.Pool, listening: _Listening | None) -> None:
        self._pool = pool
        self._listening = listening

    @classmethod
    async def connect(
        cls, dsn: str, *, min_size: int = 2, max_size: int = 10, listen: bool = True
    ) -> PostgresDatabase:
        pool = await asyncpg.create_pool(
            dsn, min_size=min_size, max_size=max_size, init=_init_connection, reset=_keep_session
        )
        listening = _Listening(dsn) if listen else None
        if listening is not None:
            await listening.open()
        return cls(pool, listening)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[_Connection]:
        with _unavailable_if_away():
            # READ COMMITTED whatever the server's default: a lock taken in one statement and
            # read after in the next relies on a snapshot per statement (claim_lock)
            async with self._pool.acquire() as conn, conn.transaction(isolation="read_committed"):
                yield _Connection(conn)

    @contextlib.asynccontextmanager
    async def snapshot(self) -> AsyncIterator[_Connection]:
        with _unavailable_if_away():
            async with (
                self._pool.acquire() as conn,
                conn.transaction(isolation="repeatable_read", readonly=True),
            ):
                yield _Connection(conn)

    # One statement, one pooled connection: no context manager of our own in between beyond
    # the error translation, as these run for every request.
    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        with _unavailable_if_away():
            async with self._pool.acquire() as conn:
                rows: list[asyncpg.Record] = await conn.fetch(_sql(query), *args)
                return rows

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        with _unavailable_if_away():
            async with self._pool.acquire() as conn:
                row: asyncpg.Record | None = await conn.fetchrow(_sql(query), *args)
                return row

    async def fetchval(self, query: str, *args: Any) -> Any:
        with _unavailable_if_away():
            async with self._pool.acquire() as conn:
                return await conn.fetchval(_sql(query), *args)

    async def execute(self, query: str, *args: Any) -> None:
        with _unavailable_if_away():
            async with self._pool.acquire() as conn:
                await conn.execute(_sql(query), *args)

    async def executemany(self, query: str, args: Iterable[Sequence[Any]]) -> None:
        with _unavailable_if_away():
            async with self._pool.acquire() as conn:
                await conn.executemany(_sql(query), args)

    async def notify(self, channel: str, payload: str = "") -> None:
        with _unavailable_if_away():
            async with self._pool.acquire() as conn:
                await conn.execute(_NOTIFY, channel, payload)

    async def listen(self, channel: str, listener: db.Listener) -> None:
        if self._listening is None:
            return  # connected with listen=False: waiters fall back on their timeouts
        await self._listening.subscribe(channel, listener)

    async def close(self, *, grace: float = CLOSE_GRACE_SECONDS) -> None:
        """Close gracefully, waiting up to ``grace`` seconds for borrowed connections to come
        back, then terminate what is left: a shutdown is bounded even when a connection is never
        returned (asyncpg's ``Pool.close`` would wait for it forever)."""
        if self._listening is not None:
            await self._listening.close()
        try:
            await asyncio.wait_for(self._pool.close(), grace)
        except TimeoutError:
            log.warning(
                "database pool not closed within %s s; terminating its connections",
                grace,
                extra={"action": "close"},
            )
            self._pool.terminate()
