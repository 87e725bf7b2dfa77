"""Who a clicker is, fetched from Slack at click time: e-mail (``users.info``) and user-group
membership (``usergroups.users.list``), cached for a short TTL.

Never raises: a failed lookup comes back as ``Approver.lookup_error`` so the pure authority rule
refuses the click (fail closed). Only successful answers are cached.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from guards import authority

__all__ = ["SlackDirectory", "TTLCache"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class TTLCache(Generic[T]):
    """A tiny per-key cache; concurrent misses for one key share one fetch."""

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._values: dict[str, tuple[float, T]] = {}
        self._inflight: dict[str, asyncio.Future[T]] = {}

    async def get(self, key: str, fetch: Callable[[], Awaitable[T]]) -> T:
        hit = self._values.get(key)
        if hit is not None and hit[0] > self._clock():
            return hit[1]
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            value = await fetch()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: a lone caller must not leave a warning behind
            raise
        else:
            self._values[key] = (self._clock() + self._ttl, value)
            future.set_result(value)
            return value
        finally:
            del self._inflight[key]


class SlackDirectory:
    def __init__(self, client: AsyncWebClient, *, ttl: float = 60.0) -> None:
        self._client = client
        self._profiles: TTLCache[dict[str, Any]] = TTLCache(ttl)
        self._groups: TTLCache[frozenset[str]] = TTLCache(ttl)

    async def _profile(self, user_id: str) -> dict[str, Any]:
        response = await self._client.users_info(user=user_id)
        user = response.get("user")
        if not isinstance(user, dict):
            raise LookupError("users.info returned no user")
        return user

    async def _members(self, usergroup: str) -> frozenset[str]:
        response = await self._client.usergroups_users_list(usergroup=usergroup)
        users = response.get("users")
        if not isinstance(users, list):
            raise LookupError("usergroups.users.list returned no users")
        return frozenset(str(u) for u in users)

    async def members(self, usergroup: str) -> frozenset[str]:
        """A user group's members, through the same short-TTL cache the clicks use (Slack
        rate-limits usergroups.users.list). Raises on failure."""
        return await self._groups.get(usergroup, functools.partial(self._members, usergroup))

    async def approver(self, slack_user_id: str, usergroups: frozenset[str]) -> authority.Approver:
        try:
            user = await self._profiles.get(slack_user_id, lambda: self._profile(slack_user_id))
        except Exception as exc:  # whatever went wrong, the click is refused: fail closed
            return authority.Approver(
                slack_user_id=slack_user_id, lookup_error=self._failed(slack_user_id, exc)
            )
        if user.get("deleted") or user.get("is_bot"):
            return authority.Approver(
                slack_user_id=slack_user_id, lookup_error="deactivated or bot account"
            )
        groups = sorted(usergroups)
        answers = await asyncio.gather(
            *(self._groups.get(g, functools.partial(self._members, g)) for g in groups),
            return_exceptions=True,
        )
        member_of = frozenset(
            g
            for g, a in zip(groups, answers, strict=True)
            if isinstance(a, frozenset) and slack_user_id in a
        )
        failed = [
            f"{g}: {self._failed(slack_user_id, a)}"
            for g, a in zip(groups, answers, strict=True)
            if isinstance(a, BaseException)
        ]
        profile = user.get("profile") or {}
        email = profile.get("email")
        return authority.Approver(
            slack_user_id=slack_user_id,
            email=email.lower() if isinstance(email, str) else None,
            name=user.get("real_name") or profile.get("real_name") or user.get("name"),
            usergroups=member_of,
            groups_error="; ".join(failed) or None,
        )

    @staticmethod
    def _failed(slack_user_id: str, exc: BaseException) -> str:
        reason = exc.response.get("error") if isinstance(exc, SlackApiError) else None
        text = str(reason or exc or type(exc).__name__)
        log.warning(
            "approver lookup failed",
            extra={"action": "lookup", "slack_user_id": slack_user_id, "error": text},
        )
        return text
