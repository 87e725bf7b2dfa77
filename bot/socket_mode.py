"""Socket Mode: Slack's events, clicks and commands over a websocket, for running without a
public URL. The same bolt app (the same listeners) answers as in HTTP mode.

The socket's URL comes from ``apps.connections.open``, asked through the bolt app's own web
client, so it goes to the configured ``SLACK_API_URL`` (a stand-in in tests). slack_sdk's client
then keeps the socket alive: it pings, reconnects when the socket drops or goes quiet, and opens
a fresh URL when Slack sends ``disconnect``.
"""

from __future__ import annotations

import contextlib

from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp

__all__ = ["PING_INTERVAL", "connect"]

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
    error and retry forever.
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
    client.wss_uri = await client.issue_new_wss_url()
    await handler.connect_async()  # type: ignore[no-untyped-call]
