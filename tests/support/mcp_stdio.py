"""An MCP server started as a real stdio subprocess with the ``mcp`` SDK's own client
initialized on it: how Claude Code, Claude Desktop or Cursor start a local server."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from mcp import ClientSession, StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def stdio_session(
    args: Sequence[str], env: dict[str, str], command: str = sys.executable
) -> AsyncIterator[ClientSession]:
    """``<command> <args>`` (Python by default) in the checkout, an initialized session on its
    stdio; the server's stderr is replayed into the test's output (shown on failure)."""
    params = StdioServerParameters(command=command, args=list(args), env=env, cwd=ROOT)
    with tempfile.TemporaryFile("w+") as errlog:
        try:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                yield session
        finally:
            errlog.seek(0)
            sys.stderr.write(errlog.read())
