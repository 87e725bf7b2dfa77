"""The pieces of the gateway's end-to-end tests: its file, the gateway and the upstream test
server as real processes, and the ``mcp`` SDK's own client connected to them (stdio or
Streamable HTTP)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import mcp
import yaml
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.support.harness import AGENT_TOKEN, CHANNEL, REQUESTER, Harness
from tests.support.mcp_stdio import stdio_session
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
GATED = ["write_*", "delete_*"]
MODERN = "2026-07-28"  # the protocol revision without the initialize handshake


@dataclass
class Rig:
    """A test's files: the gateway's config, the upstream's execution log."""

    directory: Path
    countersign_url: str
    upstream_http: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def log_path(self) -> Path:
        return self.directory / "upstream.jsonl"

    def executions(self, tool: str | None = None) -> list[dict[str, Any]]:
        """What the upstreams received, in order (``tool``: only its calls)."""
        if not self.log_path.exists():
            return []
        lines = [json.loads(line) for line in self.log_path.read_text().splitlines() if line]
        return [line for line in lines if tool is None or line["tool"] == tool]

    def config(self, **approvals: Any) -> dict[str, Any]:
        upstreams: dict[str, Any] = {
            "files": {
                "command": [sys.executable, "-m", "tests.support.mcp_upstream"],
                "cwd": str(ROOT),
                "env": {"UPSTREAM_LOG": str(self.log_path)},
                "gate": GATED,
            }
        }
        if self.upstream_http is not None:
            upstreams["billing"] = {"url": self.upstream_http, "prefix": "billing_"}
        data: dict[str, Any] = {
            "countersign": {"url": self.countersign_url, "token_env": "COUNTERSIGN_AGENT_TOKEN"},
            "requester": {"slack_user_id": REQUESTER.id, "email": REQUESTER.email},
            "upstreams": upstreams,
            "approvals": {"progress_every": 0.2, **approvals},
        }
        for key, value in self.extra.items():
            data[key] = value
        return data

    def write(self, data: dict[str, Any] | None = None, **approvals: Any) -> Path:
        path = self.directory / "gateway.yml"
        path.write_text(yaml.safe_dump(data if data is not None else self.config(**approvals)))
        return path

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", ""),
            "COUNTERSIGN_AGENT_TOKEN": AGENT_TOKEN,
            "LOG_LEVEL": "INFO",
            **extra,
        }


@asynccontextmanager
async def stdio_gateway(rig: Rig, config: Path | None = None) -> AsyncIterator[ClientSession]:
    """The gateway as a stdio subprocess, an initialized SDK client on it."""
    args = ["-m", "countersign_client.gateway", "--config", str(config or rig.write())]
    async with stdio_session(args, rig.env()) as session:
        yield session


async def direct_tools(rig: Rig) -> dict[str, Any]:
    """The upstream's tools as the same SDK client reads them without the gateway."""
    async with stdio_session(["-m", "tests.support.mcp_upstream"], rig.env()) as session:
        return {tool.name: tool for tool in (await session.list_tools()).tools}


@contextmanager
def process(args: list[str], env: dict[str, str], port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A server process listening on ``port`` (waited for), killed at the end."""
    proc = subprocess.Popen(args, cwd=ROOT, env=env)  # noqa: S603 - our own test servers
    try:
        for _ in range(300):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None:
                raise AssertionError(f"{args} exited with {proc.returncode}")
            time.sleep(0.05)
        else:
            raise AssertionError(f"{args} did not listen on {port}")
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextmanager
def http_upstream(rig: Rig) -> Iterator[str]:
    """The upstream test server on Streamable HTTP; its URL."""
    port = free_port()
    env = {**rig.env(), "UPSTREAM_LOG": str(rig.log_path)}
    with process(
        [sys.executable, "-m", "tests.support.mcp_upstream", "--http", str(port)], env, port
    ):
        yield f"http://127.0.0.1:{port}/mcp"


@contextmanager
def http_gateway(
    rig: Rig, config: Path | None = None, **env: str
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The gateway on Streamable HTTP (loopback); its /mcp URL and process."""
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "countersign_client.gateway",
        "--config",
        str(config or rig.write()),
        "--http",
        f"127.0.0.1:{port}",
    ]
    with process(args, rig.env(**env), port) as proc:
        yield f"http://127.0.0.1:{port}/mcp", proc


@asynccontextmanager
async def http_client(url: str) -> AsyncIterator[ClientSession]:
    async with (
        streamable_http_client(url) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def modern_client(rig: Rig, transport: str) -> AsyncIterator[mcp.Client]:
    """The SDK's ``Client`` on protocol 2026-07-28 (no initialize handshake, stateless HTTP)
    against a gateway over ``transport`` (stdio or http)."""
    if transport == "stdio":
        args = ["-m", "countersign_client.gateway", "--config", str(rig.write())]
        params = StdioServerParameters(command=sys.executable, args=args, env=rig.env(), cwd=ROOT)
        # the stdio transport as a Transport object: what every 2.x SDK's Client takes
        async with mcp.Client(stdio_client(params), mode=MODERN) as client:
            yield client
    else:
        with http_gateway(rig) as (url, _):
            async with mcp.Client(url, mode=MODERN) as client:
                yield client


async def pending_card(harness: Harness, tool: str, seen: set[str] | None = None) -> str:
    """The approval id of a card for ``tool`` not in ``seen`` (waits for it)."""
    seen = seen or set()

    def find() -> str | None:
        for message in harness.standin.messages.get(CHANNEL, []):
            if tool not in json.dumps(message.get("blocks")):
                continue
            for block in message.get("blocks", []):
                for element in block.get("elements", []):
                    if (
                        element.get("action_id") == "countersign_approve"
                        and element["value"] not in seen
                    ):
                        return str(element["value"])
        return None

    await harness.standin.wait_for(lambda: find() is not None, 15)
    found = find()
    assert found is not None
    return found


async def raw_post(url: str, headers: dict[str, str]) -> tuple[int, str]:
    """An initialize request as a browser or a stranger would send it."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"},
        },
    }
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            url,
            json=body,
            headers={"Accept": "application/json, text/event-stream", **headers},
        ) as answer,
    ):
        return answer.status, await answer.text()


async def settle(seconds: float = 0.3) -> None:
    await asyncio.sleep(seconds)
