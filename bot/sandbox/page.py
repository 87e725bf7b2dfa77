"""The sandbox page: what Slack would show, at ``/sandbox/`` of the bot's own application.

Only in try-out mode (no ``SLACK_BOT_TOKEN``: the Web API stand-in answers for Slack). The page
shows the stand-in's channels (cards rendered from their Block Kit, threads, edits), the
ephemeral answers and App Home of the person one is acting as, and the modals the bot opened;
it updates live over server-sent events.

Every click on the page becomes the request Slack would send: a ``block_actions``,
``view_submission`` or ``app_home_opened`` payload built here, signed with this start's
signing secret and posted over HTTP to the bot's own ``/slack/events``, the address the click
arrived at. The listeners are never called directly, and the endpoints take structured fields
only (who, which button of which message, what was typed): a caller cannot hand them a body or
a signature. A button is clicked only if the message or view really carries it.

The endpoints refuse a ``Host`` that is not an IP address or ``localhost`` (a DNS-rebinding
page cannot read or click), and posts must be JSON from the page's own origin (a cross-site
form cannot click). The page itself renders every string as text, never as HTML
(``static/sandbox.js``), under a Content-Security-Policy that allows nothing from elsewhere.
"""

from __future__ import annotations

import contextlib
import copy
import ipaddress
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yarl
from aiohttp import web

from approvals import policy as policy_module
from bot.sandbox import signing
from bot.sandbox.standin import SlackStandIn, SlackUser

__all__ = ["OUTSIDER", "PREFIX", "REQUESTER", "SANDBOX", "Cast", "Sandbox", "cast", "mount"]

log = logging.getLogger(__name__)

PREFIX = "/sandbox/"
STATIC = Path(__file__).with_name("static")
_FILES = {
    "sandbox.css": "text/css",
    "sandbox.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}
_HEADERS = {
    # nothing from anywhere else, no inline script or style: an injected tag would stay inert
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
LOG_LENGTH = 50  # the sandbox's own log of requests sent to the bot, newest kept
HEARTBEAT = 15.0  # seconds between keep-alive comments on the event stream
MAX_TYPED = 3000  # characters the page may send for one input of a modal


@dataclass
class Sandbox:
    """The page's state beside the stand-in's: who clicked which trigger, closed modals, log.

    Args:
        standin: the Slack stand-in the bot talks to.
        signing_secret: this start's Slack signing secret, to sign what the page sends.
        policy: the policy in force, for the roles shown beside each person.
        notes: a word to show beside some people, e.g. ``{"U0REQ": "requester"}``.
    """

    standin: SlackStandIn
    signing_secret: str
    policy: Callable[[], policy_module.Policy]
    notes: Mapping[str, str] = field(default_factory=dict)
    #: trigger id of each click sent -> who clicked (a modal opened for it is theirs)
    triggers: dict[str, str] = field(default_factory=dict)
    #: triggers whose modal was submitted or cancelled
    closed: set[str] = field(default_factory=set)
    #: what the page sent to /slack/events, and what the bot answered
    log: list[dict[str, Any]] = field(default_factory=list)
    closing: bool = False
    _session: aiohttp.ClientSession | None = None
    _sent: int = 0

    # -- what the page shows -----------------------------------------------------------

    def people(self) -> list[dict[str, Any]]:
        """Everyone one can act as, with the roles the policy gives them right now."""
        roles = self.policy().roles
        groups = self.standin.usergroups
        out = []
        for user in self.standin.users.values():
            held = [
                name
                for name, role in roles.items()
                if user.id in role.users
                or any(user.id in groups.get(g, ()) for g in role.usergroups)
            ]
            out.append(
                {
                    "id": user.id,
                    "name": user.name,
                    "real_name": user.real_name or user.name,
                    "roles": held,
                    "note": self.notes.get(user.id, ""),
                }
            )
        return out

    def state(self) -> dict[str, Any]:
        """What the page renders: a copy, so nothing the page does can touch the stand-in."""
        standin = self.standin
        channels = []
        for channel_id, channel in standin.channels.items():
            messages = standin.messages.get(channel_id, [])
            top = [m for m in messages if m.get("thread_ts") in (None, m["ts"])]
            channels.append(
                {
                    "id": channel_id,
                    "name": channel.name,
                    "messages": [
                        {
                            **_message(m),
                            "replies": [
                                _message(r)
                                for r in messages
                                if r.get("thread_ts") == m["ts"] and r["ts"] != m["ts"]
                            ],
                        }
                        for m in top
                    ],
                }
            )
        modals = [
            {
                "trigger_id": opened["trigger_id"],
                "user": self.triggers[opened["trigger_id"]],
                "open": opened["trigger_id"] not in self.closed,
                "view": copy.deepcopy(opened["view"]),
            }
            for opened in standin.views
            if opened["trigger_id"] in self.triggers
        ]
        return {
            "version": standin.version,
            "people": self.people(),
            "users": {u.id: u.real_name or u.name for u in standin.users.values()},
            "usergroups": {g: g.lower() for g in standin.usergroups},
            "channels": channels,
            "ephemerals": [{"n": i, **copy.deepcopy(e)} for i, e in enumerate(standin.ephemerals)],
            "home": copy.deepcopy(standin.home),
            "modals": modals,
            "log": copy.deepcopy(self.log),
        }

    # -- what the page does ------------------------------------------------------------

    async def click(self, bot_url: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """``user`` clicks the button ``action_id`` / ``value`` on the message ``channel`` /
        ``ts``, or in their App Home (``surface: "home"``)."""
        user = self._person(body.get("user"))
        action_id, value = _text(body, "action_id"), _text(body, "value")
        trigger = signing.trigger_id()
        surface: dict[str, Any]
        if body.get("surface") == "home":
            view = self.standin.home.get(user)
            if view is None:
                raise _BadInput("no App Home published for this person yet")
            blocks, where = view.get("blocks"), "App Home"
            surface = {"view": {"id": f"VHOME{user}", **copy.deepcopy(view)}}
        else:
            channel, ts = _text(body, "channel"), _text(body, "ts")
            message = self._message(channel, ts)
            blocks, where = message.get("blocks"), f"#{self.standin.channels[channel].name}"
            surface = {
                "channel_id": channel,
                "message_ts": ts,
                "message": copy.deepcopy(message),
                # an answer through it would leave loopback: the bot answers with chat.* calls
                "response_url": f"https://hooks.slack.com/actions/sandbox/{trigger}",
            }
        button = _find_button(blocks, action_id, value)
        request = signing.block_actions(
            signing_secret=self.signing_secret,
            user_id=user,
            user_name=self.standin.users[user].name,
            action_id=action_id,
            value=value,
            block_id=str(button.get("block_id", "")),
            trigger_id=trigger,
            button_text=_button_text(button),
            button_style=button.get("style"),
            **surface,
        )
        self.triggers[trigger] = user
        status, _ = await self._send(
            bot_url, request, user, f"clicked {_button_text(button)} in {where}", "block_actions"
        )
        return {"status": status, "trigger_id": trigger}

    async def submit(self, bot_url: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """``user`` submits (or, ``cancel: true``, closes) the modal opened for ``trigger_id``
        with ``values``: block id -> action id -> what was typed or chosen."""
        user = self._person(body.get("user"))
        trigger = _text(body, "trigger_id")
        opened = next((v for v in self.standin.views if v["trigger_id"] == trigger), None)
        if opened is None or self.triggers.get(trigger) != user or trigger in self.closed:
            raise _BadInput("no such modal open for this person")
        if body.get("cancel") is True:
            # Slack sends view_closed only with notify_on_close; ours does not ask for it
            self.closed.add(trigger)
            self.standin.touch()
            return {"status": 200, "errors": {}}
        view = opened["view"]
        values = _state_values(view.get("blocks"), body.get("values"))
        request = signing.view_submission(
            signing_secret=self.signing_secret,
            user_id=user,
            user_name=self.standin.users[user].name,
            callback_id=str(view.get("callback_id", "")),
            private_metadata=str(view.get("private_metadata", "")),
            values=values,
            blocks=copy.deepcopy(view.get("blocks") or []),
        )
        title = (view.get("title") or {}).get("text", "a modal")
        status, answer = await self._send(
            bot_url, request, user, f"submitted “{title}”", "view_submission"
        )
        errors = _modal_errors(answer)
        if status == 200 and not errors:
            self.closed.add(trigger)
        self.standin.touch()
        return {"status": status, "errors": errors}

    async def open_home(self, bot_url: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """``user`` opens the App Home tab: the bot publishes their queue."""
        user = self._person(body.get("user"))
        request = signing.app_home_opened(signing_secret=self.signing_secret, user_id=user)
        status, _ = await self._send(bot_url, request, user, "opened App Home", "app_home_opened")
        return {"status": status}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _send(
        self, bot_url: str, request: signing.SignedRequest, user: str, what: str, kind: str
    ) -> tuple[int, str]:
        """POST ``request`` to the bot's ``/slack/events`` as Slack would; its answer."""
        if self._session is None:
            # our own loopback address: proxies must not see it (and slack_sdk-style
            # environment proxies are not for this)
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=10), trust_env=False
            )
        try:
            async with self._session.post(
                bot_url, data=request.body.encode(), headers=request.headers
            ) as response:
                status, answer = response.status, await response.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            # the bot did not answer its own /slack/events (stopping, overloaded): what Slack
            # would show as a failed action, and the page as a 502, never a 500
            log.warning(
                "sandbox request not answered: %s",
                str(exc) or type(exc).__name__,
                extra={"action": "sandbox", "kind": kind, "user": user},
            )
            raise _BotUnreachable(
                f"the bot did not answer ({type(exc).__name__}): try again"
            ) from exc
        self._sent += 1
        self.log.append(
            {
                "n": self._sent,
                "at": time.time(),
                "user": user,
                "what": what,
                "kind": kind,
                "status": status,
            }
        )
        del self.log[:-LOG_LENGTH]
        self.standin.touch()
        log.info(
            "sandbox request sent",
            extra={"action": "sandbox", "kind": kind, "user": user, "status": status},
        )
        return status, answer

    def _person(self, user: object) -> str:
        if not isinstance(user, str) or user not in self.standin.users:
            raise _BadInput("act as one of the sandbox's people")
        # whoever acts on the page is who this browser is signed in to Slack as: the step-up
        # page's Sign in with Slack (the stand-in's) signs them in
        self.standin.sign_in.signed_in_as = user
        return user

    def _message(self, channel: str, ts: str) -> dict[str, Any]:
        for message in self.standin.messages.get(channel, []):
            if message["ts"] == ts:
                return message
        raise _BadInput("no such message")


class _BotUnreachable(Exception):
    """The bot's own /slack/events did not answer a request the page sent."""


class _BadInput(Exception):
    """What the page sent names nothing real (400, with this message)."""


def _message(message: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "ts": message["ts"],
        "text": message.get("text", ""),
        "blocks": copy.deepcopy(message.get("blocks") or []),
        "edited": "edited" in message,
        "thread_ts": message.get("thread_ts"),
    }


def _text(body: Mapping[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value or len(value) > 200:
        raise _BadInput(f"{key} is required (a string)")
    return value


def _button_text(button: Mapping[str, Any]) -> str:
    text = button.get("text")
    return str(text.get("text", "")) if isinstance(text, dict) else ""


def _find_button(blocks: object, action_id: str, value: str) -> dict[str, Any]:
    """The button ``action_id`` carrying ``value`` in ``blocks`` (with its block's id under
    ``block_id``): only what is really shown can be clicked."""
    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, dict):
            continue
        elements = list(block.get("elements") or []) if block.get("type") == "actions" else []
        if isinstance(block.get("accessory"), dict):
            elements.append(block["accessory"])
        for element in elements:
            if (
                isinstance(element, dict)
                and element.get("type") == "button"
                and element.get("action_id") == action_id
                and element.get("value") == value
            ):
                return {**element, "block_id": block.get("block_id", "")}
    raise _BadInput("no such button there")


def _state_values(blocks: object, typed: object) -> dict[str, Any]:
    """``view.state.values`` as Slack builds it, for the view's own input blocks only: what
    the page sent for anything else is dropped."""
    typed = typed if isinstance(typed, dict) else {}
    values: dict[str, Any] = {}
    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, dict) or block.get("type") != "input":
            continue
        element = block.get("element") or {}
        block_id, action_id = block.get("block_id"), element.get("action_id")
        if not isinstance(block_id, str) or not isinstance(action_id, str):
            continue
        given = (typed.get(block_id) or {}) if isinstance(typed.get(block_id), dict) else {}
        entry = given.get(action_id)
        entry = entry[:MAX_TYPED] if isinstance(entry, str) else None
        kind = element.get("type")
        if kind == "static_select":
            option = next(
                (o for o in element.get("options") or [] if o.get("value") == entry), None
            )
            state: dict[str, Any] = {"type": kind, "selected_option": option}
        else:
            state = {"type": kind, "value": entry or None}
        values[block_id] = {action_id: state}
    return values


def _modal_errors(answer: str) -> dict[str, str]:
    """The errors a bot's view_submission answer shows in the modal (``response_action``)."""
    with contextlib.suppress(json.JSONDecodeError):
        decoded = json.loads(answer) if answer.strip() else {}
        if isinstance(decoded, dict) and decoded.get("response_action") == "errors":
            errors = decoded.get("errors")
            if isinstance(errors, dict):
                return {str(k): str(v) for k, v in errors.items()}
    return {}


SANDBOX = web.AppKey("sandbox", Sandbox)

# The two people every sandbox has beside the policy's: the requester of the approvals one
# submits (a member of every user group, so that only four eyes refuses her) and an outsider.
REQUESTER = SlackUser(id="U0REQ", name="rita", email="rita@example.com", real_name="Rita Requester")
OUTSIDER = SlackUser(id="U0OUT", name="otto", email="otto@example.com", real_name="Otto Outsider")


def _name_of(user_id: str) -> str:
    """A handle for a user id the policy names (``U0ANA`` -> ``ana``): policies carry no names."""
    return (user_id[2:] if user_id.startswith("U0") and len(user_id) > 2 else user_id).lower()


@dataclass(frozen=True)
class Cast:
    """The stand-in's workspace for a policy: its people, user groups and a note on some."""

    users: list[SlackUser]
    usergroups: dict[str, list[str]]
    notes: dict[str, str]


def cast(policy: policy_module.Policy) -> Cast:
    """Everyone the policy names (its roles' users), one member for each of its user groups,
    the requester (in every group too) and an outsider."""
    users: dict[str, SlackUser] = {}
    groups: dict[str, list[str]] = {}
    for role in policy.roles.values():
        for user_id in role.users:
            name = _name_of(user_id)
            users.setdefault(user_id, SlackUser(id=user_id, name=name, email=f"{name}@example.com"))
        for group in role.usergroups:
            if group in groups:
                continue
            member_id = "U1" + group[1:].lstrip("0")[:28]
            name = group[1:].lstrip("0").lower()
            users.setdefault(
                member_id,
                SlackUser(
                    id=member_id,
                    name=name,
                    email=f"{name}@example.com",
                    real_name=f"{name.capitalize()} member",
                ),
            )
            groups[group] = [member_id, REQUESTER.id]
    users[REQUESTER.id] = REQUESTER
    users[OUTSIDER.id] = OUTSIDER
    notes = {REQUESTER.id: "requester", OUTSIDER.id: "outsider"}
    return Cast(users=list(users.values()), usergroups=groups, notes=notes)


def _allowed_host(request: web.Request) -> bool:
    """An IP address or localhost: a name that merely resolves here (DNS rebinding) is not."""
    try:
        host = yarl.URL(f"http://{request.host}").host or ""
    except ValueError:
        return False
    if host == "localhost":
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _bot_url(request: web.Request) -> str:
    """The bot's own ``/slack/events``, at the address this request arrived at."""
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    if not sockname:
        raise web.HTTPServiceUnavailable(text="no local address")
    host, port = sockname[0], sockname[1]
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/slack/events"


def _guard(request: web.Request) -> Sandbox:
    if not _allowed_host(request):
        raise web.HTTPForbidden(text="the sandbox answers on an IP address or localhost only")
    return request.app[SANDBOX]


async def _posted(request: web.Request) -> Mapping[str, Any]:
    """A post from the page itself: JSON (a cross-site form cannot send it without a
    preflight, which nothing here answers) from this origin."""
    origin = request.headers.get("Origin")
    if origin is not None and origin != f"{request.scheme}://{request.host}":
        raise web.HTTPForbidden(text="posts come from the sandbox page only")
    if request.content_type != "application/json":
        raise web.HTTPUnsupportedMediaType(text="JSON only")
    try:
        body = await request.json()
    except json.JSONDecodeError:
        raise web.HTTPBadRequest(text="not JSON") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="a JSON object")
    return body


def _file(name: str, content_type: str) -> web.Response:
    body = (STATIC / name).read_bytes()
    return web.Response(body=body, content_type=content_type, headers=_HEADERS)


async def _index(request: web.Request) -> web.Response:
    _guard(request)
    return _file("index.html", "text/html")


async def _redirect(request: web.Request) -> web.Response:
    raise web.HTTPFound(PREFIX)


async def _static(request: web.Request) -> web.Response:
    _guard(request)
    name = request.match_info["name"]
    if name not in _FILES:
        raise web.HTTPNotFound()
    return _file(name, _FILES[name])


async def _state(request: web.Request) -> web.Response:
    return web.json_response(_guard(request).state(), headers=_HEADERS)


async def _events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: ``change`` with the version whenever the state changed."""
    sandbox = _guard(request)
    response = web.StreamResponse(
        headers={**_HEADERS, "Content-Type": "text/event-stream", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    seen = -1
    with contextlib.suppress(ConnectionResetError):
        while not sandbox.closing:
            version = await sandbox.standin.changed(seen, HEARTBEAT)
            if sandbox.closing:
                break
            if version != seen:
                await response.write(f"event: change\ndata: {version}\n\n".encode())
                seen = version
            else:
                await response.write(b": keep-alive\n\n")
    return response


def _action(
    step: Callable[[Sandbox, str, Mapping[str, Any]], Any],
) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.Response:
        sandbox = _guard(request)
        body = await _posted(request)
        try:
            answer = await step(sandbox, _bot_url(request), body)
        except _BadInput as exc:
            return web.json_response({"error": str(exc)}, status=400, headers=_HEADERS)
        except _BotUnreachable as exc:
            return web.json_response({"error": str(exc)}, status=502, headers=_HEADERS)
        return web.json_response(answer, headers=_HEADERS)

    return handle


def mount(app: web.Application, sandbox: Sandbox) -> None:
    """The sandbox's routes on ``app`` (before it starts). Only for try-out mode: the caller
    mounts it when the stand-in answers for Slack, never beside a real workspace."""
    app[SANDBOX] = sandbox
    app.router.add_get(PREFIX.rstrip("/"), _redirect)
    app.router.add_get(PREFIX, _index)
    app.router.add_get(PREFIX + "static/{name}", _static)
    app.router.add_get(PREFIX + "api/state", _state)
    app.router.add_get(PREFIX + "api/events", _events)
    app.router.add_post(PREFIX + "api/click", _action(Sandbox.click))
    app.router.add_post(PREFIX + "api/submit", _action(Sandbox.submit))
    app.router.add_post(PREFIX + "api/home", _action(Sandbox.open_home))

    async def shutdown(app: web.Application) -> None:
        # open event streams end now, not after the runner's shutdown timeout
        sandbox.closing = True
        sandbox.standin.touch()

    async def cleanup(app: web.Application) -> None:
        await sandbox.close()

    app.on_shutdown.append(shutdown)
    app.on_cleanup.append(cleanup)
