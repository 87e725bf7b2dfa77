"""A stand-in for Slack's Socket Mode side: a websocket server on loopback.

It speaks the protocol a Socket Mode client sees from Slack ("Socket Mode implementation",
api.slack.com/apis/connections/socket-implement):

* ``apps.connections.open`` (answered by the Web API stand-in, with the app-level token) hands
  out a single-use URL ``ws://127.0.0.1:PORT/link/?ticket=…``; a ticket used twice is refused.
* On connect the server sends ``{"type": "hello", …}``.
* Then envelopes: ``{"envelope_id", "type": "interactive" | "events_api" | "slash_commands",
  "payload", "accepts_response_payload"}``; the client acknowledges each one by sending back
  ``{"envelope_id": …}``, with a ``"payload"`` where the envelope accepts one.
* ``{"type": "disconnect", "reason": "refresh_requested"}`` asks the client to move to a new
  URL; the old socket stays open until the client closes it.

Redelivery. Slack's Socket Mode guide says to acknowledge every envelope, and that Events API
envelopes which are not acknowledged are sent again, carrying ``retry_attempt`` and
``retry_reason`` in the envelope (the Events API's retry policy: a few retries over minutes).
Whether a retry goes to the same socket or another one is not promised. For interactive
envelopes Slack documents no retry at all (over HTTP the clicker sees an error after 3 s), so
redelivering them, as this stand-in does, is stricter than Slack: it proves the bot holds up
under at-least-once delivery of every kind. Here every envelope not yet acknowledged is sent
again on each new connection, right after its ``hello``, and ``redeliver()`` sends one again
even after its ack, as Slack may after an ack that reached it late.

Tests drive it: ``send()`` an envelope (``lose_ack``: its ack is lost on the way), ``drop()``
the socket abruptly (no close frame, as a broken network does), ``disconnect()``,
``redeliver()``; and read ``acks``, ``connections``,
``deliveries()``. Everything runs on the event loop that called :meth:`SocketModeStandIn.start`.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qs

from aiohttp import WSMsgType, web

from bot.sandbox.standin import SlackStandIn, SlackUser
from tests import slack_requests
from tests.support import waiting

__all__ = [
    "APP_TOKEN",
    "Ack",
    "Connection",
    "Envelope",
    "SocketModeStandIn",
    "block_actions_payload",
]

APP_TOKEN = "xapp-1-A0COUNTERSIGN-1-standin"
APP_ID = "A0COUNTERSIGN"

EnvelopeType = Literal["interactive", "events_api", "slash_commands"]
JsonDict = dict[str, Any]


@dataclass
class Envelope:
    """One envelope and what became of it."""

    envelope_id: str
    type: EnvelopeType
    payload: JsonDict
    accepts_response_payload: bool
    #: numbers of the connections it was sent on, in order (a redelivery adds one)
    sent_on: list[int] = field(default_factory=list)
    acked: bool = False

    def message(self) -> JsonDict:
        body: JsonDict = {
            "envelope_id": self.envelope_id,
            "payload": self.payload,
            "type": self.type,
            "accepts_response_payload": self.accepts_response_payload,
        }
        if self.type == "events_api":
            # what Slack adds to an Events API envelope (a retry counts up from 1)
            body["retry_attempt"] = max(0, len(self.sent_on) - 1)
            body["retry_reason"] = "timeout" if len(self.sent_on) > 1 else ""
        return body


@dataclass(frozen=True)
class Ack:
    """An acknowledgement as it reached the server."""

    envelope_id: str
    connection: int
    payload: JsonDict | None


@dataclass
class Connection:
    """One accepted websocket; ``number`` counts from 1 in the order they opened."""

    number: int
    ticket: str
    ws: web.WebSocketResponse
    request: web.Request
    open: bool = True
    #: how it ended: "client" (the client closed it), "dropped" (cut by the test)
    ended: str | None = None

    def cut(self) -> None:
        """End the TCP connection at once: no close frame, whatever is unsent is lost."""
        self.open = False
        self.ended = self.ended or "dropped"
        transport = self.request.transport
        if transport is not None:
            transport.abort()


class SocketModeStandIn:
    """Slack's Socket Mode server, for the app whose Web API ``slack`` stands in for.

    ``start()`` also turns on ``apps.connections.open`` on ``slack`` for ``app_token``.
    """

    def __init__(self, slack: SlackStandIn, *, app_token: str = APP_TOKEN) -> None:
        self.slack = slack
        self.app_token = app_token
        #: every websocket accepted, oldest first
        self.connections: list[Connection] = []
        #: every envelope sent, by id
        self.envelopes: dict[str, Envelope] = {}
        #: acknowledgements heard, in order (a lost one is not here)
        self.acks: list[Ack] = []
        #: tickets handed out and refused (a URL used twice, or never issued)
        self.refused: list[str] = []
        self._tickets: set[str] = set()
        self._lose_ack: set[str] = set()
        self._runner: web.AppRunner | None = None
        self._base_url = ""

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/link/", self._link)
        # the client's sockets must not stall teardown
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        self._base_url = f"ws://{host}:{port}"
        self.slack.socket_mode(self.app_token, self._issue_url)

    async def stop(self) -> None:
        for connection in self.connections:
            if connection.open:
                connection.cut()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    def _issue_url(self) -> str:
        ticket = secrets.token_hex(16)
        self._tickets.add(ticket)
        return f"{self._base_url}/link/?ticket={ticket}&app_id={APP_ID}"

    # ------------------------------------------------------------ test controls

    @property
    def live(self) -> Connection | None:
        """The newest open connection: where envelopes go."""
        return next((c for c in reversed(self.connections) if c.open), None)

    @property
    def opened(self) -> int:
        """How many times ``apps.connections.open`` was called."""
        return len(self.slack.methods_called("apps.connections.open"))

    async def send(
        self,
        kind: EnvelopeType,
        payload: JsonDict,
        *,
        accepts_response_payload: bool | None = None,
        lose_ack: bool = False,
    ) -> str:
        """Send an envelope on the live connection (or, with none open, on the next one);
        its ``envelope_id``. ``lose_ack``: its ack never reaches Slack, and the connection that
        carried it is cut when it comes (the network broke right after the client sent it)."""
        envelope = Envelope(
            envelope_id=str(uuid.uuid4()),
            type=kind,
            payload=payload,
            # Slack lets slash commands (and some interactions) answer in the ack
            accepts_response_payload=(
                kind == "slash_commands"
                if accepts_response_payload is None
                else accepts_response_payload
            ),
        )
        self.envelopes[envelope.envelope_id] = envelope
        if lose_ack:
            self._lose_ack.add(envelope.envelope_id)
        connection = self.live
        if connection is not None:
            await self._deliver(connection, envelope)
        return envelope.envelope_id

    async def redeliver(self, envelope_id: str) -> None:
        """Send an envelope again, acknowledged or not (now, if a connection is open, else on
        the next one), as Slack may."""
        envelope = self.envelopes[envelope_id]
        envelope.acked = False
        connection = self.live
        if connection is not None:
            await self._deliver(connection, envelope)

    def drop(self) -> Connection:
        """Cut the live connection abruptly (no close frame); the one cut."""
        connection = self.live
        assert connection is not None, "no open connection to drop"
        connection.cut()
        return connection

    async def disconnect(self, reason: str = "refresh_requested") -> Connection:
        """Ask the client to reconnect, as Slack does before it recycles a socket; the
        connection asked (it stays open until the client closes it)."""
        connection = self.live
        assert connection is not None, "no open connection to refresh"
        await connection.ws.send_json(
            {"type": "disconnect", "reason": reason, "debug_info": {"host": "standin"}}
        )
        return connection

    def acks_of(self, envelope_id: str) -> list[Ack]:
        return [a for a in self.acks if a.envelope_id == envelope_id]

    async def wait_connections(self, count: int, timeout: float = 5.0) -> Connection:
        """Wait until ``count`` connections were accepted and the newest is open; that one."""

        def ready() -> bool:
            return len(self.connections) >= count and self.connections[-1].open

        await waiting.until(ready, timeout=timeout, what=f"socket connection {count}")
        return self.connections[-1]

    async def wait_ack(self, envelope_id: str, count: int = 1, timeout: float = 5.0) -> Ack:
        """Wait for the ``count``-th ack of an envelope; that ack."""
        await waiting.until(
            lambda: len(self.acks_of(envelope_id)) >= count,
            timeout=timeout,
            what=f"ack {count} of envelope {envelope_id}",
        )
        return self.acks_of(envelope_id)[count - 1]

    # -------------------------------------------------------------- the server

    async def _link(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            self.refused.append(ticket)
            return web.Response(status=401, text="invalid ticket")
        self._tickets.discard(ticket)  # a URL opens one socket
        ws = web.WebSocketResponse()  # answers the client's pings by itself
        await ws.prepare(request)
        connection = Connection(
            number=len(self.connections) + 1, ticket=ticket, ws=ws, request=request
        )
        self.connections.append(connection)
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": sum(c.open for c in self.connections),
                "debug_info": {"host": "standin", "approximate_connection_time": 18060},
                "connection_info": {"app_id": APP_ID},
            }
        )
        for envelope in list(self.envelopes.values()):
            if not envelope.acked:
                await self._deliver(connection, envelope)
        try:
            async for message in ws:
                if not connection.open:
                    break  # cut: whatever came after is not heard
                if message.type == WSMsgType.TEXT:
                    self._heard(connection, message.data)
        finally:
            if connection.open:
                connection.open = False
                connection.ended = "client"
        return ws

    async def _deliver(self, connection: Connection, envelope: Envelope) -> None:
        envelope.sent_on.append(connection.number)
        # the socket may have gone meanwhile: the envelope then stays unacknowledged
        with contextlib.suppress(ConnectionError):
            await connection.ws.send_json(envelope.message())

    def _heard(self, connection: Connection, data: str) -> None:
        message = json.loads(data)
        envelope_id = message.get("envelope_id") if isinstance(message, dict) else None
        if not isinstance(envelope_id, str):
            return
        if envelope_id in self._lose_ack:
            self._lose_ack.discard(envelope_id)
            connection.cut()
            return
        payload = message.get("payload")
        self.acks.append(
            Ack(
                envelope_id=envelope_id,
                connection=connection.number,
                payload=payload if isinstance(payload, dict) else None,
            )
        )
        envelope = self.envelopes.get(envelope_id)
        if envelope is not None:
            envelope.acked = True

    # ------------------------------------------------------------- deliveries

    def deliveries(self, envelope_id: str) -> list[int]:
        """The connections an envelope was sent on, in order."""
        return list(self.envelopes[envelope_id].sent_on)


def block_actions_payload(
    user: SlackUser, approval_id: str, action: str, *, channel_id: str, **extra: Any
) -> JsonDict:
    """The ``block_actions`` payload of a button click: the very payload
    ``tests.slack_requests.block_actions`` form-encodes and signs for HTTP mode, decoded (Socket
    Mode carries it in an envelope, unsigned: the socket itself is authenticated)."""
    request = slack_requests.block_actions(
        signing_secret="unused-in-socket-mode",
        user_id=user.id,
        user_name=user.name,
        action_id=action,
        value=approval_id,
        channel_id=channel_id,
        **extra,
    )
    [payload] = parse_qs(request.body)["payload"]
    decoded = json.loads(payload)
    assert isinstance(decoded, dict)
    return decoded
