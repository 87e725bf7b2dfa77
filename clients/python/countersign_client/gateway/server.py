"""The gateway as an MCP server: the upstreams' tools, resources and prompts passed through as
they answer them, gated tools asked of Countersign first (:mod:`.gate`), on stdio or on
Streamable HTTP at ``/mcp``.

The gateway declares only what its upstreams offer (tools always; resources and prompts when
one of them has them). Pass-through keeps the upstream's words: names (with the upstream's
prefix), descriptions, input schemas and annotations as listed, results and JSON-RPC errors
as answered, progress relayed, a client's cancellation passed on to the upstream.
"""

from __future__ import annotations

import hmac
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
import uvicorn
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.dispatcher import ProgressFnT
from starlette.types import ASGIApp, Receive, Scope, Send

from countersign_client.gateway.config import GatewayConfig
from countersign_client.gateway.gate import Call, Gate
from countersign_client.gateway.upstreams import Connected, Upstreams

__all__ = ["LOOPBACK", "SERVER_NAME", "build_server", "serve_http", "serve_stdio"]

log = logging.getLogger(__name__)

SERVER_NAME = "countersign-mcp-gateway"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
INVALID_PARAMS = -32602
SESSION_HEADER = "mcp-session-id"

Context = ServerRequestContext[Any]
SessionOf = Callable[[Context], str]


def build_server(upstreams: Upstreams, gate: Gate, session_of: SessionOf) -> Server[Any]:
    """The gateway's MCP server over connected ``upstreams``; ``session_of`` names the MCP
    session of a request (sent to Countersign as ``session_id``)."""
    prompt_routes: dict[str, tuple[Connected, str]] = {}
    resource_owners: dict[str, Connected] = {}

    async def list_tools(ctx: Context, params: types.PaginatedRequestParams | None) -> Any:
        return types.ListToolsResult(tools=await upstreams.list_tools())

    async def call_tool(ctx: Context, params: types.CallToolRequestParams) -> Any:
        route = upstreams.route(params.name)
        if route is None:  # a tool an upstream listed since, or none
            await upstreams.list_tools()
            route = upstreams.route(params.name)
        if route is None:
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name}")
        if not route.gated:
            return await route.upstream.session.send_request(
                types.CallToolRequest(
                    params=types.CallToolRequestParams(
                        name=route.tool.name, arguments=params.arguments
                    )
                ),
                types.CallToolResult,
                progress_callback=_relay(ctx),
            )
        call = Call(session_of(ctx), params.name, dict(params.arguments or {}), route)
        return await gate.call(call, _progress(ctx))

    async def list_resources(ctx: Context, params: types.PaginatedRequestParams | None) -> Any:
        resources, owners = await upstreams.list_resources()
        resource_owners.clear()
        resource_owners.update(owners)
        return types.ListResourcesResult(resources=resources)

    async def list_resource_templates(
        ctx: Context, params: types.PaginatedRequestParams | None
    ) -> Any:
        templates: list[types.ResourceTemplate] = []
        for upstream in _offering(upstreams, "resources"):
            page = await upstream.session.send_request(
                types.ListResourceTemplatesRequest(), types.ListResourceTemplatesResult
            )
            templates.extend(page.resource_templates)
        return types.ListResourceTemplatesResult(resource_templates=templates)

    async def read_resource(ctx: Context, params: types.ReadResourceRequestParams) -> Any:
        uri = str(params.uri)
        owner = resource_owners.get(uri)
        candidates = [owner] if owner is not None else _offering(upstreams, "resources")
        last: MCPError | None = None
        for upstream in candidates:  # a templated URI: the upstream that knows it answers
            try:
                return await upstream.session.send_request(
                    types.ReadResourceRequest(params=types.ReadResourceRequestParams(uri=uri)),
                    types.ReadResourceResult,
                    progress_callback=_relay(ctx),
                )
            except MCPError as exc:
                last = exc
        raise last or MCPError(INVALID_PARAMS, f"Unknown resource: {uri}")

    async def list_prompts(ctx: Context, params: types.PaginatedRequestParams | None) -> Any:
        prompts: list[types.Prompt] = []
        prompt_routes.clear()
        for upstream in _offering(upstreams, "prompts"):
            page = await upstream.session.send_request(
                types.ListPromptsRequest(), types.ListPromptsResult
            )
            for prompt in page.prompts:
                exposed = upstream.config.prefix + prompt.name
                if exposed not in prompt_routes:
                    prompt_routes[exposed] = (upstream, prompt.name)
                    prompts.append(prompt.model_copy(update={"name": exposed}))
        return types.ListPromptsResult(prompts=prompts)

    async def get_prompt(ctx: Context, params: types.GetPromptRequestParams) -> Any:
        if params.name not in prompt_routes:
            await list_prompts(ctx, None)
        if params.name not in prompt_routes:
            raise MCPError(INVALID_PARAMS, f"Unknown prompt: {params.name}")
        upstream, name = prompt_routes[params.name]
        return await upstream.session.send_request(
            types.GetPromptRequest(
                params=types.GetPromptRequestParams(name=name, arguments=params.arguments)
            ),
            types.GetPromptResult,
        )

    resources = upstreams.supports("resources")
    prompts = upstreams.supports("prompts")
    return Server(
        SERVER_NAME,
        instructions=(
            "Some of these tools run only once a person approves the call in Countersign: such "
            "a call waits for the decision and, if it is not approved, returns a result that "
            "starts with 'Not executed'."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources if resources else None,
        on_list_resource_templates=list_resource_templates if resources else None,
        on_read_resource=read_resource if resources else None,
        on_list_prompts=list_prompts if prompts else None,
        on_get_prompt=get_prompt if prompts else None,
    )


def _offering(upstreams: Upstreams, feature: str) -> list[Connected]:
    return [upstream for upstream in upstreams.connected if upstream.supports(feature)]


def _relay(ctx: Context) -> ProgressFnT:
    """The upstream's progress, passed on to this request's client (if it asked for progress)."""

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        await ctx.session.report_progress(progress, total, message)

    return relay


def _progress(ctx: Context) -> Callable[[str], Awaitable[None]]:
    """A waiting message for this request's client, as a progress notification that counts up."""
    count = 0

    async def progress(message: str) -> None:
        nonlocal count
        count += 1
        await ctx.session.report_progress(float(count), None, message)

    return progress


# -- transports -----------------------------------------------------------------------------


async def serve_stdio(upstreams: Upstreams, gate: Gate, config: GatewayConfig) -> None:
    """One client on stdin/stdout: one process, one MCP session."""
    session_id = config.approvals.session_id or f"mcp-stdio-{uuid.uuid4().hex}"
    server = build_server(upstreams, gate, lambda ctx: session_id)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def http_session_of(fallback: str, pinned: str | None = None) -> SessionOf:
    """The ``Mcp-Session-Id`` the transport gave the client; ``fallback`` for stateless
    requests (no session header); ``pinned`` (the file's ``approvals.session_id``) for all."""

    def session_of(ctx: Context) -> str:
        if pinned is not None:
            return pinned
        headers = getattr(ctx.request, "headers", None)
        sid = headers.get(SESSION_HEADER) if headers is not None else None
        return f"mcp-{sid}" if sid else fallback

    return session_of


async def serve_http(
    upstreams: Upstreams, gate: Gate, config: GatewayConfig, host: str, port: int, token: str | None
) -> None:
    """Streamable HTTP at ``/mcp`` on ``host:port``: Host and Origin checked (DNS rebinding), a
    bearer token required when configured."""
    fallback = f"mcp-http-{uuid.uuid4().hex}"
    server = build_server(upstreams, gate, http_session_of(fallback, config.approvals.session_id))
    hosts = [f"{name}:*" for name in ("127.0.0.1", "localhost", "[::1]")]
    hosts += [f"{host}:{port}", *config.http.allowed_hosts]
    app: ASGIApp = server.streamable_http_app(
        streamable_http_path="/mcp",
        host=host,
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=hosts,
            allowed_origins=list(config.http.allowed_origins),
        ),
    )
    if token is not None:
        app = BearerToken(app, token)
    served = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=5,
        )
    )
    log.info("serving MCP on http://%s:%d/mcp", host, port)
    await served.serve()


class BearerToken:
    """Refuses (401) every HTTP request without ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                body = json.dumps(
                    {"error": {"code": "unauthorized", "message": "a bearer token is required"}}
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self._app(scope, receive, send)
