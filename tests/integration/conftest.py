from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from approvals.repository import Repository
from tests.support.harness import TEST_WORKERS, Harness


@pytest.fixture
async def harness(database_url: str) -> AsyncIterator[Harness]:
    h = await Harness(database_url=database_url).start()
    yield h
    await h.stop()


@pytest.fixture
async def live(database_url: str, tmp_path: Path) -> AsyncIterator[Harness]:
    """A harness whose policy is a YAML file, reloaded when it changes (or on SIGHUP)."""
    h = Harness(
        database_url=database_url,
        policy_file=tmp_path / "countersign.yml",
        workers=dataclasses.replace(TEST_WORKERS, reload_interval=0.05),
    )
    await h.start()
    yield h
    await h.stop()


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Repository]:
    """The repository over a fresh database of its own."""
    repository = await Repository.connect(database_url)
    yield repository
    await repository.close()
