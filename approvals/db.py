"""The database as the stores see it: the named queries of ``sql/queries.sql``, run by name.

:mod:`approvals.pg_db` implements it over PostgreSQL through asyncpg, the one module that imports
asyncpg; the stores (:mod:`approvals.repository` and :mod:`approvals.audit_store`, the audit
chain's), where rows become models, type against this protocol only, so nothing above them
depends on the driver.

Rows are read by column name only (``row["status"]``), never by position, so asyncpg's
``Record`` passes through as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

__all__ = ["Connection", "Database", "Listener", "Row"]


class Row(Protocol):
    """One result row, read by column name."""

    def __getitem__(self, column: str, /) -> Any: ...


Listener = Callable[[str], None]
"""Called with the payload of each notification on the channel it listens to."""


class Connection(Protocol):
    """Runs named queries (``query`` is a ``-- name:`` of ``sql/queries.sql``).

    Inside :meth:`Database.transaction` everything commits together or not at all."""

    async def fetch(self, query: str, *args: Any) -> Sequence[Row]: ...

    async def fetchrow(self, query: str, *args: Any) -> Row | None: ...

    async def fetchval(self, query: str, *args: Any) -> Any:
        """The first column of the first row (``None`` without a row)."""

    async def execute(self, query: str, *args: Any) -> None: ...

    async def executemany(self, query: str, args: Iterable[Sequence[Any]]) -> None: ...

    async def notify(self, channel: str, payload: str = "") -> None:
        """Tell every listener of ``channel`` (in any process); inside a transaction the
        notification is delivered only when it commits, and never if it rolls back."""


class Database(Connection, Protocol):
    """A connection per statement, transactions, and notifications."""

    def transaction(self) -> AbstractAsyncContextManager[Connection]:
        """A connection whose statements commit on a normal exit and roll back on an
        exception (cancellation included)."""

    def snapshot(self) -> AbstractAsyncContextManager[Connection]:
        """A read-only connection whose statements all see the database as of one instant
        (several reads that must agree, e.g. the audit export's tables)."""

    async def listen(self, channel: str, listener: Listener) -> None:
        """Call ``listener`` for every notification on ``channel`` from now on. Best effort:
        callers wait with a timeout and poll as a backstop."""

    async def close(self) -> None: ...
