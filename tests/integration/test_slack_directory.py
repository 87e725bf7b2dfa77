"""The directory's look-up cache, through slack_sdk against the Slack stand-in: only answers
are cached, concurrent misses share one call, answers lapse after the TTL, and each directory
has its own cache."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.sandbox.standin import SlackStandIn, SlackUser
from bot.slack_directory import SlackDirectory

TOKEN = "xoxb-test-token"
ALMA = SlackUser(id="U0ALMA", name="alma", email="Alma@Example.com", real_name="Alma Approver")
GROUPS = frozenset({"S0FINANCE"})


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # slack_sdk reads HTTP(S)_PROXY and ignores NO_PROXY
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def standin() -> AsyncIterator[SlackStandIn]:
    server = SlackStandIn(token=TOKEN, users=[ALMA], usergroups={"S0FINANCE": [ALMA.id]})
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def directory(standin: SlackStandIn, ttl: float = 60.0) -> SlackDirectory:
    client = AsyncWebClient(token=TOKEN, base_url=standin.base_url, retry_handlers=[])
    return SlackDirectory(client, ttl=ttl)


def calls(standin: SlackStandIn) -> tuple[int, int]:
    return (
        len(standin.methods_called("users.info")),
        len(standin.methods_called("usergroups.users.list")),
    )


async def test_an_answer_is_reused_within_the_ttl(standin: SlackStandIn) -> None:
    looked_up = directory(standin)
    first = await looked_up.approver(ALMA.id, GROUPS)
    again = await looked_up.approver(ALMA.id, GROUPS)
    assert first == again
    assert first.email == "alma@example.com"
    assert first.usergroups == GROUPS
    assert calls(standin) == (1, 1)
    assert await looked_up.members("S0FINANCE") == {ALMA.id}  # the same cache as the clicks
    assert calls(standin) == (1, 1)


async def test_a_failed_lookup_is_not_cached(standin: SlackStandIn) -> None:
    looked_up = directory(standin)
    standin.fail("users.info")
    assert (await looked_up.approver(ALMA.id, GROUPS)).lookup_error is not None  # fail closed
    standin.fail("usergroups.users.list")
    assert (await looked_up.approver(ALMA.id, GROUPS)).groups_error is not None
    recovered = await looked_up.approver(ALMA.id, GROUPS)
    assert (recovered.lookup_error, recovered.groups_error) == (None, None)
    assert recovered.usergroups == GROUPS
    assert calls(standin) == (2, 2)  # each failed look-up was made again, the answer was not


async def test_concurrent_misses_share_one_call(standin: SlackStandIn) -> None:
    looked_up = directory(standin)
    standin.slow("users.info", 0.1)
    answers = await asyncio.gather(*(looked_up.approver(ALMA.id, GROUPS) for _ in range(5)))
    assert len(set(answers)) == 1
    assert calls(standin) == (1, 1)


async def test_an_answer_lapses_after_the_ttl(standin: SlackStandIn) -> None:
    looked_up = directory(standin, ttl=0.05)
    await looked_up.approver(ALMA.id, GROUPS)
    standin.set_usergroup("S0FINANCE", [])  # Alma left the group
    await asyncio.sleep(0.1)
    assert (await looked_up.approver(ALMA.id, GROUPS)).usergroups == frozenset()
    assert calls(standin) == (2, 2)


async def test_each_directory_has_its_own_cache(standin: SlackStandIn) -> None:
    await directory(standin).approver(ALMA.id, GROUPS)
    await directory(standin).approver(ALMA.id, GROUPS)
    assert calls(standin) == (2, 2)
