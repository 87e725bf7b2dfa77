"""Assembles the one aiohttp ``web.Application``: agent webhook, Slack events, metrics, health,
and the background workers (outbox relay, expiry sweep) tied to its lifecycle."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from slack_bolt.async_app import AsyncApp
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from approvals import models, outbox, policy, turn_service
from approvals.service import ApprovalService, Clock, utcnow
from approvals.store import Store
from bot import callbacks, openapi, slack_app, slack_cards, webhook
from bot.config import Config
from bot.live_config import LiveConfig
from bot.slack_directory import SlackDirectory

__all__ = ["BOLT", "LIVE", "Workers", "build_app"]

log = logging.getLogger(__name__)

BOLT = web.AppKey("bolt", AsyncApp)
LIVE = web.AppKey("live", LiveConfig)


@dataclass(frozen=True)
class Workers:
    """Knobs of the background work; tests shorten them."""

    run: bool = True
    poll_interval: float = 1.0
    expiry_interval: float = 1.0
    lookup_ttl: float = 60.0
    reload_interval: float = 2.0


def slack_client(token: str, base_url: str, session: aiohttp.ClientSession) -> AsyncWebClient:
    """A Web API client whose 429s/5xx are retried by slack_sdk's own handlers."""
    if not base_url.endswith("/"):
        base_url += "/"
    return AsyncWebClient(
        token=token,
        base_url=base_url,
        session=session,
        timeout=10,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=1),
            AsyncRateLimitErrorRetryHandler(max_retry_count=2),
            AsyncServerErrorRetryHandler(max_retry_count=1),
        ],
    )


async def _clock_loop(service: ApprovalService, interval: float) -> None:
    """Reminders, escalations and expiry: all state in PostgreSQL, so a restart loses nothing
    and a missed tick only fires late."""
    while True:
        try:
            # expiry first: a reminder for a request already past expires_at is noise
            while await service.expire_due() > 0:
                pass
            while await service.fire_timers() > 0:
                pass
        except Exception:
            log.exception("timer sweep failed", extra={"action": "timers"})
        await asyncio.sleep(interval)


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def build_app(
    config: Config,
    store: Store,
    *,
    clock: Clock = utcnow,
    workers: Workers = Workers(),
    reload_env: Mapping[str, str] | None = None,
) -> web.Application:
    """The application; the caller owns ``store`` (closes it after the app stops).

    With ``reload_env`` (the environment the config was loaded from) the policy file is
    watched and reloaded on change; ``app[LIVE].reload()`` does it at once (SIGHUP)."""
    settings = config.settings
    live = LiveConfig(config, reload_env)
    current_policy: Callable[[], policy.Policy] = live.policy
    service = ApprovalService(store=store, policy=current_policy, clock=clock)
    web_app = web.Application(middlewares=[webhook.error_middleware])
    session = aiohttp.ClientSession()
    client = slack_client(
        settings.slack_bot_token.get_secret_value(), settings.slack_api_url, session
    )
    directory = SlackDirectory(client, ttl=workers.lookup_ttl)
    cards = slack_cards.CardPublisher(
        client=client, store=store, policy=current_policy, members=directory.members
    )
    sender = callbacks.CallbackSender(
        session=session,
        secrets=live.secrets,
        policy=current_policy,
    )
    relay = outbox.Relay(
        store=store,
        handlers={
            models.OutboxKind.POST_CARD: cards.post_card,
            models.OutboxKind.UPDATE_CARD: cards.update_card,
            models.OutboxKind.CALLBACK: sender,
            models.OutboxKind.REMIND: cards.remind,
            models.OutboxKind.ESCALATE: cards.escalate,
        },
        budget=timedelta(seconds=settings.delivery_budget),
        clock=clock,
        poll_interval=workers.poll_interval,
    )
    turns = turn_service.TurnService(
        approvals=service, store=store, policy=current_policy, clock=clock
    )
    webhook.add_routes(web_app, service, turns, directory, live.agents)
    openapi.add_routes(web_app)
    bolt = slack_app.build_slack_app(
        client=client,
        signing_secret=settings.slack_signing_secret.get_secret_value(),
        service=service,
        directory=directory,
        presets=lambda: current_policy().deny_reasons,
    )
    slack_app.mount(web_app, bolt, settings.slack_signing_secret.get_secret_value())
    web_app.router.add_get("/healthz", _health)
    web_app.router.add_get("/metrics", _metrics)
    web_app[BOLT] = bolt
    web_app[LIVE] = live

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        tasks = []
        if workers.run:
            tasks = [
                asyncio.create_task(relay.run(), name="outbox-relay"),
                asyncio.create_task(_clock_loop(service, workers.expiry_interval), name="timers"),
            ]
            if reload_env is not None:
                tasks.append(
                    asyncio.create_task(live.watch(workers.reload_interval), name="reload")
                )
        yield
        for task in tasks:
            task.cancel()
        if tasks:
            # bounded: a worker that ignored its cancel must not hang the shutdown
            _, stuck = await asyncio.wait(tasks, timeout=10)
            for task in stuck:
                log.error("worker did not stop", extra={"action": "stop", "task": task.get_name()})
        await session.close()

    web_app.cleanup_ctx.append(lifecycle)
    return web_app
