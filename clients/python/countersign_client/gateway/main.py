"""The command: ``countersign-mcp-gateway --config gateway.yml [--http HOST:PORT]``.

Logs go to stderr (stdout is the MCP protocol on stdio). A file that cannot run the gateway —
a wrong key, a missing token variable, an upstream that does not start, two upstreams exposing
one name — stops it at start with exit status 2 and one line per problem.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

import anyio

from countersign_client.gateway.config import ConfigError, GatewayConfig, load
from countersign_client.gateway.gate import Gate
from countersign_client.gateway.server import LOOPBACK, serve_http, serve_stdio
from countersign_client.gateway.upstreams import connect

__all__ = ["main", "parse_http", "run"]

log = logging.getLogger("countersign_client.gateway")


def parse_http(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) or ``PORT`` alone (loopback)."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{value!r}: expected HOST:PORT")
    return host, int(port)


async def run(config: GatewayConfig, token: str, http: tuple[str, int] | None) -> None:
    """Connect the upstreams, then serve until the client (stdio) or a signal (HTTP) ends it."""
    client_token = os.environ.get(config.http.token_env, "") if config.http.token_env else None
    gate = Gate(config, token)
    try:
        async with connect(config) as upstreams:
            if http is None:
                await serve_stdio(upstreams, gate, config)
            else:
                host, port = http
                if host not in LOOPBACK:
                    log.warning(
                        "serving beyond loopback on %s: anyone who can reach it may call", host
                    )
                await serve_http(upstreams, gate, config, host, port, client_token or None)
    finally:
        await gate.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="countersign-mcp-gateway",
        description="An MCP server fronting other MCP servers; gated tools run only once "
        "approved in Countersign.",
    )
    parser.add_argument("--config", required=True, help="the gateway's YAML file")
    parser.add_argument(
        "--http",
        type=parse_http,
        metavar="HOST:PORT",
        help="serve Streamable HTTP at /mcp instead of stdio (loopback unless HOST says otherwise)",
    )
    args = parser.parse_args(argv)
    level = os.environ.get("LOG_LEVEL", "INFO").upper()
    logging.basicConfig(
        stream=sys.stderr,
        level=level if level in logging.getLevelNamesMapping() else "INFO",
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # one line per HTTP request to an upstream says nothing the gateway's own lines do not
    logging.getLogger("httpx2").setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        config = load(args.config)
        token = config.token(os.environ)
        anyio.run(run, config, token, args.http)
    except KeyboardInterrupt:
        pass
    except Exception as exc:
        refused = _config_error(exc)
        if refused is None:
            raise
        for problem in refused.problems:
            print(f"countersign-mcp-gateway: {problem}", file=sys.stderr)
        sys.exit(2)


def _config_error(exc: BaseException) -> ConfigError | None:
    """The ConfigError ``exc`` is or holds (a task group wraps what its tasks raise)."""
    if isinstance(exc, ConfigError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _config_error(inner)) is not None:
                return found
    return None
