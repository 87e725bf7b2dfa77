"""Command-line entry points of the client package, each telling which extra it needs when that
extra is not installed (a line naming it, never a traceback)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from types import ModuleType

__all__ = ["EXTRA_FOR", "gateway_main", "main", "mcp_permission"]

# the third-party packages each command imports, by the extra that brings them
EXTRA_FOR = {"mcp": "claude-code", "mcp_types": "claude-code", "anyio": "claude-code"}
GATEWAY_EXTRA_FOR = {"mcp": "mcp", "mcp_types": "mcp", "anyio": "mcp", "yaml": "mcp"}


def _command(module: str, name: str, extra_for: Mapping[str, str]) -> ModuleType | None:
    """``module`` imported, or None after saying on stderr which extra it needs."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in extra_for:
            raise
        extra = extra_for[missing]
        print(
            f"{name} needs the {extra} extra (the {missing!r} package is not installed): "
            f"pip install 'countersign-client[{extra}]'",
            file=sys.stderr,
        )
        return None


def mcp_permission() -> int:
    """Claude Code's permission-prompt tool: an MCP server on stdio (COUNTERSIGN_URL,
    COUNTERSIGN_TOKEN)."""
    adapter = _command(
        "countersign_client.adapters.claude_code", "countersign mcp-permission", EXTRA_FOR
    )
    if adapter is None:
        return 2
    adapter.main()
    return 0


def main() -> None:
    """``countersign-mcp-permission``."""
    sys.exit(mcp_permission())


def gateway_main() -> None:
    """``countersign-mcp-gateway --config gateway.yml [--http HOST:PORT]``."""
    gateway = _command(
        "countersign_client.gateway.main", "countersign-mcp-gateway", GATEWAY_EXTRA_FOR
    )
    if gateway is None:
        sys.exit(2)
    gateway.main()
