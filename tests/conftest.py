"""Shared fixtures: hermetic environment, real PostgreSQL, one fresh database per test."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.support import postgres

PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


@pytest.fixture(autouse=True)
def _hermetic_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # slack_sdk and aiohttp honour proxies but slack_sdk ignores NO_PROXY: loopback only here.
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The admin DSN of the run's PostgreSQL server."""
    with postgres.server_dsn(os.environ.get("TEST_DATABASE_URL")) as dsn:
        yield dsn


@pytest.fixture(scope="session")
async def pg_template(pg_server: str) -> str:
    await postgres.create_template(pg_server)
    return pg_server


@pytest.fixture
async def database_url(pg_template: str) -> AsyncIterator[str]:
    dsn = await postgres.fresh_database(pg_template)
    yield dsn
    await postgres.drop_database(pg_template, dsn)
