"""Is Slack set up for Countersign? What each of Slack's set-up errors means, and the checks that
``countersign check`` and ``countersign run`` make before anything is served.

A set-up error (a wrong token, a channel the bot is not in, a scope the app lacks) does not go
away by trying again soon: only a person fixes it. This module is the one place that knows which
of Slack's error codes are such (``PERMANENT``) and what to do about each (``fix``). The card
publisher logs a refused call with its fix and has it retried slowly; the start-up checks report
every problem at once, one line each, as configuration problems (status 2, no traceback).
Slack merely not answering (unreachable, a 5xx, a 429) fails ``check`` but not ``run``, which
warns and serves: requests are stored and their cards posted once Slack is back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from approvals import policy

__all__ = [
    "MANIFEST_BOT_NAME",
    "PERMANENT",
    "UNREACHABLE",
    "Problem",
    "SlackAuth",
    "fix",
    "is_permanent",
    "problems",
]

log = logging.getLogger(__name__)

_REPORT = "a bug in Countersign, please report it with the approval id"
_REINSTALL = "reinstall the app, set SLACK_BOT_TOKEN to its Bot User OAuth Token and restart"

#: Slack's error codes that only a person can fix, and how ({bot}: the bot's name from
#: auth.test, {channel}: the channel of the call, {needed}: the scope Slack asked for).
PERMANENT: Mapping[str, str] = {
    "invalid_auth": "SLACK_BOT_TOKEN is not a valid bot token: set it to the app's Bot User "
    "OAuth Token (xoxb-…) and restart",
    "token_revoked": f"SLACK_BOT_TOKEN was revoked (the app uninstalled?): {_REINSTALL}",
    "account_inactive": f"the bot's user or workspace is deactivated: {_REINSTALL}",
    "channel_not_found": "no such channel, or it is private and the bot is not a member: "
    "check the channel id in the policy, or invite the bot: /invite @{bot} in that channel",
    "not_in_channel": "the bot is not a member: invite it: /invite @{bot} in {channel}",
    "is_archived": "the channel is archived: unarchive it, or name another channel in the policy",
    "invalid_blocks": f"Slack refused the message's blocks: {_REPORT}",
    "msg_too_long": f"the message is too long for Slack: {_REPORT}",
    "missing_scope": "the app lacks the scope {needed}: add it (manifest.yml lists every scope "
    "the bot needs), reinstall the app and restart",
}

#: what a network failure looks like through slack_sdk's aiohttp client
UNREACHABLE = (OSError, TimeoutError, aiohttp.ClientError)
#: the bot user's name in manifest.yml: what a fix says when auth.test cannot tell
MANIFEST_BOT_NAME = "countersign"


#: What to do about an app-level token Slack refuses (Socket Mode only).
SOCKET_MODE_FIX = (
    "use the app-level token (xapp-…) with the connections:write scope, from the app's Basic "
    "Information → App-Level Tokens, and turn Socket Mode on; or unset SLACK_APP_TOKEN to "
    "serve Slack over HTTP"
)


def is_permanent(code: str) -> bool:
    """Whether Slack's ``code`` means a set-up problem (retrying soon cannot help)."""
    return code in PERMANENT


def fix(code: str, *, bot: str, channel: str, needed: str | None = None) -> str:
    """What a person does about ``code`` (one of ``PERMANENT``)."""
    return PERMANENT[code].format(bot=bot, channel=channel, needed=needed or "it names")


@dataclass(frozen=True)
class Problem:
    """One line naming what to change. ``permanent``: Slack said no (a person must fix it);
    otherwise Slack could not be asked (unreachable, 5xx, 429), which may pass by itself.
    ``warning``: it works, but perhaps not as meant (neither ``check`` nor ``run`` stops)."""

    text: str
    permanent: bool
    warning: bool = False

    def __str__(self) -> str:
        return self.text


async def problems(
    client: AsyncWebClient, current: policy.Policy, api_url: str, app_token: str | None = None
) -> list[Problem]:
    """Every set-up problem; empty when Slack is ready: the token works (``auth.test``), the
    bot is in each channel the policy names (``conversations.info``) and, for Socket Mode, the
    app-level token opens a connection (``apps.connections.open``: the URL is never used)."""
    found = [] if app_token is None else await _app_token_problems(client, app_token)
    return found + await _bot_problems(client, current, api_url)


async def _app_token_problems(client: AsyncWebClient, app_token: str) -> list[Problem]:
    try:
        await client.apps_connections_open(app_token=app_token)
    except SlackApiError as exc:
        code = str(exc.response.get("error", "error"))
        if code in ("invalid_auth", "not_allowed_token_type", "not_authed", "token_revoked"):
            return [Problem(f"SLACK_APP_TOKEN: Slack refused it ({code}): {SOCKET_MODE_FIX}", True)]
        return [Problem(f"SLACK_APP_TOKEN: Slack could not say ({code}): try again later", False)]
    except UNREACHABLE:
        return []  # said once, for the bot token, which is asked next
    return []


async def _bot_problems(
    client: AsyncWebClient, current: policy.Policy, api_url: str
) -> list[Problem]:
    try:
        identity: Any = await client.auth_test()
    except SlackApiError as exc:
        return [_token_problem(exc)]
    except UNREACHABLE as exc:
        reason = _reason(exc)
        return [Problem(f"SLACK_API_URL: cannot reach Slack at {api_url}: {reason}", False)]
    bot = str(identity.get("user") or MANIFEST_BOT_NAME)
    found = []
    for key, channel in _named_channels(current):
        problem = await _channel_problem(client, channel, bot)
        if problem is not None:
            found.append(dataclasses.replace(problem, text=f"{key}: {problem.text}"))
    return found


class SlackAuth:
    """Whether Slack accepts the bot token, for the readiness probe: the latest ``auth.test``
    answer, asked again at most every ``recheck_after`` seconds (a probe never calls Slack on
    each request) and never waited for longer than ``timeout``.

    Only Slack's own verdict on the token counts: while Slack cannot be reached (or answers 5xx
    or 429), the last verdict stands, since the bot keeps taking requests and the relay posts
    their cards once Slack is back; a problem is reported only before any verdict."""

    def __init__(
        self,
        client: AsyncWebClient,
        api_url: str,
        *,
        recheck_after: float = 60.0,
        timeout: float = 2.0,
    ) -> None:
        self._client = client
        self._api_url = api_url
        self._recheck_after = recheck_after
        self._timeout = timeout
        self._lock = asyncio.Lock()
        self._asked_at: float | None = None  # time.monotonic()
        self._verdict = False  # whether Slack has ever said yes or no to the token
        self._problem: str | None = None

    async def problem(self) -> str | None:
        """Why the token is not known to work, or None when Slack accepted it."""
        async with self._lock:  # concurrent probes share one auth.test
            if self._asked_at is None or time.monotonic() - self._asked_at >= self._recheck_after:
                self._asked_at = time.monotonic()
                await self._ask()
        return self._problem

    async def _ask(self) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                await self._client.auth_test()
        except SlackApiError as exc:
            problem = _token_problem(exc)
            self._answer(problem.text, verdict=problem.permanent)
        except UNREACHABLE as exc:  # a timeout too
            reason = _reason(exc)
            self._answer(f"SLACK_API_URL: cannot reach Slack at {self._api_url}: {reason}")
        else:
            self._answer(None, verdict=True)

    def _answer(self, problem: str | None, *, verdict: bool = False) -> None:
        if verdict or not self._verdict:
            self._problem = problem
            self._verdict = self._verdict or verdict
        if problem is not None:
            log.warning("Slack auth.test failed", extra={"action": "ready", "problem": problem})


def _named_channels(current: policy.Policy) -> list[tuple[str, str]]:
    """Each channel of ``Policy.channels`` with the first key that names it (a channel named
    twice is checked, and reported, once)."""
    first_key: dict[str, str] = {}
    for key, channel in current.channel_keys.items():
        first_key.setdefault(channel, key)
    return [(first_key[channel], channel) for channel in current.channels]


def _reason(exc: BaseException) -> str:
    """A network failure in words (a timeout has none of its own)."""
    return str(exc) or type(exc).__name__


def _token_problem(exc: SlackApiError) -> Problem:
    code = str(exc.response.get("error", "error"))
    if is_permanent(code):
        fixed = fix(code, bot="", channel="")
        return Problem(f"SLACK_BOT_TOKEN: Slack refused it ({code}): {fixed}", True)
    return Problem(
        f"SLACK_API_URL: Slack did not answer auth.test ({code}, HTTP "
        f"{exc.response.status_code}): try again later",
        False,
    )


async def _channel_problem(client: AsyncWebClient, channel: str, bot: str) -> Problem | None:
    """Why the bot cannot post to ``channel``, or None when it can."""
    try:
        response: Any = await client.conversations_info(channel=channel)
    except SlackApiError as exc:
        code = str(exc.response.get("error", "error"))
        if not is_permanent(code):
            return Problem(f"{channel}: Slack could not say ({code}): try again later", False)
        needed = exc.response.get("needed")
        fixed = fix(code, bot=bot, channel=channel, needed=needed)
        return Problem(f"{channel}: Slack says {code}: {fixed}", True)
    except UNREACHABLE as exc:
        return Problem(f"{channel}: cannot reach Slack: {_reason(exc)}", False)
    info = response.get("channel") or {}
    name = f"#{info['name']}" if info.get("name") else channel
    # what chat.postMessage would answer there, found before any card is refused
    if info.get("is_archived"):
        code = "is_archived"
    elif not info.get("is_member"):
        code = "not_in_channel"
    elif info.get("is_ext_shared") or info.get("is_pending_ext_shared"):
        return Problem(
            f"{name} ({channel}) is shared with another organisation (Slack Connect): its "
            "cards show tool calls and their arguments to people outside the company (their "
            "clicks never count unless a role says guests: true); name a channel of your own",
            True,
            warning=True,
        )
    else:
        return None
    return Problem(f"{name} ({channel}): {fix(code, bot=bot, channel=name)}", True)
