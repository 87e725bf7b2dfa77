"""Who a clicker is, fetched from Slack at click time: e-mail, guest flags and organisation
(``users.info``, against this installation's workspace and enterprise from ``auth.test``) and
user-group membership (``usergroups.users.list``), cached for a short TTL.

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
        self._cached_home = alru_cache(maxsize=1, ttl=ttl)(self._home)

    async def _home(self) -> tuple[str, str | None]:
        """This installation's workspace and, on Enterprise Grid, its enterprise."""
        identity = await self._client.auth_test()
        team, enterprise = identity.get("team_id"), identity.get("enterprise_id")
        if not isinstance(team, str) or not team:
            raise LookupError("auth.test returned no team_id")
        return team, enterprise if isinstance(enterprise, str) and enterprise else None

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
        try:
            other_organisation = _other_organisation(user, await self._cached_home())
        except Exception as exc:  # whose organisation this is, unknown: fail closed
            return authority.Approver(
                slack_user_id=slack_user_id, lookup_error=self._failed(slack_user_id, exc)
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
            other_organisation=other_organisation,
            team_id=str(user["team_id"]),
            # Slack's multi-channel (restricted) and single-channel (ultra-restricted) guests
            guest=bool(user.get("is_restricted") or user.get("is_ultra_restricted")),
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


def _other_organisation(user: dict[str, Any], home: tuple[str, str | None]) -> str | None:
    """The user's own workspace when it is not of this installation's organisation, else None.
    A user of the same workspace, or of another workspace of the same Enterprise Grid, is of
    this organisation; a Slack Connect user (``is_stranger``, or another team) is not."""
    team = user.get("team_id")
    if not isinstance(team, str) or not team:
        raise LookupError("users.info did not say which workspace the account belongs to")
    home_team, home_enterprise = home
    enterprise = (user.get("enterprise_user") or {}).get("enterprise_id")
    same = team == home_team or (home_enterprise is not None and enterprise == home_enterprise)
    return team if user.get("is_stranger") or not same else None
