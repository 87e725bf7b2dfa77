"""Command-line entry points of the client package, each telling which extra it needs when that
extra is not installed (a line naming it, never a traceback)."""

from __future__ import annotations

import importlib
import sys

__all__ = ["EXTRA_FOR", "mcp_permission"]

# the third-party packages each adapter imports, by the extra that brings them
EXTRA_FOR = {"mcp": "claude-code", "mcp_types": "claude-code", "anyio": "claude-code"}


def mcp_permission() -> int:
    """Claude Code's permission-prompt tool: an MCP server on stdio (COUNTERSIGN_URL,
    COUNTERSIGN_TOKEN)."""
    try:
        adapter = importlib.import_module("countersign_client.adapters.claude_code")
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in EXTRA_FOR:
            raise
        extra = EXTRA_FOR[missing]
        print(
            f"countersign mcp-permission needs the {extra} extra (the {missing!r} package is "
            f"not installed): pip install 'countersign-client[{extra}]'",
            file=sys.stderr,
        )
        return 2
    adapter.main()
    return 0


def main() -> None:
    """``countersign-mcp-permission``."""
    sys.exit(mcp_permission())
