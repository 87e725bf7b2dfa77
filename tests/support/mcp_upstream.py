"""A real MCP server for the gateway's tests, on stdio or Streamable HTTP
(``python -m tests.support.mcp_upstream [--http PORT] [--prefix-tools x_]``).

Every tool call it receives is appended to the JSON-lines file ``UPSTREAM_LOG`` names (tool,
arguments, and ``cancelled`` when the client cancelled it): the tests count executions there,
not in the gateway. Its schemas are written out by hand, with the shapes a pass-through could
spoil (nesting, key order, a null default, a float, non-ASCII text).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import uvicorn
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

__all__ = ["NOTE_SCHEMA", "WRITE_SCHEMA", "build"]

NOTE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "Which note — « exact » name"},
        "format": {"type": ["string", "null"], "enum": ["text", "json", None], "default": None},
    },
    "required": ["name"],
    "additionalProperties": False,
}
WRITE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "text"],
    "properties": {
        "text": {"type": "string", "maxLength": 10000},
        "name": {"type": "string"},
        "amount": {"type": "number", "minimum": 0.5, "multipleOf": 0.25},
        "meta": {
            "type": "object",
            "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
        },
    },
}
NOTES = {"readme": "Countersign gateway test upstream"}


def _record(tool: str, arguments: dict[str, Any] | None, **extra: Any) -> None:
    path = os.environ.get("UPSTREAM_LOG")
    if path:
        line = json.dumps({"tool": tool, "arguments": arguments, **extra}, sort_keys=True)
        with Path(path).open("a", encoding="utf-8") as log:
            log.write(line + "\n")


def _text(text: str, *, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], is_error=is_error
    )


def build(prefix: str = "") -> Server[Any]:
    tools = [
        types.Tool(
            name=f"{prefix}read_note",
            description="Read a note (never changes anything)",
            input_schema=NOTE_SCHEMA,
            annotations=types.ToolAnnotations(read_only_hint=True, title="Read a note"),
        ),
        types.Tool(
            name=f"{prefix}write_note", description="Write a note", input_schema=WRITE_SCHEMA
        ),
        types.Tool(
            name=f"{prefix}delete_note",
            description="Delete a note",
            input_schema={"type": "object", "properties": {"name": {"type": "string"}}},
            annotations=types.ToolAnnotations(destructive_hint=True),
        ),
        types.Tool(
            name=f"{prefix}explode",
            description="Answers a JSON-RPC error",
            input_schema={"type": "object"},
        ),
        types.Tool(
            name=f"{prefix}fail_soft",
            description="Answers isError",
            input_schema={"type": "object"},
        ),
        types.Tool(
            name=f"{prefix}slow_count",
            description="Counts with progress, slowly",
            input_schema={"type": "object", "properties": {"steps": {"type": "integer"}}},
        ),
    ]

    async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name = params.name.removeprefix(prefix)
        arguments = params.arguments or {}
        if name == "slow_count":
            _record(name, params.arguments, started=True)
            steps = int(arguments.get("steps", 3))
            try:
                for step in range(1, steps + 1):
                    await ctx.session.report_progress(step, steps, f"step {step}")
                    await anyio.sleep(0.1)
            except anyio.get_cancelled_exc_class():
                _record(name, params.arguments, cancelled=True)
                raise
            return _text(f"counted to {steps}")
        _record(name, params.arguments)
        if name == "read_note":
            return _text(NOTES.get(str(arguments.get("name")), "no such note"))
        if name == "write_note":
            result = _text(f"wrote {arguments.get('name')}")
            return result.model_copy(update={"structured_content": {"written": arguments}})
        if name == "delete_note":
            return _text(f"deleted {arguments.get('name')}")
        if name == "explode":
            raise MCPError(-32001, "the upstream exploded", {"why": "on purpose"})
        if name == "fail_soft":
            return _text("a soft failure, as the tool reports it", is_error=True)
        raise MCPError(-32602, f"Unknown tool: {params.name}")

    async def list_resources(
        ctx: ServerRequestContext[Any], params: Any
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(uri=f"note://{n}", name=n, mime_type="text/plain") for n in NOTES
            ]
        )

    async def read_resource(
        ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        name = str(params.uri).removeprefix("note://")
        if name not in NOTES:
            raise MCPError(-32002, f"Resource not found: {params.uri}")
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(
                    uri=str(params.uri), text=NOTES[name], mime_type="text/plain"
                )
            ]
        )

    async def list_prompts(ctx: ServerRequestContext[Any], params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(
            prompts=[
                types.Prompt(
                    name=f"{prefix}summarize",
                    description="Summarize a note",
                    arguments=[types.PromptArgument(name="note", required=True)],
                )
            ]
        )

    async def get_prompt(
        ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        note = (params.arguments or {}).get("note", "")
        return types.GetPromptResult(
            description="Summarize a note",
            messages=[
                types.PromptMessage(
                    role="user",
                    content=types.TextContent(type="text", text=f"Summarize the note {note}"),
                )
            ],
        )

    return Server(
        "gateway-test-upstream",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )


async def _stdio(server: Server[Any]) -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, help="serve Streamable HTTP on 127.0.0.1:PORT/mcp")
    parser.add_argument("--prefix-tools", default="", help="name every tool and prompt with this")
    args = parser.parse_args()
    server = build(args.prefix_tools)
    if args.http is None:
        anyio.run(_stdio, server)
        return
    app = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=args.http, log_level="warning")


if __name__ == "__main__":
    main()
