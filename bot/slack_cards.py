"""Outbox handlers that keep the Slack card in step with the approval.

Both render the approval's *current* state, so they are idempotent and order-tolerant: a card
posted after the approval settled already shows the outcome. Slack's 429s are retried by
slack_sdk's own rate-limit handler on the client; what still fails becomes DeliveryFailed and
the relay's durable backoff takes over.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from approvals import errors, models
from approvals.store import Store
from bot import blocks

__all__ = ["CardPublisher"]

log = logging.getLogger(__name__)
T = TypeVar("T")


async def _slack(call: Callable[[], Awaitable[T]]) -> T:
    """Run a Web API call, turning its failure into DeliveryFailed (with Retry-After)."""
    try:
        return await call()
    except SlackApiError as exc:
        retry_after = exc.response.headers.get("Retry-After") if exc.response else None
        raise errors.DeliveryFailed(
            f"slack: {exc.response.get('error', 'error')} (HTTP {exc.response.status_code})",
            retry_after=float(retry_after) if retry_after else None,
        ) from exc
    except (OSError, TimeoutError) as exc:
        raise errors.DeliveryFailed(f"slack unreachable: {exc!r}") from exc


class CardPublisher:
    def __init__(self, *, client: AsyncWebClient, store: Store, channel: Callable[[], str]) -> None:
        self._client = client
        self._store = store
        self._channel = channel

    async def _approval(self, item: models.OutboxItem) -> models.Approval:
        approval = await self._store.get_approval(item.approval_id)
        assert approval is not None, "outbox rows reference approvals by foreign key"
        return approval

    async def post_card(self, item: models.OutboxItem) -> None:
        approval = await self._approval(item)
        if approval.card is not None:
            return  # posted by an earlier attempt whose completion was not recorded
        text, card_blocks = blocks.card(approval)
        channel = self._channel()
        response: Any = await _slack(
            lambda: self._client.chat_postMessage(channel=channel, text=text, blocks=card_blocks)
        )
        card = models.CardRef(channel=response["channel"], ts=response["ts"])
        await self._store.set_card(approval.approval_id, card)
        log.info(
            "card posted",
            extra={"action": "post_card", "approval_id": approval.approval_id, "ts": card.ts},
        )

    async def update_card(self, item: models.OutboxItem) -> None:
        approval = await self._approval(item)
        if approval.card is None:
            # The post is still queued (Slack down?); it will show the outcome when it lands.
            raise errors.DeliveryFailed("card not posted yet", retry_after=1.0)
        text, card_blocks = blocks.card(approval)
        card = approval.card
        await _slack(
            lambda: self._client.chat_update(
                channel=card.channel, ts=card.ts, text=text, blocks=card_blocks
            )
        )
