"""One headless Chromium (Debian's, driven by Playwright) for a worker's browser tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest

from tests.browser import CHROMIUM, missing

if TYPE_CHECKING:
    from playwright.async_api import Browser


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    if (why := missing()) is not None:
        pytest.skip(why)
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield launched
        await launched.close()
