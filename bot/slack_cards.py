"""Outbox handlers that keep the Slack card in step with the approval.

Both render the approval's *current* state, so they are idempotent and order-tolerant: a card
posted after the approval settled already shows the outcome. Slack's 429s are retried by
slack_sdk's own rate-limit handler on the client; what still fails becomes DeliveryFailed and
the relay's durable backoff takes over. A refusal only a person can fix (a set-up error, see
:mod:`bot.slack_setup`) is logged at ERROR with its fix, counted, and marked permanent, so the
relay retries it slowly until someone fixes it (no restart needed) or its budget is spent.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from async_lru import alru_cache
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from approvals import errors, metrics, models, policy, service
from approvals.repository import Repository
from bot import blocks, messages, slack_setup

__all__ = ["CardPublisher"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class CardPublisher:
    def __init__(
        self,
        *,
        client: AsyncWebClient,
        store: Repository,
        approvals: service.ApprovalService,
        policy: Callable[[], policy.Policy],
        members: Callable[[str], Awaitable[frozenset[str]]],
    ) -> None:
        self._client = client
        self._store = store
        self._approvals = approvals  # the core's: it decides whether anyone could decide
        self._policy = policy
        self._members = members  # a user group's members (cached); raises when Slack can't say
        # asked only when a fix needs it; async-lru keeps a success, never a failure
        self._cached_bot_name = alru_cache(maxsize=1)(self._auth_test_name)

    async def _slack(
        self, item: models.OutboxItem, channel: str, call: Callable[[], Awaitable[T]]
    ) -> T:
        """Run a Web API call about ``channel``, turning its failure into DeliveryFailed:
        permanent for a set-up error, else with Slack's Retry-After (if it sent one)."""
        try:
            return await call()
        except SlackApiError as exc:
            raise await self._refused(item, channel, exc) from exc
        except (OSError, TimeoutError) as exc:
            raise errors.DeliveryFailed(f"slack unreachable: {exc!r}") from exc

    async def _refused(
        self, item: models.OutboxItem, channel: str, exc: SlackApiError
    ) -> errors.DeliveryFailed:
        code = str(exc.response.get("error", "error"))
        permanent = slack_setup.is_permanent(code)
        metrics.SLACK_ERRORS.labels(code, str(permanent).lower()).inc()
        error = f"slack: {code} (HTTP {exc.response.status_code})"
        if not permanent:
            retry_after = exc.response.headers.get("Retry-After")
            return errors.DeliveryFailed(
                error, retry_after=float(retry_after) if retry_after else None
            )
        needed = exc.response.get("needed")
        fix = slack_setup.fix(code, bot=await self._bot_name(), channel=channel, needed=needed)
        log.error(
            "slack refused %s in %s (%s): %s",
            item.kind.value,
            channel,
            code,
            fix,
            extra={"action": item.kind.value, "approval_id": item.approval_id, "code": code},
        )
        # the fix goes on the approval resource too (its card's error), for whoever looks there
        return errors.DeliveryFailed(f"{error}: {fix}", permanent=True)

    async def _auth_test_name(self) -> str:
        identity: Any = await self._client.auth_test()
        return str(identity["user"])

    async def _bot_name(self) -> str:
        """The bot's name, for ``/invite @…``."""
        try:
            return await self._cached_bot_name()
        except (SlackApiError, KeyError, *slack_setup.UNREACHABLE):
            return slack_setup.MANIFEST_BOT_NAME

    async def _approval(self, item: models.OutboxItem) -> models.Approval:
        approval = await self._store.get_approval(item.approval_id)
        assert approval is not None, "outbox rows reference approvals by foreign key"
        return approval

    async def post_card(self, item: models.OutboxItem) -> None:
        approval = await self._approval(item)
        if approval.card is not None:
            return  # posted by an earlier attempt whose completion was not recorded
        text, card_blocks = blocks.card(approval)
        channel = self._policy().slack.reviewer_channel
        response: Any = await self._slack(
            item,
            channel,
            lambda: self._client.chat_postMessage(channel=channel, text=text, blocks=card_blocks),
        )
        card = models.CardRef(channel=response["channel"], ts=response["ts"])
        await self._store.set_card(approval.approval_id, card)
        log.info(
            "card posted",
            extra={"action": "post_card", "approval_id": approval.approval_id, "ts": card.ts},
        )
        await self._approvals.escalate_if_nobody_can_decide(
            approval, functools.partial(self._group_members, approval.approval_id)
        )

    async def _group_members(self, approval_id: str, usergroup: str) -> frozenset[str] | None:
        """A user group's members, or None when Slack cannot say now: the card is up either
        way, so the early-escalation check is skipped (logged) and the ordinary ladder runs."""
        try:
            return await self._members(usergroup)
        except Exception as exc:  # any failure means "unknown", never "nobody holds the role"
            log.warning(
                "user group lookup failed: no early escalation",
                extra={
                    "action": "post_card",
                    "approval_id": approval_id,
                    "usergroup": usergroup,
                    "error": repr(exc),
                },
                exc_info=exc,
            )
            return None

    async def update_card(self, item: models.OutboxItem) -> None:
        approval = await self._approval(item)
        if approval.card is None:
            # The post is still queued (Slack down?); it will show the outcome when it lands.
            raise errors.DeliveryFailed("card not posted yet", retry_after=1.0)
        text, card_blocks = blocks.card(approval)
        card = approval.card
        await self._slack(
            item,
            card.channel,
            lambda: self._client.chat_update(
                channel=card.channel, ts=card.ts, text=text, blocks=card_blocks
            ),
        )

    async def _open_card(
        self, item: models.OutboxItem
    ) -> tuple[models.Approval, models.CardRef] | None:
        """The approval and its card, or None when it settled meanwhile (nothing to chase)."""
        approval = await self._approval(item)
        if approval.settled:
            return None
        if approval.card is None:
            raise errors.DeliveryFailed("card not posted yet", retry_after=1.0)
        return approval, approval.card

    def _roles(self, approval: models.Approval) -> list[policy.Role]:
        """The roles that may decide, as the current policy defines them."""
        current = self._policy()
        return [current.roles.get(r, policy.Role()) for r in approval.required.roles]

    async def remind(self, item: models.OutboxItem) -> None:
        """A reminder in the card's thread, mentioning who can decide."""
        found = await self._open_card(item)
        if found is None:
            return
        approval, card = found
        text = blocks.reminder(approval, self._roles(approval))
        await self._slack(
            item,
            card.channel,
            lambda: self._client.chat_postMessage(
                channel=card.channel, thread_ts=card.ts, text=text
            ),
        )

    async def escalate(self, item: models.OutboxItem) -> None:
        """A post in the on-call channel, mentioning on-call and linking the card: the card
        stays the one place that settles the request."""
        found = await self._open_card(item)
        oncall = self._policy().oncall
        if found is None or oncall is None:
            return
        approval, card = found
        link: Any = await self._slack(
            item,
            card.channel,
            lambda: self._client.chat_getPermalink(channel=card.channel, message_ts=card.ts),
        )
        text = blocks.escalation(approval, oncall, str(link.get("permalink") or "") or None)
        await self._slack(
            item,
            oncall.channel,
            lambda: self._client.chat_postMessage(channel=oncall.channel, text=text),
        )
        await self._slack(
            item,
            card.channel,
            lambda: self._client.chat_postMessage(
                channel=card.channel, thread_ts=card.ts, text=messages.ESCALATED_THREAD
            ),
        )
