"""Outbox handlers that keep the Slack card in step with the approval: the relay's handlers of
:class:`~approvals.models.PostCard`, :class:`~approvals.models.UpdateCard`,
:class:`~approvals.models.Remind` and :class:`~approvals.models.Escalate` work. They only talk
to Slack and record where the card is; what follows a post (whether anyone could decide) is
the core's.

Both render the approval's *current* state, so they are idempotent and order-tolerant: a card
posted after the approval settled already shows the outcome. Every write is paced per channel
(:mod:`bot.pacing`): a row whose channel has no room yet is given back to the relay as
``NotYet`` (after a wait of at most ``_HOLD`` here), so a backlog on one channel holds none of
the relay's slots. A 429 pauses that channel's bucket for its ``Retry-After`` and becomes
DeliveryFailed, as does any other failure; the relay's durable backoff takes over. A refusal
only a person can fix (a set-up error, see :mod:`bot.slack_setup`) is logged at ERROR with its
fix, counted, and marked permanent, so the relay retries it slowly until someone fixes it (no
restart needed) or its budget is spent.

Delivery is at least once, so a post may be tried again after Slack already showed it (the
process died between ``chat.postMessage`` and storing the card's ts). Every card therefore
carries message metadata naming its approval, and a post that may have been tried before first
looks for that card in the reviewer channel and adopts it instead of posting a second one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, NamedTuple, TypeVar

from async_lru import alru_cache
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from approvals import errors, metrics, models, policy
from approvals.clock import Clock, utcnow
from approvals.repository import Repository
from bot import messages, pacing, rendering, slack_setup

__all__ = ["CardPublisher"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: The ``event_type`` of the message metadata every card carries (its payload: the approval id).
CARD_EVENT = "countersign_approval"
# The look-up is bounded: the channel's messages since the approval was created (minus our
# clock's possible skew against Slack's), at most this many pages of this many messages.
_CLOCK_SKEW = timedelta(minutes=1)
_HISTORY_LIMIT = 100
_HISTORY_PAGES = 5
# A row whose slot is this near waits for it here; a later one is given back to the relay.
_HOLD = 0.05
# Slack's 429 without a Retry-After (it always sends one): stay away this long
_DEFAULT_RETRY_AFTER = 1.0


class _BotIdentity(NamedTuple):
    name: str  # for ``/invite @…``
    user_id: str  # the ``user`` of every message the bot posts


class CardPublisher:
    def __init__(
        self,
        *,
        client: AsyncWebClient,
        store: Repository,
        policy: Callable[[], policy.Policy],
        pacer: pacing.Pacer,
        clock: Clock = utcnow,
    ) -> None:
        self._client = client
        self._clock = clock  # the card shows the single run's deadlines that have passed
        self._pacer = pacer
        self._store = store
        self._policy = policy
        # asked only when needed; async-lru keeps a success, never a failure
        self._identity = alru_cache(maxsize=1)(self._auth_test)

    async def _turn(self, item: models.OutboxItem, *calls: tuple[pacing.Call, str]) -> None:
        """Return when the row may make ``calls`` (each a kind of call and its channel), all
        slots at once so a handler never stops between two posts; raise NotYet when not soon."""
        wait = self._pacer.wait(item.id, calls)
        if wait > 0:
            for call, _channel in calls:
                metrics.SLACK_PACED_WAITS.labels(call.value).inc()
        if wait > _HOLD:
            raise errors.NotYet(after=wait)
        if wait > 0:
            await asyncio.sleep(wait)
        self._pacer.use(item.id, calls)

    async def _slack(
        self,
        item: models.OutboxItem,
        channel: str,
        call: Callable[[], Awaitable[T]],
        paced: pacing.Call | None = None,
    ) -> T:
        """Run a Web API call about ``channel``, turning its failure into DeliveryFailed:
        permanent for a set-up error, else with Slack's Retry-After (if it sent one), which
        also pauses the channel's ``paced`` bucket."""
        try:
            return await call()
        except SlackApiError as exc:
            if paced is not None and exc.response.status_code == 429:
                retry_after = exc.response.headers.get("Retry-After")
                seconds = float(retry_after) if retry_after else _DEFAULT_RETRY_AFTER
                self._pacer.pause(paced, channel, seconds)
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

    async def _auth_test(self) -> _BotIdentity:
        identity: Any = await self._client.auth_test()
        return _BotIdentity(name=str(identity["user"]), user_id=str(identity["user_id"]))

    async def _bot_name(self) -> str:
        """The bot's name, for ``/invite @…``."""
        try:
            return (await self._identity()).name
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
        # the rule's channel, fixed at creation (older approvals: the reviewer channel now)
        channel = approval.review_channel or self._policy().slack.reviewer_channel
        await self._turn(item, (pacing.Call.POST, channel))
        card = await self._earlier_card(approval, channel) if item.maybe_delivered_before else None
        if card is None:
            card = await self._post(item, approval, channel)
        await self._store.set_card(approval.approval_id, card)
        log.debug(  # one per request: counted by the deliveries metric, timed by its histogram
            "card posted",
            extra={"action": "post_card", "approval_id": approval.approval_id, "ts": card.ts},
        )

    async def _post(
        self, item: models.OutboxItem, approval: models.Approval, channel: str
    ) -> models.CardRef:
        # posted late (Slack was down), it may show a grant its approval made already
        made = (
            await self._store.grants_of(approval.approval_id) if _may_have_grant(approval) else []
        )
        text, card_blocks = rendering.card(approval, self._clock(), made=made)
        metadata = {
            "event_type": CARD_EVENT,
            "event_payload": {"approval_id": approval.approval_id},
        }
        response: Any = await self._slack(
            item,
            channel,
            lambda: self._client.chat_postMessage(
                channel=channel, text=text, blocks=card_blocks, metadata=metadata
            ),
            pacing.Call.POST,
        )
        return models.CardRef(channel=response["channel"], ts=response["ts"])

    async def _earlier_card(self, approval: models.Approval, channel: str) -> models.CardRef | None:
        """The card an earlier try posted without recording it, if Slack shows one.

        A look-up that fails answers None and the card is posted: retrying until Slack answers
        would leave reviewers without any card, while a second card is only clutter, not a risk.
        Both carry the same approval id and every click settles through one compare-and-set, so
        the first valid click on either wins and a later one on the other is told it is settled.
        """
        context = {"action": "post_card", "approval_id": approval.approval_id}
        try:
            found = await self._find_card(approval, channel)
        except SlackApiError as exc:
            code = str(exc.response.get("error", "error"))
            why = await self._look_up_refused(channel, code, exc.response.get("needed"))
            log.warning("card look-up refused, posting: %s", why, extra={**context, "code": code})
            return None
        except (KeyError, TypeError, AttributeError, *slack_setup.UNREACHABLE) as exc:
            log.warning("card look-up failed: posting", extra={**context, "error": repr(exc)})
            return None
        if found is not None:
            log.warning("card found in Slack, not posted again", extra={**context, "ts": found.ts})
        return found

    async def _look_up_refused(self, channel: str, code: str, needed: str | None) -> str:
        """Count Slack's refusal of a look-up; what it means (a set-up error's fix, e.g. for an
        app created before the bot asked for the ``*:history`` scopes)."""
        permanent = slack_setup.is_permanent(code)
        metrics.SLACK_ERRORS.labels(code, str(permanent).lower()).inc()
        if not permanent:
            return code
        fix = slack_setup.fix(code, bot=await self._bot_name(), channel=channel, needed=needed)
        return f"{code}: {fix}"

    async def _find_card(self, approval: models.Approval, channel: str) -> models.CardRef | None:
        """Scan the channel's history since the approval was created for the bot's message
        whose metadata names it (a bounded number of pages; past them, None)."""
        bot = await self._identity()
        oldest = f"{(approval.created_at - _CLOCK_SKEW).timestamp():.6f}"
        cursor: str | None = None
        for _ in range(_HISTORY_PAGES):
            page: Any = await self._client.conversations_history(
                channel=channel,
                oldest=oldest,
                limit=_HISTORY_LIMIT,
                include_all_metadata=True,
                cursor=cursor,
            )
            for message in page["messages"]:
                if message.get("user") == bot.user_id and _names(message, approval.approval_id):
                    return models.CardRef(channel=channel, ts=str(message["ts"]))
            cursor = (page.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                return None
        return None

    async def update_card(self, item: models.OutboxItem) -> None:
        update = item.work_as(models.UpdateCard)
        approval = await self._approval(item)
        if update.needless(approval):
            return  # a deadline's update, and the approval moved past it: the card is right
        if approval.decided_by_policy is not None:
            return  # approved by a rule that decides by itself: it has no card
        if approval.grant is not None:
            # approved by a standing grant: no card of its own; the card that made the grant
            # shows its uses (docs/grants.md)
            grant = await self._store.get_grant(approval.grant.id)
            assert grant is not None, "approvals reference grants by foreign key"
            approval = await self._store.get_approval(grant.approval_id) or approval
        approval, called_again = await self._with_call_again(approval)
        if approval.card is None:
            # The post is still queued (Slack down?); it will show the outcome when it lands.
            raise errors.DeliveryFailed("card not posted yet", retry_after=1.0)
        made = (
            await self._store.grants_of(approval.approval_id) if _may_have_grant(approval) else []
        )
        text, card_blocks = rendering.card(approval, self._clock(), called_again, made)
        card = approval.card
        await self._turn(item, (pacing.Call.UPDATE, card.channel))
        await self._slack(
            item,
            card.channel,
            lambda: self._client.chat_update(
                channel=card.channel, ts=card.ts, text=text, blocks=card_blocks
            ),
            pacing.Call.UPDATE,
        )

    async def _with_call_again(
        self, approval: models.Approval
    ) -> tuple[models.Approval, models.Approval | None]:
        """The approval whose card shows ``approval``, and the call again that runs its edit, if
        any: a call again (docs/edits.md) has no card of its own; its original's shows it."""
        if approval.edit_of is not None:
            original = await self._store.get_approval(approval.edit_of)
            assert original is not None, "edit_of references an approval by foreign key"
            return original, approval
        if approval.called_again_as is not None:
            return approval, await self._store.get_approval(approval.called_again_as)
        return approval, None

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
        text = rendering.reminder(approval, self._roles(approval))
        await self._turn(item, (pacing.Call.POST, card.channel))
        await self._slack(
            item,
            card.channel,
            lambda: self._client.chat_postMessage(
                channel=card.channel, thread_ts=card.ts, text=text
            ),
            pacing.Call.POST,
        )

    async def log_line(self, item: models.OutboxItem) -> None:
        """One line in the rule's log channel: the policy approved this call (no card)."""
        channel = item.work_as(models.LogLine).channel
        text = rendering.policy_approved(await self._approval(item))
        await self._turn(item, (pacing.Call.POST, channel))
        await self._slack(
            item,
            channel,
            lambda: self._client.chat_postMessage(channel=channel, text=text),
            pacing.Call.POST,
        )

    async def escalate(self, item: models.OutboxItem) -> None:
        """A post in the on-call channel (when the policy has one), mentioning on-call and
        linking the card: the card stays the one place that settles the request. The card's
        thread says so either way (an escalation that only pages has ``page`` rows of its own,
        see :mod:`bot.paging`)."""
        found = await self._open_card(item)
        oncall = self._policy().oncall
        if found is None or oncall is None:
            return
        approval, card = found
        channel = oncall.channel
        if channel is None:
            await self._turn(item, (pacing.Call.POST, card.channel))
        else:
            await self._turn(item, (pacing.Call.POST, channel), (pacing.Call.POST, card.channel))
            link: Any = await self._slack(
                item,
                card.channel,
                lambda: self._client.chat_getPermalink(channel=card.channel, message_ts=card.ts),
            )
            text = rendering.escalation(approval, oncall, str(link.get("permalink") or "") or None)
            await self._slack(
                item,
                channel,
                lambda: self._client.chat_postMessage(channel=channel, text=text),
                pacing.Call.POST,
            )
        await self._slack(
            item,
            card.channel,
            lambda: self._client.chat_postMessage(
                channel=card.channel, thread_ts=card.ts, text=messages.ESCALATED_THREAD
            ),
            pacing.Call.POST,
        )


def _names(message: dict[str, Any], approval_id: str) -> bool:
    """Whether ``message`` is the card of ``approval_id``, by its metadata."""
    metadata = message.get("metadata") or {}
    payload = metadata.get("event_payload") or {}
    return bool(
        metadata.get("event_type") == CARD_EVENT and payload.get("approval_id") == approval_id
    )


def _may_have_grant(approval: models.Approval) -> bool:
    """Whether its approval may have made a standing grant (read only then): a grant is made
    only by approving, under a rule that allows grants."""
    return approval.grants is not None and approval.status is models.Status.APPROVED
