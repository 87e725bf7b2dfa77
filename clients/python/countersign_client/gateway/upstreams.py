"""The upstream MCP servers the gateway fronts: connecting to each (a command on stdio, or a
Streamable HTTP URL), and the one table that says which upstream tool an exposed name is and
whether calling it needs an approval.

Names are exposed as ``prefix + name``. Two upstreams exposing the same name would make a call's
destination a guess: at start that is an error naming both; if a later listing brings such a
clash, the name is withheld (and a call to it refused) until it is resolved.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TextIO

import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from countersign_client.gateway.config import ConfigError, GatewayConfig, Upstream

__all__ = ["Connected", "Route", "Upstreams", "connect"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Connected:
    """One upstream, initialized."""

    name: str
    config: Upstream
    session: ClientSession
    capabilities: types.ServerCapabilities | None

    def gated(self, tool: str) -> bool:
        """Whether calling ``tool`` (the upstream's own name) needs an approval."""
        return any(fnmatch.fnmatchcase(tool, glob) for glob in self.config.gate)

    def supports(self, feature: str) -> bool:
        return getattr(self.capabilities, feature, None) is not None


@dataclass(frozen=True)
class Route:
    """Where an exposed tool name leads."""

    upstream: Connected
    tool: types.Tool  # as the upstream listed it (its own name)

    @property
    def gated(self) -> bool:
        return self.upstream.gated(self.tool.name)


class Upstreams:
    """The connected upstreams and the names they expose."""

    def __init__(self, connected: list[Connected]) -> None:
        self.connected = connected
        self.routes: dict[str, Route] = {}

    def supports(self, feature: str) -> bool:
        return any(upstream.supports(feature) for upstream in self.connected)

    async def list_tools(self, *, at_start: bool = False) -> list[types.Tool]:
        """Every upstream's tools under their exposed names, listed afresh; the routes follow."""
        routes: dict[str, Route] = {}
        clashes: dict[str, list[str]] = {}
        for upstream in self.connected:
            if not upstream.supports("tools"):
                continue
            for tool in await _all_tools(upstream.session):
                exposed = upstream.config.prefix + tool.name
                if exposed in routes:
                    clashes.setdefault(exposed, [routes[exposed].upstream.name]).append(
                        upstream.name
                    )
                    continue
                routes[exposed] = Route(upstream, tool)
        if clashes:
            problems = [
                f"upstreams {' and '.join(names)} both expose the tool {name!r} (give one a prefix)"
                for name, names in clashes.items()
            ]
            if at_start:
                raise ConfigError(problems)
            for problem in problems:
                log.error("%s: the tool is withheld", problem)
            for name in clashes:
                del routes[name]
        self.routes = routes
        return [
            route.tool.model_copy(update={"name": name}) if name != route.tool.name else route.tool
            for name, route in routes.items()
        ]

    def route(self, name: str) -> Route | None:
        return self.routes.get(name)

    async def list_resources(self) -> tuple[list[types.Resource], dict[str, Connected]]:
        """Every upstream's resources, and which upstream answers for each URI (the first)."""
        resources: list[types.Resource] = []
        owners: dict[str, Connected] = {}
        for upstream in self.connected:
            if not upstream.supports("resources"):
                continue
            cursor: str | None = None
            while True:
                params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                page = await upstream.session.list_resources(params=params)
                for resource in page.resources:
                    if str(resource.uri) not in owners:
                        owners[str(resource.uri)] = upstream
                        resources.append(resource)
                cursor = page.next_cursor
                if not cursor:
                    break
        return resources, owners


async def _all_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


@asynccontextmanager
async def connect(
    config: GatewayConfig,
    env: Mapping[str, str] | None = None,
    errlog: TextIO | None = None,
) -> AsyncIterator[Upstreams]:
    """Every upstream connected and initialized, their tools listed (a clash is a ConfigError);
    closed (stdio upstreams stopped) on exit."""
    env = os.environ if env is None else env
    async with AsyncExitStack() as stack:
        connected = []
        for name, upstream in config.upstreams.items():
            try:
                session = await stack.enter_async_context(
                    _session(upstream, env, errlog or sys.stderr)
                )
                initialized = await session.initialize()
            except ConfigError:
                raise
            except Exception as exc:
                raise ConfigError(
                    [f"upstreams.{name}: could not be started or reached ({_why(exc)})"]
                ) from exc
            connected.append(Connected(name, upstream, session, initialized.capabilities))
        upstreams = Upstreams(connected)
        await upstreams.list_tools(at_start=True)
        yield upstreams


@asynccontextmanager
async def _session(
    upstream: Upstream, env: Mapping[str, str], errlog: TextIO
) -> AsyncIterator[ClientSession]:
    async with AsyncExitStack() as stack:
        if upstream.command is not None:
            params = StdioServerParameters(
                command=upstream.command[0],
                args=upstream.command[1:],
                env={**get_default_environment(), **upstream.env},
                cwd=upstream.cwd,
            )
            read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
        else:
            assert upstream.url is not None
            headers = {header: env[variable] for header, variable in upstream.headers_env.items()}
            http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
            read, write = await stack.enter_async_context(
                streamable_http_client(upstream.url, http_client=http)
            )
        session = await stack.enter_async_context(ClientSession(read, write))
        yield session


def _why(exc: BaseException) -> str:
    """An exception group's first leaf, as ``Type: text``."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
