"""A stand-in for the Slack Web API, served over real HTTP on loopback.

Integration tests and the demo point a real ``slack_sdk`` client at it::

    standin = SlackStandIn(users=[SlackUser("U0ALICE", "alice")])
    base_url = await standin.start()
    client = AsyncWebClient(token="xoxb-test-token", base_url=base_url)
    ...
    await standin.stop()

It speaks HTTP rather than being a mock object so that the code under test
exercises the same serialisation, headers, status codes and retry paths it
would against slack.com. Only the handful of methods Countersign uses are
implemented; their JSON shapes follow the api.slack.com method reference,
reduced to the fields a bot reads.

State lives in plain attributes (``messages``, ``ephemerals``, ``calls``,
``views``, ``channels``) so tests can assert on it directly. A message's ``ts`` is a
predictable counter, not a time (see ``_FIRST_TS_MICROS``), so ``conversations.history``
compares ``oldest`` and ``latest`` with the wall-clock time each message was posted, which is
what they mean on Slack, where a ts is that time. Everything runs on the event
loop that called :meth:`SlackStandIn.start`; the stand-in is not thread-safe.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import copy
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from aiohttp import web

from bot.sandbox.sign_in_standin import SignInStandIn

__all__ = ["DEFAULT_SCOPES", "SlackChannel", "SlackStandIn", "SlackUser"]

# Slack's documented limits (chat.postMessage and Block Kit reference).
MAX_BLOCKS = 50
MAX_BLOCK_TEXT = 3000
MAX_MESSAGE_TEXT = 40000
# conversations.history: 100 messages a page unless ``limit`` says otherwise, at most 999.
HISTORY_DEFAULT_LIMIT = 100
HISTORY_MAX_LIMIT = 999

# Default ts of the first message posted; tests.slack_requests uses the same
# value as its default message_ts so a click on "the first card" needs no
# extra plumbing.
_FIRST_TS_MICROS = 1_700_000_000_000_100
# Step between successive ts values. Real ts values are microsecond-precision
# epoch times; a fixed step keeps them unique, ordered and predictable.
_TS_STEP_MICROS = 100
# Edits and ephemeral messages draw from a separate, later range so that they
# don't shift the ts of posted messages (the n-th post is always
# 1700000000.000100 + (n-1) * 100us) and can't collide with them.
_FIRST_AUX_TS_MICROS = 1_800_000_000_000_100

_WORKSPACE_URL = "https://standin.slack.com/"
_BOT_ID = "B0BOT"

#: The bot scopes a token holds unless a test says otherwise: those manifest.yml asks for.
DEFAULT_SCOPES = frozenset(
    {
        "chat:write",
        "users:read",
        "users:read.email",
        "usergroups:read",
        "commands",
        "channels:read",
        "groups:read",
        "channels:history",
        "groups:history",
    }
)

# Args Slack accepts as JSON-encoded strings in form posts. slack_sdk sends
# JSON bodies for most of these, but form posts (and other clients) send
# strings, so both are decoded to the same Python structure.
_JSON_STRING_ARGS = ("blocks", "attachments", "view", "metadata")

JsonDict = dict[str, Any]
_Handler = Callable[[JsonDict], JsonDict]

# Methods that take the app-level token (``xapp-…``) instead of the bot token.
_APP_LEVEL_METHODS = frozenset({"apps.connections.open"})

# Methods whose success changes what a person would see in Slack (``version``, ``changed``).
_VISIBLE_CHANGES = frozenset(
    {"chat.postMessage", "chat.update", "chat.postEphemeral", "views.open", "views.publish"}
)


@dataclass
class SlackUser:
    """A workspace member known to the stand-in (what ``users.info`` returns)."""

    id: str
    name: str
    email: str | None = None
    real_name: str | None = None
    # another workspace's user (a Slack Connect channel): its team; None: the stand-in's own
    team_id: str | None = None
    enterprise_id: str | None = None  # its Enterprise Grid organisation, if any
    is_restricted: bool = False  # a multi-channel guest
    is_ultra_restricted: bool = False  # a single-channel guest


@dataclass
class SlackChannel:
    """A conversation the stand-in knows: what ``conversations.info`` says about it and how
    ``chat.*`` methods answer there (tests change it through ``set_channel``)."""

    id: str
    name: str
    is_private: bool = False
    is_archived: bool = False
    is_member: bool = True  # whether the bot is in it
    is_ext_shared: bool = False  # shared with another organisation (Slack Connect)


@dataclass
class _InjectedFailure:
    """One queued failure for a method, consumed one call at a time."""

    status: int
    retry_after: int | None
    remaining: int
    error: str


@dataclass
class _RateLimit:
    """Slack's per-channel limit on one method, as a token bucket: ``burst`` calls at once,
    then ``per_second``; a call beyond it is answered 429 with a ``Retry-After``."""

    per_second: float
    burst: int
    # per channel: (tokens left, when they were counted)
    buckets: dict[str, tuple[float, float]]

    def admit(self, channel: str, now: float) -> float | None:
        """None when the call may go (one token taken), else seconds until a token is back."""
        tokens, at = self.buckets.get(channel, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.per_second)
        if tokens >= 1.0:
            self.buckets[channel] = (tokens - 1.0, now)
            return None
        self.buckets[channel] = (tokens, now)
        return (1.0 - tokens) / self.per_second


class _SlackError(Exception):
    """Raised by method handlers to answer ``{"ok": false, "error": ...}`` (and ``details``,
    the extra fields some errors carry, such as ``needed`` for ``missing_scope``)."""

    def __init__(self, error: str, **details: str) -> None:
        super().__init__(error)
        self.error = error
        self.details = details


class SlackStandIn:
    """A loopback HTTP server answering a subset of the Slack Web API.

    Args:
        token: the only bot token accepted; anything else is ``invalid_auth``.
        users: members ``users.info`` and ``chat.postEphemeral`` know about.
        usergroups: usergroup id to member user ids, for ``usergroups.users.list``.
        channels: channel ids the bot is in (public, named after their id); others are
            ``channel_not_found``. ``set_channel`` adds or changes one.
        bot_user_id: the ``user`` of every message the bot posts.
        team_id: the workspace id reported by ``auth.test`` and ``users.info``.
        enterprise_id: the Enterprise Grid organisation ``auth.test`` reports, if any.
        scopes: the bot scopes the token holds (checked by ``conversations.info`` and
            ``conversations.history``).
    """

    def __init__(
        self,
        *,
        token: str = "xoxb-test-token",  # noqa: S107 - the stand-in's own, not a secret
        users: Iterable[SlackUser] = (),
        usergroups: Mapping[str, Iterable[str]] = {},  # read-only: copied below
        channels: Iterable[str] = ("C0REVIEWS",),
        bot_user_id: str = "U0BOT",
        team_id: str = "T0TEAM",
        enterprise_id: str | None = None,
        scopes: Iterable[str] = DEFAULT_SCOPES,
    ) -> None:
        self.token = token
        self.bot_user_id = bot_user_id
        self.team_id = team_id
        self.enterprise_id = enterprise_id
        self.users: dict[str, SlackUser] = {user.id: user for user in users}
        self.usergroups: dict[str, list[str]] = {
            group_id: list(members) for group_id, members in usergroups.items()
        }
        self.scopes: set[str] = set(scopes)
        #: The conversations the stand-in knows, by id.
        self.channels: dict[str, SlackChannel] = {
            channel: SlackChannel(id=channel, name=channel.lower()) for channel in channels
        }
        #: Messages the bot posted, per channel, oldest first.
        self.messages: dict[str, list[JsonDict]] = {channel: [] for channel in self.channels}
        #: Ephemeral messages: ``{"channel", "user", "text", "blocks"}``.
        self.ephemerals: list[JsonDict] = []
        #: Every API call received, in order, as ``(method, merged args)``.
        self.calls: list[tuple[str, JsonDict]] = []
        #: ``views.open`` calls: ``{"trigger_id", "view"}``.
        self.views: list[JsonDict] = []
        #: Sign in with Slack (OpenID Connect) on the stand-in's address: who is signed in
        #: (``sign_in.signed_in_as``), the ID token's claims
        self.sign_in = SignInStandIn(profile=self._profile_of, team_id=self._team_of)

        self._failures: dict[str, list[_InjectedFailure]] = {}
        # per-channel rate limits by method (``rate_limit()``); none unless a test sets one
        self._rate_limits: dict[str, _RateLimit] = {}
        #: 429s answered because a channel's rate was exceeded, by method
        self.rate_limited: dict[str, int] = {}
        #: seconds each call to a method takes before it is answered (``slow()``)
        self.latency: dict[str, float] = {}
        #: App Home views published, by user id (views.publish)
        self.home: dict[str, JsonDict] = {}
        # wall-clock posting time of each message, by (channel, ts): what oldest/latest mean
        self._posted_at: dict[tuple[str, str], Decimal] = {}
        self._next_ts_micros = _FIRST_TS_MICROS
        self._next_aux_ts_micros = _FIRST_AUX_TS_MICROS
        self._view_counter = 0
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None
        #: The app-level token ``apps.connections.open`` accepts (``socket_mode()``); none: it
        #: answers ``invalid_auth``, as for an app without Socket Mode.
        self.app_token: str | None = None
        self._socket_url: Callable[[], str] | None = None
        #: Bumped on each change a person would see (a post, an edit, an ephemeral, a view):
        #: the sandbox page waits on it (``changed``) instead of polling the lists.
        self.version = 0
        self._change = asyncio.Event()
        self._handlers = self._methods()

    def _methods(self) -> dict[str, _Handler]:
        """The Web API methods the stand-in answers, by name."""
        return {
            "apps.connections.open": self._apps_connections_open,
            "auth.test": self._auth_test,
            "chat.postMessage": self._chat_post_message,
            "chat.update": self._chat_update,
            "chat.postEphemeral": self._chat_post_ephemeral,
            "chat.getPermalink": self._chat_get_permalink,
            "conversations.info": self._conversations_info,
            "conversations.history": self._conversations_history,
            "users.info": self._users_info,
            "usergroups.users.list": self._usergroups_users_list,
            "views.open": self._views_open,
            "views.publish": self._views_publish,
        }

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> str:
        """Bind 127.0.0.1 on a free port and return the API base URL.

        The URL ends in ``/api/`` because ``slack_sdk`` appends the method
        name to ``base_url`` verbatim.
        """
        if self._runner is not None:
            raise RuntimeError("SlackStandIn is already running")
        app = web.Application()
        self.sign_in.add_routes(app)  # before /api/{method}: its token endpoint is under /api/
        app.router.add_route("POST", "/api/{method}", self._handle)
        app.router.add_route("GET", "/api/{method}", self._handle)
        # A short shutdown timeout: a client that keeps a connection open must
        # not stall test teardown for aiohttp's default 60 s. No access log,
        # since tests assert on ``calls`` rather than on log lines.
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        host, port = runner.addresses[0][:2]
        self._runner = runner
        self._base_url = f"http://{host}:{port}/api/"
        self.sign_in.issuer = f"http://{host}:{port}"
        return self._base_url

    def _profile_of(self, user_id: str) -> tuple[str | None, str] | None:
        user = self.users.get(user_id)
        return None if user is None else (user.email, user.real_name or user.name)

    def _team_of(self, user_id: str) -> str:
        user = self.users.get(user_id)
        return (user.team_id if user is not None else None) or self.team_id

    async def stop(self) -> None:
        """Stop serving and release the port. Safe to call more than once."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    @property
    def base_url(self) -> str:
        """The URL :meth:`start` returned; raises if the server isn't running."""
        if self._base_url is None or self._runner is None:
            raise RuntimeError("SlackStandIn is not running; await start() first")
        return self._base_url

    # ----------------------------------------------------------- test controls

    def add_user(self, user: SlackUser) -> None:
        """Add (or replace) a workspace member."""
        self.users[user.id] = user

    def set_usergroup(self, group_id: str, user_ids: Iterable[str]) -> None:
        """Create a usergroup or replace its members."""
        self.usergroups[group_id] = list(user_ids)

    def set_channel(
        self,
        channel: str,
        *,
        name: str | None = None,
        is_private: bool | None = None,
        is_archived: bool | None = None,
        is_member: bool | None = None,
        is_ext_shared: bool | None = None,
    ) -> SlackChannel:
        """Create a channel or change it: e.g. ``is_member=False`` as if the bot was never
        invited (``chat.postMessage`` answers ``not_in_channel``), later ``True`` once it is."""
        state = self.channels.setdefault(channel, SlackChannel(id=channel, name=channel.lower()))
        changes = {
            "name": name,
            "is_private": is_private,
            "is_archived": is_archived,
            "is_member": is_member,
            "is_ext_shared": is_ext_shared,
        }
        for field, value in changes.items():
            if value is not None:
                setattr(state, field, value)
        self.messages.setdefault(channel, [])
        return state

    def fail(
        self,
        method: str,
        *,
        status: int = 500,
        retry_after: int | None = None,
        times: int = 1,
        error: str | None = None,
    ) -> None:
        """Make the next ``times`` calls to ``method`` fail.

        * ``status=429``: HTTP 429, body ``{"ok": false, "error": "ratelimited"}``,
          plus a ``Retry-After`` header when ``retry_after`` is given.
        * other non-200 statuses: that status with ``"internal_error"`` (or
          ``error``) in the body; ``Retry-After`` is sent too if given, as Slack
          does on some 503s.
        * ``status=200`` with ``error``: a Slack-level error, ``200 {"ok": false}``.

        Failures queue up: two ``fail`` calls for one method play in order.
        An injected failure wins over every other check (auth included), as an
        outage or rate limit would.
        """
        if times < 1:
            raise ValueError("times must be at least 1")
        if status == 200 and error is None:
            raise ValueError("status=200 needs an error; a 200 without one is not a failure")
        if error is None:
            error = "ratelimited" if status == 429 else "internal_error"
        failure = _InjectedFailure(status, retry_after, times, error)
        self._failures.setdefault(method, []).append(failure)

    def socket_mode(self, app_token: str, url: Callable[[], str]) -> None:
        """Turn Socket Mode on: ``apps.connections.open`` takes ``app_token`` and answers with
        ``url()``, a fresh websocket URL each time (tests.support.socket_mode serves them)."""
        self.app_token = app_token
        self._socket_url = url

    def slow(self, method: str, seconds: float) -> None:
        """Make every later call to ``method`` take ``seconds`` before it is answered."""
        self.latency[method] = seconds

    def rate_limit(self, method: str, *, per_second: float, burst: int = 1) -> None:
        """Enforce Slack's per-channel rate on ``method``: ``burst`` calls to one channel at
        once, then ``per_second``; beyond it, 429 ``ratelimited`` with a ``Retry-After`` in
        whole seconds (as Slack sends it), each counted in ``rate_limited``."""
        if per_second <= 0 or burst < 1:
            raise ValueError("a rate limit needs per_second > 0 and burst >= 1")
        self._rate_limits[method] = _RateLimit(per_second, burst, {})

    def clear_failures(self) -> None:
        """Forget every injected failure still queued: Slack is healthy again."""
        self._failures.clear()

    def fail_lookups(self, *, times: int = 1) -> None:
        """Make the next ``times`` ``users.info`` and ``usergroups.users.list`` calls 500."""
        self.fail("users.info", times=times)
        self.fail("usergroups.users.list", times=times)

    # The ``timeout`` parameter is the agreed API; wrapping callers in
    # asyncio.timeout would lose the explanatory message below.
    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Poll ``predicate`` every 10 ms until it is true.

        Raises:
            AssertionError: after ``timeout`` seconds, naming the predicate and
                listing the most recent calls so the failure explains itself.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            if loop.time() >= deadline:
                recent = [method for method, _ in self.calls[-10:]]
                name = getattr(predicate, "__qualname__", repr(predicate))
                raise AssertionError(
                    f"condition {name} not met within {timeout:.2f}s; "
                    f"{len(self.calls)} Slack API calls so far, most recent: {recent}"
                )
            await asyncio.sleep(0.01)

    def card(self, channel: str, ts: str) -> JsonDict:
        """Return the current state of the message ``ts`` in ``channel``.

        Raises:
            AssertionError: if no such message was posted.
        """
        for message in self.messages.get(channel, []):
            if message["ts"] == ts:
                return message
        known = [message["ts"] for message in self.messages.get(channel, [])]
        raise AssertionError(f"no message {ts} in channel {channel}; messages there: {known}")

    def methods_called(self, method: str) -> list[JsonDict]:
        """Return the args of every call to ``method``, in order."""
        return [args for name, args in self.calls if name == method]

    def touch(self) -> None:
        """Note a visible change (done after each successful post, edit, ephemeral or view;
        the sandbox calls it for changes of its own): bumps ``version``, wakes ``changed``."""
        self.version += 1
        change, self._change = self._change, asyncio.Event()
        change.set()

    async def changed(self, since: int, timeout: float) -> int:
        """Wait until ``version`` is past ``since`` or ``timeout`` seconds went by; the
        version then (unchanged after a timeout)."""
        if self.version <= since:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._change.wait(), timeout)
        return self.version

    # ------------------------------------------------------------- HTTP layer

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        try:
            args = await self._read_args(request)
        except _SlackError as exc:
            self.calls.append((method, {}))
            return _slack_error(exc.error)
        # Recorded before any check, so tests can see rejected calls too.
        # A deep copy, so later edits to stored messages don't rewrite history.
        self.calls.append((method, copy.deepcopy(args)))

        pause = self.latency.get(method)
        if pause:
            await asyncio.sleep(pause)  # a slow Slack, to show nothing waits on it holding locks
        failure = self._take_failure(method)
        if failure is not None:
            headers = {}
            if failure.retry_after is not None:
                headers["Retry-After"] = str(failure.retry_after)
            return web.json_response(
                {"ok": False, "error": failure.error}, status=failure.status, headers=headers
            )

        limited = self._over_rate(method, args)
        if limited is not None:
            return limited

        handler = self._handlers.get(method)
        if handler is None:
            # Slack reports unknown methods before looking at the token.
            return web.json_response({"ok": False, "error": "unknown_method", "req_method": method})

        token = _bearer_token(request) or args.get("token")
        if not token:
            return _slack_error("not_authed")
        if method in _APP_LEVEL_METHODS:
            if token == self.token:
                return _slack_error("not_allowed_token_type")  # a bot token: the wrong kind
            if self.app_token is None or token != self.app_token:
                return _slack_error("invalid_auth")
        elif token != self.token:
            # Slack refuses an app-level token on a bot method for its kind, not as unknown
            wrong_kind = self.app_token is not None and token == self.app_token
            return _slack_error("not_allowed_token_type" if wrong_kind else "invalid_auth")

        try:
            body = handler(args)
        except _SlackError as exc:
            return _slack_error(exc.error, **exc.details)
        if method in _VISIBLE_CHANGES:
            self.touch()
        return web.json_response({"ok": True, **body})

    async def _read_args(self, request: web.Request) -> JsonDict:
        """Merge query string, form body and JSON body, as Slack does."""
        args: JsonDict = dict(request.query)
        if request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            form = await request.post()
            args.update({key: value for key, value in form.items() if isinstance(value, str)})
        elif request.content_type == "application/json":
            raw = await request.text()
            if raw.strip():
                try:
                    decoded = json.loads(raw)
                except json.JSONDecodeError:
                    raise _SlackError("invalid_json") from None
                if not isinstance(decoded, dict):
                    raise _SlackError("json_not_object")
                args.update(decoded)
        for key in _JSON_STRING_ARGS:
            value = args.get(key)
            if isinstance(value, str):
                # Undecodable values stay strings; the method handler rejects
                # them with the error Slack uses for that argument.
                with contextlib.suppress(json.JSONDecodeError):
                    args[key] = json.loads(value)
        return args

    def _over_rate(self, method: str, args: JsonDict) -> web.Response | None:
        """The 429 for a call past its channel's rate limit, or None when it may go."""
        limit = self._rate_limits.get(method)
        if limit is None:
            return None
        wait = limit.admit(str(args.get("channel", "")), time.monotonic())
        if wait is None:
            return None
        self.rate_limited[method] = self.rate_limited.get(method, 0) + 1
        return web.json_response(
            {"ok": False, "error": "ratelimited"},
            status=429,
            headers={"Retry-After": str(max(1, math.ceil(wait)))},
        )

    def _take_failure(self, method: str) -> _InjectedFailure | None:
        queue = self._failures.get(method)
        if not queue:
            return None
        failure = queue[0]
        failure.remaining -= 1
        if failure.remaining == 0:
            queue.pop(0)
        return failure

    # ---------------------------------------------------------- API methods

    def _apps_connections_open(self, args: JsonDict) -> JsonDict:
        """A Socket Mode websocket URL (reached only with the app token, see ``_handle``)."""
        assert self._socket_url is not None, "the app token is only accepted with socket_mode()"
        return {"url": self._socket_url()}

    def _auth_test(self, args: JsonDict) -> JsonDict:
        identity: JsonDict = {
            "url": _WORKSPACE_URL,
            "team": "Stand-in",
            "user": "countersign",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": _BOT_ID,
        }
        if self.enterprise_id is not None:
            identity["enterprise_id"] = self.enterprise_id
        return identity

    def _chat_post_message(self, args: JsonDict) -> JsonDict:
        channel = self._require_channel(args)
        text, blocks = _validate_content(args)
        message: JsonDict = {
            "type": "message",
            "ts": self._new_ts(),
            "user": self.bot_user_id,
            "bot_id": _BOT_ID,
            "team": self.team_id,
            "text": text or "",
            "blocks": blocks or [],
        }
        if args.get("thread_ts"):
            message["thread_ts"] = str(args["thread_ts"])
        if args.get("metadata") is not None:
            message["metadata"] = _validate_metadata(args["metadata"])
        self.messages[channel].append(message)
        self._posted_at[(channel, message["ts"])] = Decimal(repr(time.time()))
        return {"channel": channel, "ts": message["ts"], "message": copy.deepcopy(message)}

    def _chat_update(self, args: JsonDict) -> JsonDict:
        channel = self._require_channel(args)
        message = self._find_message(channel, args.get("ts"))
        text, blocks = _validate_content(args)
        # Per the chat.update reference, omitted fields keep their old value;
        # an explicit empty list removes the blocks.
        if text is not None:
            message["text"] = text
        if blocks is not None:
            message["blocks"] = blocks
        message["edited"] = {"user": self.bot_user_id, "ts": self._new_aux_ts()}
        return {
            "channel": channel,
            "ts": message["ts"],
            "text": message["text"],
            "message": copy.deepcopy(message),
        }

    def _chat_post_ephemeral(self, args: JsonDict) -> JsonDict:
        channel = self._require_channel(args)
        user = args.get("user")
        if user not in self.users:
            raise _SlackError("user_not_found")
        text, blocks = _validate_content(args)
        self.ephemerals.append(
            {"channel": channel, "user": user, "text": text or "", "blocks": blocks or []}
        )
        return {"message_ts": self._new_aux_ts()}

    def _chat_get_permalink(self, args: JsonDict) -> JsonDict:
        channel = self._visible_channel(args).id  # a link needs no membership
        message = self._find_message(channel, args.get("message_ts"))
        ts = str(message["ts"])
        return {
            "channel": channel,
            "permalink": f"{_WORKSPACE_URL}archives/{channel}/p{ts.replace('.', '')}",
        }

    def _conversations_info(self, args: JsonDict) -> JsonDict:
        """The channel as a bot sees it; the scope needed depends on its kind, as on Slack."""
        channel = self._visible_channel(args)
        needed = "groups:read" if channel.is_private else "channels:read"
        if needed not in self.scopes:
            raise _SlackError(
                "missing_scope", needed=needed, provided=",".join(sorted(self.scopes))
            )
        return {
            "channel": {
                "id": channel.id,
                "name": channel.name,
                "is_channel": not channel.is_private,
                "is_group": channel.is_private,
                "is_private": channel.is_private,
                "is_archived": channel.is_archived,
                "is_member": channel.is_member,
                "is_ext_shared": channel.is_ext_shared,
                "is_shared": channel.is_ext_shared,
            }
        }

    def _conversations_history(self, args: JsonDict) -> JsonDict:
        """The channel's top-level messages, newest first, a page at a time (``limit``,
        ``cursor``), within ``oldest`` .. ``latest`` (exclusive unless ``inclusive``); each
        message's ``metadata`` only with ``include_all_metadata``."""
        channel = self._visible_channel(args)
        needed = "groups:history" if channel.is_private else "channels:history"
        if needed not in self.scopes:
            raise _SlackError(
                "missing_scope", needed=needed, provided=",".join(sorted(self.scopes))
            )
        if not channel.is_member:
            raise _SlackError("not_in_channel")
        limit = _history_limit(args.get("limit"))
        oldest = _history_time(args.get("oldest"), "invalid_ts_oldest")
        latest = _history_time(args.get("latest"), "invalid_ts_latest")
        inclusive = _truthy(args.get("inclusive"))

        def in_window(message: JsonDict) -> bool:
            # a message a test put in ``messages`` itself counts as posted at the epoch
            posted = self._posted_at.get((channel.id, message["ts"]), Decimal(0))
            after = oldest is None or posted > oldest or (inclusive and posted == oldest)
            before = latest is None or posted < latest or (inclusive and posted == latest)
            return after and before

        window = [
            message
            for message in reversed(self.messages.get(channel.id, []))
            if "thread_ts" not in message and in_window(message)
        ]
        start = _cursor_start(args.get("cursor"), window)
        page = window[start : start + limit]
        with_metadata = _truthy(args.get("include_all_metadata"))
        body: JsonDict = {
            "messages": [
                {k: copy.deepcopy(v) for k, v in m.items() if k != "metadata" or with_metadata}
                for m in page
            ],
            "has_more": start + limit < len(window),
            "pin_count": 0,
        }
        if body["has_more"]:
            cursor = base64.b64encode(f"next_ts:{window[start + limit]['ts']}".encode()).decode()
            body["response_metadata"] = {"next_cursor": cursor}
        return body

    def _users_info(self, args: JsonDict) -> JsonDict:
        user = self.users.get(str(args.get("user", "")))
        if user is None:
            raise _SlackError("user_not_found")
        real_name = user.real_name or user.name
        profile: JsonDict = {"real_name": real_name, "display_name": user.name}
        # Slack leaves email out when the member has none or the token lacks
        # users:read.email, so the bot must cope with its absence.
        if user.email is not None:
            profile["email"] = user.email
        team = user.team_id or self.team_id
        answer: JsonDict = {
            "id": user.id,
            "team_id": team,
            "name": user.name,
            "real_name": real_name,
            "deleted": False,
            "is_bot": False,
            "is_restricted": user.is_restricted,
            "is_ultra_restricted": user.is_ultra_restricted,
            "profile": profile,
        }
        if user.enterprise_id is not None:
            answer["enterprise_user"] = {"enterprise_id": user.enterprise_id, "teams": [team]}
        if team != self.team_id and user.enterprise_id != self.enterprise_id:
            answer["is_stranger"] = True  # as Slack marks a Slack Connect user
        return {"user": answer}

    def _usergroups_users_list(self, args: JsonDict) -> JsonDict:
        members = self.usergroups.get(str(args.get("usergroup", "")))
        if members is None:
            raise _SlackError("no_such_subteam")
        return {"users": list(members)}

    def _views_publish(self, args: JsonDict) -> JsonDict:
        """App Home: the latest published view per user (``home``)."""
        user = args.get("user_id")
        view = args.get("view")
        if not isinstance(user, str) or not isinstance(view, dict):
            raise _SlackError("invalid_arguments")
        if user not in self.users:
            raise _SlackError("user_not_found")
        self.home[user] = view
        return {"view": {"id": f"VHOME{user}", **view}}

    def _views_open(self, args: JsonDict) -> JsonDict:
        trigger_id = args.get("trigger_id")
        view = args.get("view")
        if not trigger_id or not isinstance(view, dict):
            raise _SlackError("invalid_arguments")
        self.views.append({"trigger_id": trigger_id, "view": copy.deepcopy(view)})
        self._view_counter += 1
        view_id = f"V{self._view_counter:08d}"
        opened: JsonDict = {
            "id": view_id,
            "team_id": self.team_id,
            "private_metadata": "",
            "callback_id": "",
            "external_id": "",
            "state": {"values": {}},
            "hash": f"{int(time.time())}.{self._view_counter:08d}",
            "root_view_id": view_id,
            "previous_view_id": None,
            "app_id": "A0COUNTERSIGN",
            "bot_id": _BOT_ID,
            **copy.deepcopy(view),
        }
        # The id is Slack's, whatever the caller sent.
        opened["id"] = view_id
        return {"view": opened}

    # --------------------------------------------------------------- helpers

    def _visible_channel(self, args: JsonDict) -> SlackChannel:
        """The channel named by ``args``, if the bot can see it: Slack hides a private
        channel from a bot that is not in it (``channel_not_found``, as for no channel)."""
        channel = self.channels.get(str(args.get("channel", "")))
        if channel is None or (channel.is_private and not channel.is_member):
            raise _SlackError("channel_not_found")
        return channel

    def _require_channel(self, args: JsonDict) -> str:
        """The channel named by ``args``, if the bot may write there; a member's user id is
        their direct messages with the app (kept under that id), as Slack allows."""
        named = str(args.get("channel", ""))
        if named in self.users:
            self.messages.setdefault(named, [])
            return named
        channel = self._visible_channel(args)
        if channel.is_archived:
            raise _SlackError("is_archived")
        if not channel.is_member:
            raise _SlackError("not_in_channel")
        # A channel passed to the constructor always has a list, but a test may
        # have added to ``channels`` afterwards.
        self.messages.setdefault(channel.id, [])
        return channel.id

    def _find_message(self, channel: str, ts: object) -> JsonDict:
        for message in self.messages[channel]:
            if message["ts"] == ts:
                return message
        raise _SlackError("message_not_found")

    def _new_ts(self) -> str:
        micros = self._next_ts_micros
        self._next_ts_micros += _TS_STEP_MICROS
        return _format_ts(micros)

    def _new_aux_ts(self) -> str:
        micros = self._next_aux_ts_micros
        self._next_aux_ts_micros += _TS_STEP_MICROS
        return _format_ts(micros)


def _format_ts(micros: int) -> str:
    seconds, fraction = divmod(micros, 1_000_000)
    return f"{seconds}.{fraction:06d}"


def _validate_content(args: JsonDict) -> tuple[str | None, list[JsonDict] | None]:
    """Check text and blocks the way chat.* methods do; return them (None if absent)."""
    text = args.get("text")
    if text is not None and not isinstance(text, str):
        text = str(text)
    blocks = args.get("blocks")
    if blocks is not None:
        if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
            # Undecodable JSON or a non-array: Slack's error for a malformed value.
            raise _SlackError("invalid_blocks_format")
        _validate_blocks(blocks)
    if not text and not blocks:
        raise _SlackError("no_text")
    if text is not None and len(text) > MAX_MESSAGE_TEXT:
        raise _SlackError("msg_too_long")
    return text, blocks


def _validate_metadata(metadata: object) -> JsonDict:
    """Message metadata as chat.postMessage takes it: an ``event_type`` string and an
    ``event_payload`` object."""
    if not isinstance(metadata, dict):
        raise _SlackError("invalid_metadata_format")
    if not isinstance(metadata.get("event_type"), str) or not isinstance(
        metadata.get("event_payload"), dict
    ):
        raise _SlackError("invalid_metadata_schema")
    return copy.deepcopy(metadata)


def _truthy(value: object) -> bool:
    """A boolean argument as clients send it: JSON true, or "true"/"1" in a form or query."""
    return value is True or str(value).lower() in ("true", "1")


def _history_limit(value: object) -> int:
    if value is None or value == "":
        return HISTORY_DEFAULT_LIMIT
    try:
        limit = int(str(value))
    except ValueError:
        raise _SlackError("invalid_limit") from None
    if limit < 1:
        raise _SlackError("invalid_limit")
    return min(limit, HISTORY_MAX_LIMIT)


def _history_time(value: object, error: str) -> Decimal | None:
    """``oldest`` / ``latest``: a Unix time in seconds, as a string; absent or empty, no bound."""
    if value is None or value == "":
        return None
    try:
        return Decimal(str(value))
    except InvalidOperation:
        raise _SlackError(error) from None


def _cursor_start(cursor: object, window: list[JsonDict]) -> int:
    """Where the page a ``next_cursor`` names starts (no cursor: the first page). The cursor
    names the page's first message, so messages posted meanwhile shift nothing."""
    if cursor is None or cursor == "":
        return 0
    try:
        kind, _, ts = base64.b64decode(str(cursor), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise _SlackError("invalid_cursor") from None
    for index, message in enumerate(window):
        if kind == "next_ts" and message["ts"] == ts:
            return index
    raise _SlackError("invalid_cursor")


def _validate_blocks(blocks: list[JsonDict]) -> None:
    """Enforce the Block Kit limits a card is most likely to hit.

    Deliberately partial: the block count and the per-text 3000-character
    limit, the two that long tool-call arguments trip over. (Real Slack is
    stricter in places, e.g. header text is capped at 150 characters.)
    """
    if len(blocks) > MAX_BLOCKS:
        raise _SlackError("invalid_blocks")
    for block in blocks:
        if "type" not in block:
            raise _SlackError("invalid_blocks")
        kind = block["type"]
        texts: list[object] = []
        if kind in ("section", "header"):
            texts.append(block.get("text"))
        if kind == "section":
            texts.extend(block.get("fields") or [])
        if kind == "context":
            texts.extend(block.get("elements") or [])
        for item in texts:
            if isinstance(item, dict):
                value = item.get("text")
                if isinstance(value, str) and len(value) > MAX_BLOCK_TEXT:
                    raise _SlackError("invalid_blocks")


def _bearer_token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None


def _slack_error(error: str, **details: str) -> web.Response:
    # Slack answers API-level errors with HTTP 200; only transport-level
    # trouble (rate limits, outages) uses other status codes.
    return web.json_response({"ok": False, "error": error, **details})
