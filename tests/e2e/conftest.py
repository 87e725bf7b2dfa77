"""End-to-end with real agent frameworks: the bot on real parts (tests/support/harness.py),
scripted models (no LLM), loopback only."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.harness import AGENT_TOKEN, Harness

__all__ = ["AGENT_TOKEN"]


@pytest.fixture
async def harness(database_url: str) -> AsyncIterator[Harness]:
    h = await Harness(database_url=database_url).start()
    yield h
    await h.stop()
