"""The fault suite's fixtures: one PostgreSQL it may stop and start, a fresh database per
scenario, the bot as real processes, and the table of figures at the end of the run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults import table
from tests.faults.pg import StoppablePostgres, stoppable_postgres
from tests.faults.world import FaultHarness, TimedReceiver
from tests.support import postgres

MakeWorld = Callable[..., Awaitable[FaultHarness]]


@pytest.fixture(scope="session")
def fault_pg() -> Iterator[StoppablePostgres]:
    with stoppable_postgres() as server:
        yield server


@pytest.fixture(scope="session")
async def fault_template(fault_pg: StoppablePostgres) -> StoppablePostgres:
    await postgres.create_template(fault_pg.dsn)
    return fault_pg


@pytest.fixture
async def fault_db(fault_template: StoppablePostgres) -> AsyncIterator[str]:
    dsn = await postgres.fresh_database(fault_template.dsn)
    yield dsn
    if not fault_template.running():  # a scenario that stopped it and failed midway
        fault_template.start()
    await postgres.drop_database(fault_template.dsn, dsn)


@pytest.fixture
async def make_world(fault_db: str, tmp_path: Path) -> AsyncIterator[MakeWorld]:
    """Builds the scenario's world (stand-in, receiver, the first bot process); stops it after."""
    built: list[FaultHarness] = []

    async def make(**options: Any) -> FaultHarness:
        h = FaultHarness(
            database_url=fault_db,
            policy_file=tmp_path / "countersign.yml",
            receiver=TimedReceiver(),
            log_dir=tmp_path,
            **options,
        )
        built.append(h)
        await h.start()
        return h

    yield make
    for h in built:
        await h.stop()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not table.RESULTS:
        return
    text = table.markdown(table.RESULTS)
    terminalreporter.write_sep("=", "fault suite")
    terminalreporter.write_line(text)
    table.LAST_RUN.write_text(text, "utf-8")
