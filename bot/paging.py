"""Pages on-call through PagerDuty's Events API v2 and Opsgenie's Alert API: the relay's handler
for outbox rows of kind ``page`` (:class:`~approvals.models.PageOnCall` work).

Each row is one event for one service: ``trigger`` when an escalation step pages, ``resolve``
when the approval settles (approved, denied, expired, cancelled). The approval id is the key of
the incident on both sides (PagerDuty's ``dedup_key``, Opsgenie's ``alias``), so a trigger sent
twice (the relay is at least once) opens one incident, and the resolve finds it.

What a page says names the tool, the agent, the role that must decide and where the card is;
never the arguments, nor the agent's free-text summary (which may quote them): those stay in
Slack, behind the reviewer channel's membership.

Trigger and resolve are separate rows, run by any relay in any order, so the trigger handler
re-reads the approval on both sides of its call:

- settled before the trigger is sent: nothing is sent (or a resolve, when an earlier try of this
  row may have triggered already);
- settled while it was being sent: it resolves right after, so a resolve that overtook the
  trigger (and found nothing to resolve) does not leave the incident open.

Settlement queues a resolve for every service the ladder may page (see
:func:`approvals.service._settlement_outbox`); its handler sends it only when a trigger was
queued for that service, so an approval decided before its ladder paged costs no call.

PagerDuty processes the events of one ``dedup_key`` in order. Opsgenie does not promise that: it
answers a create and a close with 202 and processes them later, so a close sent while its create
is still being processed (settled as it was paged, by either path above) finds no alert, and the
alert, created next, stays open. So Opsgenie's settings declare a repeated resolve
(:attr:`approvals.policy.schema.OpsgenieService.resolve_again_after`), and settlement queues a
second close (``again``) due that long after: an outbox row like any other (durable, retried,
sent once across replicas), harmless when the alert is closed already.

Failures become :class:`~approvals.errors.DeliveryFailed` for the relay's durable backoff: a
429, a 408 or a 5xx with the far side's ``Retry-After`` (seconds or an HTTP date), a connection
error or a timeout as is; any other 4xx (a refused key, an invalid event) is ``permanent``: only a
person can fix it, so it is retried slowly until its budget is spent, then dead-lettered
(``countersign redrive`` sends it again). Keys come from the environment variables the policy
names; no error message carries one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, assert_never
from urllib.parse import quote

import aiohttp

from approvals import errors, models, policy
from approvals.clock import Clock, utcnow
from approvals.policy import schema
from approvals.repository import Repository

__all__ = ["OPSGENIE_PRIORITY", "Pager", "Permalink"]

log = logging.getLogger(__name__)

Permalink = Callable[[str, str], Awaitable[str | None]]
"""The permalink of the message at (channel, ts), or None (the Slack edge provides it)."""

SOURCE = "Countersign"
# PagerDuty's severities as Opsgenie's priorities (P4 is left for what is not ours to page)
OPSGENIE_PRIORITY: Mapping[models.Severity, str] = {
    "critical": "P1",
    "error": "P2",
    "warning": "P3",
    "info": "P5",
}
# the far sides' limits: PagerDuty's summary, Opsgenie's message and description
_PD_SUMMARY = 1024
_OG_MESSAGE = 130
_OG_DESCRIPTION = 15000
_DETAIL = 300  # characters of the far side's error kept in the row's last_error
_BODY_READ = 8192  # bytes of an answer read (an error's text, never a stream)
_PERMALINK_TIMEOUT = 3.0  # the link is a nicety: a page never waits long for it
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")
_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{2,}$")
_SAFE_URL = re.compile(r"^https://[^\s<>|\"']+$")


def _plain(text: str, limit: int) -> str:
    """``text`` on one line (control characters become a space), at most ``limit`` chars."""
    flat = _CONTROL.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds from ``Retry-After``: delta-seconds or an HTTP date (RFC 9110); None when
    absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def _detail(body: bytes, secret: str) -> str:
    """What the far side said went wrong, short, with the key blanked should it echo it:
    PagerDuty's ``message`` and ``errors`` list, Opsgenie's ``message`` and ``errors`` map."""
    text = body.decode("utf-8", "replace")
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        parts = [str(parsed.get("message") or parsed.get("status") or "")]
        found = parsed.get("errors")
        if isinstance(found, list):
            parts += [str(e) for e in found]
        elif isinstance(found, dict):
            parts += [f"{k}: {v}" for k, v in found.items()]
        text = "; ".join(p for p in parts if p)
    if secret:
        text = text.replace(secret, "***")
    return _plain(text, _DETAIL) or "no detail"


def _roles(approval: models.Approval) -> str:
    return " or ".join(approval.required.roles)


def _needs(approval: models.Approval) -> str:
    count = approval.required.approvals
    who = f"role {_roles(approval)}"
    return who if count == 1 else f"{count} approvals from {who}"


class Pager:
    """The handler of ``page`` outbox rows (both services)."""

    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        store: Repository,
        policy: Callable[[], policy.Policy],
        secret: Callable[[str], str | None],
        pagerduty_url: str,
        opsgenie_url: str,
        permalink: Permalink | None = None,
        timeout: float = 10.0,
        clock: Clock = utcnow,
    ) -> None:
        self._session = session
        self._store = store
        self._policy = policy  # in force now: the service's settings are read when sending
        self._secret = secret  # a variable's value by its name
        self._pagerduty_url = pagerduty_url.rstrip("/")
        self._opsgenie_url = opsgenie_url.rstrip("/")
        self._permalink = permalink
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._clock = clock

    async def __call__(self, item: models.OutboxItem) -> None:
        page = item.work_as(models.PageOnCall)
        approval = await self._approval(item)
        context = {"action": "page", "approval_id": approval.approval_id, "service": page.service}
        match page.event:
            case "resolve":
                if page.service not in approval.paged:
                    log.info("nothing was paged: no resolve sent", extra=context)
                    return
                await self._resolve(page.service, approval)
                done = "closed again" if page.again else "page resolved"
                log.info(done, extra={**context, "status": approval.status.value})
            case "trigger":
                await self._page(item, page, approval, context)
            case unreachable:
                assert_never(unreachable)

    async def _page(
        self,
        item: models.OutboxItem,
        page: models.PageOnCall,
        approval: models.Approval,
        context: dict[str, str],
    ) -> None:
        """Trigger, unless settled before; resolve right after if it settled meanwhile."""
        name = page.service
        if approval.settled:
            # decided before on-call was paged: no page; but an earlier try of this very row
            # may have reached the service (its answer lost), so that incident is resolved
            if item.maybe_delivered_before:
                await self._resolve(name, approval)
            log.info("settled before the page: not triggered", extra=context)
            return
        await self._trigger(name, approval, page.severity or "warning", page.step)
        log.info("on-call paged", extra=context)
        after = await self._approval(item)
        if after.settled:
            # settled while the trigger was on its way: its resolve may have gone first
            await self._resolve(name, after)
            log.info("settled as it was paged: resolved", extra=context)

    async def _approval(self, item: models.OutboxItem) -> models.Approval:
        approval = await self._store.get_approval(item.approval_id)
        assert approval is not None, "outbox rows reference approvals by foreign key"
        return approval

    # -- what is sent -----------------------------------------------------------------------

    async def _trigger(
        self,
        name: models.PageService,
        approval: models.Approval,
        severity: models.Severity,
        step: int | None,
    ) -> None:
        link = await self._card_link(approval)
        if name == "pagerduty":
            key = self._key("pagerduty")
            await self._post(
                name,
                f"{self._pagerduty_url}/v2/enqueue",
                key,
                {},
                _pd_trigger(key, approval, severity, link, step, self._clock()),
            )
            return
        opsgenie = self._opsgenie()
        key = self._key("opsgenie")
        body = _og_create(approval, severity, link, step, opsgenie.responders)
        await self._post(name, f"{self._opsgenie_url}/v2/alerts", key, _genie(key), body)

    async def _resolve(self, name: models.PageService, approval: models.Approval) -> None:
        key = self._key(name)
        if name == "pagerduty":
            body: dict[str, Any] = {
                "routing_key": key,
                "event_action": "resolve",
                "dedup_key": approval.approval_id,
            }
            await self._post(name, f"{self._pagerduty_url}/v2/enqueue", key, {}, body)
            return
        alias = quote(approval.approval_id, safe="")
        url = f"{self._opsgenie_url}/v2/alerts/{alias}/close?identifierType=alias"
        note = f"The approval was {approval.status.value}" + _by(approval)
        body = {"source": SOURCE, "user": SOURCE, "note": _plain(note, 500)}
        # an alert already closed or never created: there is nothing left to close
        await self._post(name, url, key, _genie(key), body, done=(404,))

    # -- configuration ------------------------------------------------------------------------

    def _opsgenie(self) -> schema.OpsgenieService:
        oncall = self._policy().oncall
        if oncall is None or oncall.opsgenie is None:
            raise _unconfigured("opsgenie")
        return oncall.opsgenie

    def _key(self, name: models.PageService) -> str:
        """The service's key, from the variable the policy in force names."""
        oncall = self._policy().oncall
        configured = None if oncall is None else getattr(oncall, name)
        if configured is None:
            raise _unconfigured(name)
        variable = configured.routing_key_env if name == "pagerduty" else configured.api_key_env
        key = self._secret(variable)
        if not key:
            raise errors.DeliveryFailed(
                f"{name}: {variable} is not set: set it and restart, then redrive", permanent=True
            )
        return key

    async def _card_link(self, approval: models.Approval) -> str | None:
        """The card's permalink, else Slack's redirect to its channel, else None (not posted
        yet: the page goes out anyway, naming the approval id)."""
        card = approval.card
        if card is None:
            return None
        if self._permalink is not None:
            try:
                async with asyncio.timeout(_PERMALINK_TIMEOUT):
                    link = await self._permalink(card.channel, card.ts)
            except Exception as exc:  # a nicety: any failure falls back to the channel link
                log.warning(
                    "card permalink not fetched: linking its channel",
                    extra={"action": "page", "approval_id": approval.approval_id,
                           "error": repr(exc)},
                )  # fmt: skip
                link = None
            if link is not None and _SAFE_URL.fullmatch(link):
                return link
        if _CHANNEL_ID.fullmatch(card.channel):
            return f"https://slack.com/app_redirect?channel={card.channel}"
        return None

    # -- the call -----------------------------------------------------------------------------

    async def _post(
        self,
        name: models.PageService,
        url: str,
        key: str,
        headers: Mapping[str, str],
        body: Mapping[str, Any],
        *,
        done: tuple[int, ...] = (),
    ) -> None:
        """POST ``body``; return on 2xx (or a status in ``done``), else raise DeliveryFailed."""
        all_headers = {"Content-Type": "application/json", "User-Agent": "countersign/0.1"}
        all_headers.update(headers)
        try:
            async with self._session.post(
                url,
                data=json.dumps(body).encode(),
                headers=all_headers,
                timeout=self._timeout,
                allow_redirects=False,
            ) as response:
                status = response.status
                retry_after = _retry_after(response.headers.get("Retry-After"), self._clock())
                answer = await response.content.read(_BODY_READ)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise errors.DeliveryFailed(f"{name} unreachable: {type(exc).__name__}") from exc
        if 200 <= status < 300 or status in done:
            return
        message = f"{name}: HTTP {status}: {_detail(answer, key)}"
        if status in (408, 429) or status >= 500:
            raise errors.DeliveryFailed(message, retry_after=retry_after)
        # a refused key, an unknown integration, an event it calls invalid: a person must act
        log.error("%s refused the page: %s", name, message, extra={"action": "page"})
        raise errors.DeliveryFailed(message, permanent=True)


def _unconfigured(name: models.PageService) -> errors.DeliveryFailed:
    return errors.DeliveryFailed(
        f"oncall.{name} is not in the policy in force: restore it, then redrive", permanent=True
    )


def _genie(key: str) -> dict[str, str]:
    return {"Authorization": f"GenieKey {key}"}


def _by(approval: models.Approval) -> str:
    """Who settled it: the approvers or the denier (an expiry or a cancellation keeps the votes
    counted before it, but those people did not settle it)."""
    if approval.status not in (models.Status.APPROVED, models.Status.DENIED):
        return ""
    names = [d.name or d.slack_user_id for d in approval.decided_by]
    return f" by {', '.join(names)}" if names else ""


def _summary(approval: models.Approval, limit: int) -> str:
    """One line naming the tool, the agent and who must decide; never the arguments."""
    tool = _plain(approval.tool.name, 200)
    text = (
        f"Approval waiting: {tool} for agent {approval.agent} needs {_needs(approval)}; "
        f"nobody decided in time ({approval.approval_id})"
    )
    return _plain(text, limit)


def _details(approval: models.Approval, link: str | None, step: int | None) -> dict[str, str]:
    """The facts a responder needs, as strings (Opsgenie's details take only strings)."""
    requester = approval.requester.name or approval.requester.email or "unknown"
    details = {
        "approval_id": approval.approval_id,
        "agent": approval.agent,
        "tool": _plain(approval.tool.name, 200),
        "required_role": _roles(approval),
        "approvals_needed": str(approval.required.approvals),
        "requested_by": _plain(requester, 200),
        "created_at": approval.created_at.isoformat(),
        "expires_at": approval.expires_at.isoformat(),
        "rule": _plain(approval.rule, 300),
        "card": link or "not posted yet",
    }
    if step is not None:
        details["escalation_step"] = str(step)
    return details


def _pd_trigger(
    key: str,
    approval: models.Approval,
    severity: models.Severity,
    link: str | None,
    step: int | None,
    now: datetime,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "routing_key": key,
        "event_action": "trigger",
        "dedup_key": approval.approval_id,
        "payload": {
            "summary": _summary(approval, _PD_SUMMARY),
            "source": f"countersign/{approval.agent}",
            "severity": severity,
            "timestamp": now.astimezone(UTC).isoformat(),
            "component": _plain(approval.tool.name, 200),
            "group": approval.agent,
            "class": "approval",
            "custom_details": _details(approval, link, step),
        },
        "client": SOURCE,
    }
    if link is not None:
        body["client_url"] = link
        body["links"] = [{"href": link, "text": "Open the card in Slack to decide"}]
    return body


def _og_create(
    approval: models.Approval,
    severity: models.Severity,
    link: str | None,
    step: int | None,
    responders: tuple[schema.OpsgenieResponder, ...],
) -> dict[str, Any]:
    tool = _plain(approval.tool.name, 80)
    description = _summary(approval, _OG_DESCRIPTION) + (
        f"\nOpen the card in Slack to decide: {link}" if link else "\nIts card is not posted yet."
    )
    body: dict[str, Any] = {
        "message": _plain(f"Approval waiting: {tool} ({approval.agent})", _OG_MESSAGE),
        "alias": approval.approval_id,
        "description": description,
        "details": _details(approval, link, step),
        "entity": approval.agent,
        "source": SOURCE,
        "priority": OPSGENIE_PRIORITY[severity],
        "tags": ["countersign"],
    }
    if responders:
        body["responders"] = [r.wire() for r in responders]
    return body
