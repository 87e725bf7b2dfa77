"""Who a clicker is, fetched from Slack at click time: e-mail (``users.info``) and user-group
membership (``usergroups.users.list``), cached for a short TTL.

Never raises: a failed lookup comes back as ``Approver.lookup_error`` so the pure authority rule
refuses the click (fail closed). Only successful answers are cached.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from async_lru import alru_cache
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from guards import authority

__all__ = ["SlackDirectory"]

log = logging.getLogger(__name__)


class SlackDirectory:
    def __init__(self, client: AsyncWebClient, *, ttl: float = 60.0) -> None:
        self._client = client
        # Caches of this directory only (one per app, none shared between tests). async-lru
        # keeps only successful answers, lets concurrent misses for one key share one fetch,
        # and drops each answer ``ttl`` seconds after it came: no size bound is needed.
        self._cached_profile = alru_cache(maxsize=None, ttl=ttl)(self._profile)
        self._cached_members = alru_cache(maxsize=None, ttl=ttl)(self._members)

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
        return await self._cached_members(usergroup)

    async def approver(self, slack_user_id: str, usergroups: frozenset[str]) -> authority.Approver:
        try:
            user: dict[str, Any] = await self._cached_profile(slack_user_id)
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
            *(self._cached_members(g) for g in groups),
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
