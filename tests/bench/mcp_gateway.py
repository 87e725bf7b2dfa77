"""What the MCP gateway adds to a call it does not gate: figures, never assertions (``make
bench`` runs it last; ``--help`` for the knobs).

The ``mcp`` SDK's own client calls the upstream test server's ``read_note`` (ungated) two ways
in the same run, over each transport:

``direct``
   the client connected to the upstream server itself;
``gateway``
   the client connected to ``countersign-mcp-gateway`` (a real process), which fronts the same
   upstream (stdio: its own copy of the server, as a client would start it; HTTP: the same
   server process) and gates only ``write_*``.

Each repetition warms both up, then makes ``--calls`` calls of each, alternating direct and
gateway call by call so that both see the same machine. The table shows medians over
repetitions of each side's per-repetition median and p99, the added milliseconds (gateway −
direct) and the ratio. Countersign is not involved: an ungated call never reaches it (the file
points it at a closed port). The last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import yaml
from mcp import ClientSession

from tests.e2e.mcp_gateway import ROOT, http_client, process
from tests.support.harness import AGENT_TOKEN
from tests.support.mcp_stdio import stdio_session
from tests.support.ports import free_port

TOOL, ARGUMENTS = "read_note", {"name": "readme"}
UPSTREAM = [sys.executable, "-m", "tests.support.mcp_upstream"]
ENV = {"COUNTERSIGN_AGENT_TOKEN": AGENT_TOKEN, "LOG_LEVEL": "WARNING"}


def _gateway_file(directory: Path, upstream: dict[str, Any]) -> Path:
    path = directory / "gateway.yml"
    data = {
        "countersign": {"url": "http://127.0.0.1:9"},  # closed: an ungated call never asks
        "requester": {"slack_user_id": "U0REQ"},
        "upstreams": {"files": {**upstream, "gate": ["write_*"]}},
    }
    path.write_text(yaml.safe_dump(data), "utf-8")
    return path


def _env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", ""), **ENV}


@asynccontextmanager
async def _stdio(directory: Path) -> AsyncIterator[tuple[ClientSession, ClientSession]]:
    """Clients on the upstream over stdio and on the gateway over stdio (its own upstream)."""
    config = _gateway_file(directory, {"command": UPSTREAM, "cwd": str(ROOT)})
    async with (
        stdio_session(UPSTREAM[1:], _env()) as direct,
        stdio_session(["-m", "countersign_client.gateway", "--config", str(config)], _env()) as via,
    ):
        yield direct, via


@asynccontextmanager
async def _http(directory: Path) -> AsyncIterator[tuple[ClientSession, ClientSession]]:
    """Clients over Streamable HTTP on the upstream and on the gateway (which fronts it)."""
    upstream_port, gateway_port = free_port(), free_port()
    upstream_url = f"http://127.0.0.1:{upstream_port}/mcp"
    config = _gateway_file(directory, {"url": upstream_url})
    gateway = [sys.executable, "-m", "countersign_client.gateway", "--config", str(config)]
    with (
        process([*UPSTREAM, "--http", str(upstream_port)], _env(), upstream_port),
        process([*gateway, "--http", f"127.0.0.1:{gateway_port}"], _env(), gateway_port),
    ):
        async with AsyncExitStack() as stack:
            direct = await stack.enter_async_context(http_client(upstream_url))
            via = await stack.enter_async_context(
                http_client(f"http://127.0.0.1:{gateway_port}/mcp")
            )
            yield direct, via


async def _call(session: ClientSession) -> float:
    """One ungated call's round trip, in milliseconds."""
    started = time.perf_counter()
    result = await session.call_tool(TOOL, ARGUMENTS)
    elapsed = (time.perf_counter() - started) * 1000
    assert not result.is_error, result
    return elapsed


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def _measure(
    direct: ClientSession, via: ClientSession, calls: int, warmup: int
) -> dict[str, float]:
    for _ in range(warmup):
        await _call(direct)
        await _call(via)
    times: dict[str, list[float]] = {"direct": [], "gateway": []}
    for number in range(calls):
        # alternate which goes first: neither side always follows the other's work
        order = ("direct", "gateway") if number % 2 == 0 else ("gateway", "direct")
        for side in order:
            times[side].append(await _call(direct if side == "direct" else via))
    return {
        "direct_p50_ms": statistics.median(times["direct"]),
        "gateway_p50_ms": statistics.median(times["gateway"]),
        "direct_p99_ms": _p99(times["direct"]),
        "gateway_p99_ms": _p99(times["gateway"]),
    }


async def _transport(name: str, reps: int, calls: int, warmup: int) -> dict[str, float]:
    """Medians over ``reps`` connections of one transport (fresh processes each time)."""
    runs = []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as directory:
            opened = _stdio if name == "stdio" else _http
            async with opened(Path(directory)) as (direct, via):
                runs.append(await _measure(direct, via, calls, warmup))
    figures = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    figures["added_p50_ms"] = statistics.median(
        run["gateway_p50_ms"] - run["direct_p50_ms"] for run in runs
    )
    figures["ratio_p50"] = statistics.median(
        run["gateway_p50_ms"] / run["direct_p50_ms"] for run in runs
    )
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3, help="fresh processes per transport")
    parser.add_argument("--calls", type=int, default=300, help="calls per side per repetition")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls per side first")
    parser.add_argument("--quick", action="store_true", help="one repetition of 10 calls")
    args = parser.parse_args(argv)
    if args.quick:
        args.reps, args.calls, args.warmup = 1, 10, 2
    print(f"\n== MCP gateway: an ungated {TOOL} call, direct vs through the gateway ==")
    print(f"{args.reps} reps × {args.calls} calls per side, alternating; medians over reps")
    header = "transport  direct p50  gateway p50  added p50  ×p50   direct p99  gateway p99"
    print(header)
    result: dict[str, Any] = {"bench": "mcp_gateway", "calls": args.calls, "reps": args.reps}
    for transport in ("stdio", "http"):
        f = asyncio.run(_transport(transport, args.reps, args.calls, args.warmup))
        result[transport] = {key: round(value, 3) for key, value in f.items()}
        print(
            f"{transport:<9} {f['direct_p50_ms']:>8.2f}ms {f['gateway_p50_ms']:>9.2f}ms "
            f"{f['added_p50_ms']:>8.2f}ms {f['ratio_p50']:>5.2f} "
            f"{f['direct_p99_ms']:>9.2f}ms {f['gateway_p99_ms']:>10.2f}ms"
        )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
