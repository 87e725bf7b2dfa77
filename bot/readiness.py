"""``GET /readyz``: whether this process can do its work now, and if not, what is missing.

Three checks, run together, none waited for longer than ``CHECK_TIMEOUT`` (a probe never hangs):

- ``database``: PostgreSQL answers, and its schema is at the latest migration this code has;
- ``slack``: Slack accepts the bot token (``auth.test``, asked again at most once a minute,
  see :class:`bot.slack_setup.SlackAuth`);
- ``relay``: the outbox relay's task runs and its loop turned lately.

200 ``{"ready": true, "checks": {...}}`` when all hold, else 503 with the same shape, each check
failing with a ``problem`` that says what is wrong. ``/healthz`` stays liveness only: a process
whose database is away is alive (restarting it would not help) but not ready. Each scrape of
``/metrics`` runs the checks too, as the gauge ``countersign_ready{check}``, for alerting.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from approvals import metrics, outbox, pg_db, sql_loader
from approvals.repository import Repository
from bot import slack_setup

__all__ = ["CHECK_TIMEOUT", "DATABASE_FAILURES", "Readiness"]

log = logging.getLogger(__name__)

CHECK_TIMEOUT = 2.0  # seconds; probes usually time out after 1 to 10
#: what a database that is away or broken raises (a timeout included)
DATABASE_FAILURES: tuple[type[Exception], ...] = (
    TimeoutError,
    OSError,
    *pg_db.DATABASE_UNAVAILABLE,
)


@dataclass
class Readiness:
    """The checks of one process; the application's lifecycle hands it the relay's task."""

    store: Repository
    relay: outbox.Relay
    slack: slack_setup.SlackAuth
    relay_task: asyncio.Task[None] | None = field(default=None, init=False)

    async def problems(self) -> dict[str, str | None]:
        """Each check's problem (None: it holds), also published as ``countersign_ready``."""
        answers = await asyncio.gather(
            self._database(), self._slack(), self._relay(), return_exceptions=True
        )
        problems = {
            name: _unexpected(name, answer) if isinstance(answer, BaseException) else answer
            for name, answer in zip(("database", "slack", "relay"), answers, strict=True)
        }
        for name, problem in problems.items():
            metrics.READY.labels(name).set(1 if problem is None else 0)
        return problems

    async def handle(self, request: web.Request) -> web.Response:
        problems = await self.problems()
        checks: dict[str, Any] = {
            name: {"ok": True} if problem is None else {"ok": False, "problem": problem}
            for name, problem in problems.items()
        }
        ready = all(problem is None for problem in problems.values())
        return web.json_response({"ready": ready, "checks": checks}, status=200 if ready else 503)

    async def _database(self) -> str | None:
        latest = max(version for version, _, _ in sql_loader.migrations())
        try:
            async with asyncio.timeout(CHECK_TIMEOUT):
                version = await self.store.schema_version()
        except DATABASE_FAILURES as exc:
            return f"DATABASE_URL: cannot reach the database: {_reason(exc)}"
        # newer is fine: during a rolling deploy the new replicas migrate first (migrations stay
        # compatible with the code before them), and the old ones must stay in service
        if version is None or version < latest:
            return (
                f"the database schema is at migration {version}, this code needs {latest}: "
                "run countersign migrate"
            )
        return None

    async def _slack(self) -> str | None:
        try:
            async with asyncio.timeout(CHECK_TIMEOUT):
                return await self.slack.problem()
        except TimeoutError:  # waiting behind another probe's auth.test
            return "SLACK_API_URL: auth.test is taking longer than the probe may wait"

    async def _relay(self) -> str | None:
        task = self.relay_task
        if task is None:
            return "the outbox relay is not running in this process"
        if task.done():
            crash = None if task.cancelled() else task.exception()
            return f"the outbox relay stopped: {_reason(crash) if crash else 'cancelled'}"
        return self.relay.stalled(time.monotonic())


def _unexpected(check: str, exc: BaseException) -> str:
    """A check that failed in a way it does not expect: not ready, logged, never a 500."""
    log.error("readiness check failed", exc_info=exc, extra={"action": "readyz", "check": check})
    return f"the {check} check failed: {_reason(exc)}"


def _reason(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
