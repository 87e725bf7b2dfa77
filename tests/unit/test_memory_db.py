"""The in-memory database fake: one handler per named query, transactions like PostgreSQL's."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from approvals import memory_db, sql_loader

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_every_named_query_has_a_handler_and_every_handler_a_query() -> None:
    assert set(sql_loader.queries()) == memory_db.QUERIES


async def test_a_query_without_a_handler_is_named_in_the_error() -> None:
    database = memory_db.MemoryDatabase()
    with pytest.raises(NotImplementedError, match="'no_such_query'"):
        await database.fetch("no_such_query")


async def fail_after(database: memory_db.MemoryDatabase, *statements: tuple[Any, ...]) -> None:
    """Run ``statements`` (query name and parameters) in one transaction, then raise."""
    async with database.transaction() as conn:
        for query, *args in statements:
            await conn.execute(query, *args)
        await conn.notify("channel", "rolled back")
        raise RuntimeError


async def test_a_transaction_rolls_back_on_an_exception_and_ids_are_not_given_twice() -> None:
    database = memory_db.MemoryDatabase()
    inserted: tuple[Any, ...] = ("insert_outbox", "apr_1", "post_card", {}, T0)
    with pytest.raises(RuntimeError):
        await fail_after(database, inserted, ("outbox_dead", 1, T0, "gone"))
    assert await database.fetchrow("outbox_counts") == {"backlog": 0, "dead": 0}
    await database.execute(*inserted)
    [row] = await database.fetch("claim_outbox", T0, T0, 10)
    assert row["id"] == 2  # like a sequence, the rolled-back insert spent its id


async def test_notifications_wait_for_the_commit_and_a_rollback_drops_them() -> None:
    database = memory_db.MemoryDatabase()
    heard: list[str] = []
    await database.listen("channel", heard.append)
    async with database.transaction() as conn:
        await conn.notify("channel", "committed")
        assert heard == []
    with pytest.raises(RuntimeError):
        await fail_after(database)
    await database.notify("other channel", "not ours")
    await database.notify("channel")
    assert heard == ["committed", ""]


async def test_json_columns_hold_copies_made_through_json() -> None:
    database = memory_db.MemoryDatabase()
    payload: dict[str, object] = {"steps": (1, 2)}
    await database.execute("insert_outbox", "apr_1", "post_card", payload, T0)
    payload["steps"] = (3,)
    [row] = await database.fetch("claim_outbox", T0, T0, 10)
    assert row["payload"] == {"steps": [1, 2]}
