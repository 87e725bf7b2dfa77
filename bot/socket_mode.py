"""Socket Mode: Slack's events, clicks and commands over a websocket, for running without a
public URL. The same bolt app (the same listeners) answers as in HTTP mode.

The socket's URL comes from ``apps.connections.open``, asked through the bolt app's own web
client, so it goes to the configured ``SLACK_API_URL`` (a stand-in in tests). slack_sdk's client
then keeps the socket alive: it pings, reconnects when the socket drops or goes quiet, and opens
a fresh URL when Slack sends ``disconnect``.

A token Slack refuses fails the start (a person must fix it); Slack away at start (unreachable,
5xx, rate-limited) does not: the bot serves HTTP meanwhile and slack_sdk keeps trying to connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError

from bot import slack_setup

__all__ = ["PING_INTERVAL", "connect"]

log = logging.getLogger(__name__)

#: Slack's answers to ``apps.connections.open`` that may pass by themselves (besides any 5xx)
TRANSIENT_CODES = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)

#: Seconds between pings (bolt's default). slack_sdk checks the socket once per interval: a
#: dropped socket is replaced within one or two, one silent for four of them is replaced too.
PING_INTERVAL = 10.0


async def connect(
    stack: contextlib.AsyncExitStack,
    bolt_app: AsyncApp,
    app_token: str,
    *,
    ping_interval: float = PING_INTERVAL,
) -> None:
    """Connect ``bolt_app`` to Slack over Socket Mode with the app-level token (``xapp-…``);
    the socket is closed when ``stack`` unwinds.

    The first URL is asked for here, before connecting: a token Slack refuses raises
    ``slack_sdk.errors.SlackApiError`` at start, where slack_sdk's own ``connect`` would log the
    error and retry forever. When Slack cannot answer now, the connection is made in the
    background instead (slack_sdk retries once per ping interval) and this returns at once.
    """
    handler = AsyncSocketModeHandler(
        bolt_app,
        app_token,
        # explicit, not left to the default: the Web API base URL is the configured one
        web_client=bolt_app.client,
        ping_interval=ping_interval,
    )
    # registered before anything can fail: the client's session and tasks exist already
    stack.push_async_callback(handler.close_async)
    client = handler.client
    try:
        # asked directly, not through issue_new_wss_url, which sleeps through a rate limit
        opened = await bolt_app.client.apps_connections_open(app_token=app_token)
    except SlackApiError as exc:
        code = str(exc.response.get("error", "error"))
        if exc.response.status_code < 500 and code not in TRANSIENT_CODES:
            raise
        reason = f"{code}, HTTP {exc.response.status_code}"
    except slack_setup.UNREACHABLE as exc:
        reason = str(exc) or type(exc).__name__
    else:
        client.wss_uri = str(opened["url"])
        await handler.connect_async()  # type: ignore[no-untyped-call]
        return
    log.warning(
        "Slack could not open a Socket Mode connection (%s): serving meanwhile, and "
        "connecting once Slack answers",
        reason,
        extra={"action": "socket_mode"},
    )
    connecting = asyncio.create_task(
        handler.connect_async(),  # type: ignore[no-untyped-call]
        name="socket-mode-connect",
    )

    async def stop_connecting() -> None:
        connecting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await connecting

    stack.push_async_callback(stop_connecting)  # unwound before the handler closes
