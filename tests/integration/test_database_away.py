"""The database goes away under a running bot and comes back: the agent API answers 503 with
``Retry-After`` (never a 500, never a 2xx for what was not stored), clicks get an ephemeral
"try again", ``/readyz`` says why, and once PostgreSQL is back everything works again without a
restart, notifications included (the listening connection is reopened).

The database is cut with a loopback proxy in front of the real PostgreSQL (tests/support/
db_proxy.py); the fault suite (tests/faults) stops a real server under a real process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest

from approvals import pg_db
from bot import messages
from tests.support import waiting
from tests.support.db_proxy import DatabaseProxy
from tests.support.harness import AGENT_TOKEN, FINANCE, Harness

T = TypeVar("T")


@pytest.fixture
async def proxy(database_url: str) -> AsyncIterator[DatabaseProxy]:
    p = await DatabaseProxy(database_url).start()
    yield p
    await p.stop()


@pytest.fixture
async def away(proxy: DatabaseProxy) -> AsyncIterator[Harness]:
    """A bot whose every connection to PostgreSQL goes through ``proxy``."""
    h = await Harness(database_url=proxy.dsn).start()
    yield h
    proxy.up()
    await h.stop()


async def _ready(harness: Harness) -> tuple[int, dict[str, object]]:
    assert harness.session is not None
    async with harness.session.get(harness.base_url + "/readyz") as response:
        return response.status, await response.json()


async def test_the_agent_api_answers_503_with_retry_after_while_the_database_is_away(
    away: Harness, proxy: DatabaseProxy
) -> None:
    known = (await away.submit())["approval_id"]
    proxy.down()
    assert away.session is not None
    for method, path, body in (
        ("POST", "/v1/approvals", away.request_body(request_id="while-away")),
        ("GET", f"/v1/approvals/{known}", None),
        ("POST", f"/v1/approvals/{known}/cancel", {}),
    ):
        async with away.session.request(
            method,
            away.base_url + path,
            json=body,
            headers={"Authorization": f"Bearer {AGENT_TOKEN}"},
        ) as response:
            assert response.status == 503, (method, path, await response.text())
            assert response.headers["Retry-After"] == "2"
            error = (await response.json())["error"]
            assert error["code"] == "database_unavailable"
    status, ready = await _ready(away)
    assert status == 503
    assert ready["checks"]["database"]["ok"] is False  # type: ignore[index]

    proxy.up()
    # the same request, sent again as the 503 asked, is stored once
    retried = await _first(lambda: _submit_once(away, "while-away"))
    assert retried["status"] == "pending"
    status, again = await away.call(
        "POST", "/v1/approvals", json_body=away.request_body(request_id="while-away")
    )
    assert status == 200  # the same ids again: the stored approval, not a second one
    assert again["approval_id"] == retried["approval_id"]

    async def ready_again() -> bool:
        # a probe may still meet a pooled connection the outage broke: one more 503, then 200
        return (await _ready(away))[0] == 200

    await waiting.until(ready_again, timeout=5, what="/readyz ready again")


async def _first(attempt: Callable[[], Awaitable[T | None]], timeout: float = 10.0) -> T:
    """What ``attempt()`` gives once it gives something (it answers None while the database
    is still coming back)."""
    async with asyncio.timeout(timeout):
        while (result := await attempt()) is None:  # noqa: ASYNC110 - polling a server
            await asyncio.sleep(0.05)
        return result


async def _submit_once(harness: Harness, request_id: str) -> dict[str, object] | None:
    status, body = await harness.call(
        "POST", "/v1/approvals", json_body=harness.request_body(request_id=request_id)
    )
    if status == 503:
        return None
    assert status == 201, body
    assert isinstance(body, dict)
    return body


async def test_a_click_while_the_database_is_away_is_told_to_try_again_and_nothing_is_lost(
    away: Harness, proxy: DatabaseProxy
) -> None:
    approval_id = (await away.submit())["approval_id"]
    await away.card_ts(approval_id)
    approver = FINANCE[0]
    proxy.down()
    assert await away.click(approver, approval_id) == 200  # Slack gets its ack in time
    [note] = await away.wait_ephemeral(approver)
    assert note == messages.DATABASE_AWAY
    assert away.receiver.received == []

    proxy.up()

    async def clicked_again() -> bool:
        await away.click(approver, approval_id)
        return len(away.ephemerals_for(approver)) > 1 and (
            away.ephemerals_for(approver)[-1] != messages.DATABASE_AWAY
        )

    await waiting.until(clicked_again, timeout=10, what="a click after recovery")
    [delivered] = await away.receiver.wait_delivered(1)
    decision = json.loads(delivered.body)
    assert decision["status"] == "approved"
    assert decision["approval_id"] == approval_id


async def test_notifications_come_back_after_the_database_does(
    away: Harness, proxy: DatabaseProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """A long-poll is ended by the settlement's NOTIFY, not by its 2 s polling backstop: that
    needs the listening connection, which the outage cut, to have been reopened."""
    caplog.set_level(logging.INFO, logger="approvals.pg_db")
    proxy.down()
    await asyncio.sleep(0.2)  # the listener's loss is noticed, its reopening begins
    proxy.up()
    approval_id = await _first(lambda: _submit_id(away))
    await away.card_ts(approval_id)
    await waiting.until(
        lambda: any(r.getMessage() == "notification connection reopened" for r in caplog.records),
        timeout=15,
        what="the listening connection reopened",
    )

    async def long_poll() -> float:
        started = time.monotonic()
        status, body = await away.call("GET", f"/v1/approvals/{approval_id}?wait=10")
        assert status == 200, body
        assert body["status"] == "approved", body
        return time.monotonic() - started

    poll = asyncio.create_task(long_poll())
    await asyncio.sleep(0.3)  # the long-poll is waiting
    clicked = time.monotonic()
    assert await away.click(FINANCE[0], approval_id) == 200
    await poll
    # well inside the 2 s backstop: woken by the notification
    assert time.monotonic() - clicked < 1.5


async def _submit_id(harness: Harness) -> str | None:
    body = await _submit_once(harness, "after-outage")
    return None if body is None else str(body["approval_id"])


async def test_closing_is_bounded_when_a_borrowed_connection_never_comes_back(
    database_url: str,
) -> None:
    """asyncpg's own close waits forever for every borrowed connection (before 0.32 a connection
    the server dropped at the wrong moment was never handed back); a bot's shutdown must not."""
    db = await pg_db.PostgresDatabase.connect(database_url, min_size=1, max_size=2)
    borrowed = asyncio.Event()

    async def stuck_borrower() -> None:
        async with db.transaction():
            borrowed.set()
            await asyncio.Event().wait()  # never lets go

    borrower = asyncio.create_task(stuck_borrower())
    await asyncio.wait_for(borrowed.wait(), timeout=5)
    started = time.monotonic()
    await asyncio.wait_for(db.close(grace=0.5), timeout=10)
    assert 0.5 <= time.monotonic() - started < 5
    borrower.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await borrower
