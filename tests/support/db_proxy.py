"""A loopback TCP proxy in front of PostgreSQL that a test can cut, to play a database that
goes away and comes back while the bot keeps running in the test's process.

``down()`` closes every proxied connection at once (as a server restart does: the bot sees its
connections drop mid-statement) and refuses new ones until ``up()``. The fault suite stops a
real server; this is the in-process version for integration tests.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import parse_qs, urlsplit, urlunsplit

__all__ = ["DatabaseProxy"]


class DatabaseProxy:
    def __init__(self, dsn: str) -> None:
        self._target = urlsplit(dsn)
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.StreamWriter] = set()
        self._up = True
        self.refused = 0  # connections refused while down

    @property
    def dsn(self) -> str:
        """``dsn`` through this proxy (TCP on loopback, same user and database)."""
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        user = self._target.username or "postgres"
        return urlunsplit(self._target._replace(netloc=f"{user}@127.0.0.1:{port}", query=""))

    async def start(self) -> DatabaseProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def stop(self) -> None:
        self.down()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def down(self) -> None:
        self._up = False
        for writer in list(self._pipes):
            writer.transport.abort()
        self._pipes.clear()

    def up(self) -> None:
        self._up = True

    async def _open_target(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        socket_dir = parse_qs(self._target.query).get("host", [None])[0]
        port = self._target.port or 5432
        if socket_dir:
            return await asyncio.open_unix_connection(f"{socket_dir}/.s.PGSQL.{port}")
        return await asyncio.open_connection(self._target.hostname or "127.0.0.1", port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._up:
            self.refused += 1
            writer.transport.abort()
            return
        target_reader, target_writer = await self._open_target()
        self._pipes.update((writer, target_writer))
        await asyncio.gather(
            _pipe(reader, target_writer), _pipe(target_reader, writer), return_exceptions=True
        )
        self._pipes.difference_update((writer, target_writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    finally:
        with contextlib.suppress(Exception):
            writer.transport.abort()
