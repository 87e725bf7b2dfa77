from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.harness import Harness


@pytest.fixture
async def harness(database_url: str) -> AsyncIterator[Harness]:
    h = await Harness(database_url=database_url).start()
    yield h
    await h.stop()
