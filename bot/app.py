"""Assembles the one aiohttp ``web.Application``: agent webhook, Slack events, metrics, health
and readiness, and the background workers (outbox relay, timers, audit sealer, policy reload,
clock sync) tied to its lifecycle."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

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

from approvals import metrics, models
from approvals.clock import Clock, DatabaseClock
from approvals.core import Core, Handlers
from approvals.repository import Repository
from bot import (
    agent_api,
    callback_sender,
    memory,
    oidc,
    openapi,
    pacing,
    paging,
    readiness,
    slack_app,
    slack_cards,
    slack_setup,
    step_up_page,
)
from bot.config import Config, Settings
from bot.live_config import LiveConfig
from bot.slack_directory import SlackDirectory

__all__ = ["BOLT", "LIVE", "READY", "Workers", "build_app", "slack_client"]

log = logging.getLogger(__name__)

BOLT = web.AppKey("bolt", AsyncApp)
LIVE = web.AppKey("live", LiveConfig)
READY = web.AppKey("ready", readiness.Readiness)


@dataclass(frozen=True)
class Workers:
    """Knobs of the background work; tests shorten them."""

    run: bool = True
    poll_interval: float = 1.0
    expiry_interval: float = 1.0
    lookup_ttl: float = 60.0
    reload_interval: float = 2.0
    clock_sync_interval: float = 60.0


def slack_client(
    token: str, base_url: str, session: aiohttp.ClientSession, *, paced: bool = False
) -> AsyncWebClient:
    """A Web API client whose 429s/5xx are retried by slack_sdk's own handlers. ``paced``:
    for the relay, whose pacer handles a 429 (pausing the channel) instead of sleeping it out
    here, which would hold one of the relay's slots."""
    if not base_url.endswith("/"):
        base_url += "/"
    rate_limit = [] if paced else [AsyncRateLimitErrorRetryHandler(max_retry_count=2)]
    return AsyncWebClient(
        token=token,
        base_url=base_url,
        session=session,
        timeout=10,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=1),
            *rate_limit,
            AsyncServerErrorRetryHandler(max_retry_count=1),
        ],
    )


@dataclass(frozen=True)
class _Slack:
    """The Slack side, built once: the relay posts through ``relay`` (paced), the listeners
    answer through ``client``."""

    client: AsyncWebClient
    relay: AsyncWebClient
    pacer: pacing.Pacer
    directory: SlackDirectory


def _pacer(settings: Settings) -> pacing.Pacer:
    rates = {
        pacing.Call.POST: pacing.Rate(
            settings.slack_posts_per_minute / 60, settings.slack_post_burst
        ),
        pacing.Call.UPDATE: pacing.Rate(
            settings.slack_updates_per_minute / 60, settings.slack_update_burst
        ),
    }
    return pacing.Pacer(rates, time.monotonic)


def _slack(settings: Settings, session: aiohttp.ClientSession, ttl: float) -> _Slack:
    token = settings.slack_bot_token.get_secret_value()
    client = slack_client(token, settings.slack_api_url, session)
    return _Slack(
        client=client,
        relay=slack_client(token, settings.slack_api_url, session, paced=True),
        pacer=_pacer(settings),
        directory=SlackDirectory(client, ttl=ttl),
    )


def _deliveries(
    slack: _Slack,
    store: Repository,
    live: LiveConfig,
    clock: Clock,
    sender: callback_sender.CallbackSender,
    pager: paging.Pager,
) -> Handlers:
    """Who does the I/O of each kind of outbox work the edges do (the core adds its own)."""
    cards = slack_cards.CardPublisher(
        client=slack.relay, store=store, policy=live.policy, pacer=slack.pacer, clock=clock
    )
    return {
        models.OutboxKind.POST_CARD: cards.post_card,
        models.OutboxKind.UPDATE_CARD: cards.update_card,
        models.OutboxKind.CALLBACK: sender,
        models.OutboxKind.REMIND: cards.remind,
        models.OutboxKind.ESCALATE: cards.escalate,
        models.OutboxKind.PAGE: pager,
        models.OutboxKind.LOG_LINE: cards.log_line,
    }


def _after_bursts() -> Callable[[int], None] | None:
    """What the relay does when it rests after work: hand freed memory back (glibc only)."""
    trim = memory.malloc_trim()
    return None if trim is None else memory.AfterBursts(trim)


def _pager(
    config: Config,
    reload_env: Mapping[str, str] | None,
    store: Repository,
    live: LiveConfig,
    session: aiohttp.ClientSession,
    slack: _Slack,
) -> paging.Pager:
    """The paging handler. Its keys are read by the variable the policy in force names: from
    the environment a reload reads (which checked that each is set), else as loaded at start."""
    env = dict(reload_env) if reload_env is not None else dict(config.page_secrets)

    async def permalink(channel: str, ts: str) -> str | None:
        found: Any = await slack.client.chat_getPermalink(channel=channel, message_ts=ts)
        link = found.get("permalink")
        return str(link) if link else None

    return paging.Pager(
        session=session,
        store=store,
        policy=live.policy,
        secret=lambda name: env.get(name) or None,
        pagerduty_url=config.settings.pagerduty_url,
        opsgenie_url=config.settings.opsgenie_url,
        permalink=permalink,
    )


def _mount_step_up(
    web_app: web.Application,
    core: Core,
    store: Repository,
    slack: _Slack,
    settings: Settings,
    session: aiohttp.ClientSession,
    clock: Clock,
) -> None:
    """The step-up page (``/step-up/``), when a sign-in provider is configured."""
    sign_in = settings.sign_in()
    if sign_in is None:
        return
    page = step_up_page.StepUpPage(
        approvals=core.approvals,
        store=store.passkeys,
        directory=slack.directory,
        sign_in=sign_in,
        provider=oidc.OidcClient(sign_in, session),
        clock=clock,
        tell=_direct_message(slack.client),
    )
    page.add_routes(web_app)


def _direct_message(client: AsyncWebClient) -> Callable[[str, str], Awaitable[None]]:
    """A message to a person in the app's direct messages with them; a failure is logged (the
    registration it tells of is in the audit either way)."""

    async def tell(user: str, text: str) -> None:
        try:
            await client.chat_postMessage(channel=user, text=text)
        except Exception as exc:
            log.warning(
                "direct message failed",
                extra={"action": "step_up", "user": user, "error": type(exc).__name__},
            )

    return tell


def _mount_slack(web_app: web.Application, core: Core, slack: _Slack, settings: Settings) -> None:
    """Bolt's listeners on ``/slack/events`` of this application (HTTP mode)."""
    signing_secret = settings.slack_signing_secret.get_secret_value()
    bolt = slack_app.build_slack_app(
        client=slack.client,
        signing_secret=signing_secret,
        service=core.approvals,
        directory=slack.directory,
        presets=lambda: core.policy().deny_reasons,
        public_url=settings.public_url,
    )
    slack_app.mount(web_app, bolt, signing_secret)
    web_app[BOLT] = bolt


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def _metrics(
    ready: readiness.Readiness, clock: Clock
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """``/metrics``: the gauges are read from the database first (bounded: a scrape never hangs
    on it); when it does not answer they keep their last values and say so. The readiness
    checks run too (``countersign_ready``)."""
    store = ready.store

    async def handle(request: web.Request) -> web.Response:
        await ready.problems()  # bounded, and never raises: each failure is a problem
        try:
            async with asyncio.timeout(readiness.CHECK_TIMEOUT):
                snapshot = await store.snapshot(clock())
        except readiness.DATABASE_FAILURES:
            log.warning("metrics: the database did not answer", extra={"action": "metrics"})
            metrics.DATABASE_UP.set(0)
        except Exception:  # the scrape still answers with what it has; the log says why
            log.exception("metrics: the gauges could not be read", extra={"action": "metrics"})
            metrics.DATABASE_UP.set(0)
        else:
            metrics.publish(snapshot)
            metrics.DATABASE_UP.set(1)
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    return handle


def _add_routes(
    web_app: web.Application,
    core: Core,
    slack: _Slack,
    live: LiveConfig,
    ready: readiness.Readiness,
    clock: Clock,
) -> None:
    agent_api.add_routes(web_app, core.approvals, core.turns, slack.directory, live.agents)
    openapi.add_routes(web_app)
    web_app.router.add_get("/healthz", _health)
    web_app.router.add_get("/readyz", ready.handle)
    web_app.router.add_get("/metrics", _metrics(ready, clock))


def _start_workers(
    core: Core,
    live: LiveConfig,
    workers: Workers,
    *,
    watch: bool,
    clock: Clock,
    seal_interval: float,
) -> list[asyncio.Task[None]]:
    """Every background loop of the process, started here and stopped by
    :func:`_stop_workers`: the core's (the relay, the timers, the audit sealer), then the
    policy reload and the clock's sync. The relay's task first."""
    tasks = [
        asyncio.create_task(core.relay.run(), name="outbox-relay"),
        asyncio.create_task(core.run_timers(workers.expiry_interval), name="timers"),
        asyncio.create_task(core.run_sealer(seal_interval), name="audit-seal"),
    ]
    if watch:
        tasks.append(asyncio.create_task(live.watch(workers.reload_interval), name="reload"))
    if isinstance(clock, DatabaseClock):
        sync = clock.keep_synced(workers.clock_sync_interval)
        tasks.append(asyncio.create_task(sync, name="clock"))
    return tasks


async def _stop_workers(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    if tasks:
        # bounded: a worker that ignored its cancel must not hang the shutdown
        _, stuck = await asyncio.wait(tasks, timeout=10)
        for task in stuck:
            log.error("worker did not stop", extra={"action": "stop", "task": task.get_name()})


def _lifecycle(
    core: Core,
    live: LiveConfig,
    session: aiohttp.ClientSession,
    workers: Workers,
    ready: readiness.Readiness,
    *,
    watch: bool,
    clock: Clock,
    seal: float,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """The workers run while the application serves (readiness watches the relay's task); the
    HTTP session closes after them. ``seal``: the audit sealer's interval."""

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        tasks = (
            _start_workers(core, live, workers, watch=watch, clock=clock, seal_interval=seal)
            if workers.run
            else []
        )
        if tasks:
            ready.relay_task = tasks[0]
        yield
        await _stop_workers(tasks)
        await session.close()

    return lifecycle


async def build_app(
    config: Config,
    store: Repository,
    *,
    clock: Clock | None = None,
    workers: Workers = Workers(),
    reload_env: Mapping[str, str] | None = None,
) -> web.Application:
    """The application; the caller owns ``store`` (closes it after the app stops).

    Time is the database's (:class:`~approvals.clock.DatabaseClock`, so that replicas agree on
    due times) unless ``clock`` is given (tests). With ``reload_env`` (the environment the
    config was loaded from) the policy file is watched and reloaded on change;
    ``app[LIVE].reload()`` does it at once (SIGHUP)."""
    if clock is None:
        clock = DatabaseClock(store)
        await clock.sync()
    settings = config.settings
    live = LiveConfig(config, reload_env)
    session = aiohttp.ClientSession()
    slack = _slack(settings, session, workers.lookup_ttl)
    sender = callback_sender.CallbackSender(
        session=session, secrets=live.secrets, policy=live.policy
    )
    pager = _pager(config, reload_env, store, live, session, slack)
    core = Core(
        store=store,
        policy=live.policy,
        handlers=_deliveries(slack, store, live, clock, sender, pager),
        members=slack.directory.members,
        clock=clock,
        delivery_budget=timedelta(seconds=settings.delivery_budget),
        delivery_max_delay=timedelta(seconds=settings.delivery_max_delay),
        relay_concurrency=settings.relay_concurrency,
        poll_interval=workers.poll_interval,
        on_rest=_after_bursts(),
    )
    ready = readiness.Readiness(
        store=store,
        relay=core.relay,
        slack=slack_setup.SlackAuth(slack.client, settings.slack_api_url),
    )
    web_app = web.Application(
        middlewares=[agent_api.error_middleware, agent_api.body_limit],
    )
    _add_routes(web_app, core, slack, live, ready, clock)
    _mount_step_up(web_app, core, store, slack, settings, session, clock)
    _mount_slack(web_app, core, slack, settings)
    web_app[LIVE] = live
    web_app[READY] = ready
    web_app.cleanup_ctx.append(
        _lifecycle(
            core,
            live,
            session,
            workers,
            ready,
            watch=reload_env is not None,
            clock=clock,
            seal=settings.audit_seal_interval,
        )
    )
    return web_app
