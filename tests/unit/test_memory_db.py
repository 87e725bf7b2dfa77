"""The in-memory database fake: one handler per named query, transactions like PostgreSQL's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from approvals import memory_db, sql_loader

T0 = datetime(2026, 1, 1, tzinfo=UTC)
UNKNOWN = "apr_unknown"  # an approval id no row has


def approval(approval_id: str = "apr_1", **changes: Any) -> tuple[Any, ...]:
    """The parameters of ``insert_approval``, in its order."""
    columns: dict[str, Any] = {
        "approval_id": approval_id,
        "agent": "sales-bot",
        "session_id": "s-1",
        "request_id": approval_id,
        "tool_name": "transfer_money",
        "call_id": "c1",
        "arguments": {"amount": 5},
        "arguments_sha256": "a" * 64,
        "requester": {"slack_user_id": "U0REQ"},
        "summary": "",
        "context": {"environment": "prod"},
        "callback_url": None,
        "framework": "generic",
        "required_role": "finance",
        "required_approvals": 1,
        "rule": "rules[0]",
        "created_at": T0,
        "expires_at": T0 + timedelta(hours=1),
        "policy_version": "pol_x",
        "fingerprint": "f" * 64,
        "outsiders": [],
        "rule_why": "",
        "deny_reason_required": False,
        "required_any_of": [],
        "arguments_jcs": None,
        "argument_schemas": [],
        "valid_for": 900,
        "report_within": 3600,
        "review_channel": None,
    }
    return tuple((columns | changes).values())


def attempt(approval_id: str = "apr_1", **changes: Any) -> tuple[Any, ...]:
    """The parameters of ``insert_attempt``, in its order."""
    columns: dict[str, Any] = {
        "approval_id": approval_id,
        "slack_user_id": "U0APP",
        "email": None,
        "name": None,
        "action": "approve",
        "outcome": "accepted",
        "detail": "",
        "at": T0,
    }
    return tuple((columns | changes).values())


def turn(request_id: str = "t1", **changes: Any) -> tuple[Any, ...]:
    """The parameters of ``insert_turn``, in its order."""
    columns: dict[str, Any] = {
        "agent": "sales-bot",
        "session_id": "s-1",
        "request_id": request_id,
        "channel": "whatsapp",
        "lead_id": "lead-1",
        "tool_name": "book_demo",
        "call_id": "c1",
        "inputs_sha256": "b" * 64,
        "policy_version": "pol_x",
        "verdict": "allow",
        "rule": "r",
        "reason_code": "allowed",
        "message": "",
        "evaluated": [],
        "approval_id": None,
        "at": T0,
        "lead_key": "lead-1",
    }
    return tuple((columns | changes).values())


def settlement(approval_id: str = "apr_1", status: str = "approved") -> tuple[Any, ...]:
    """The parameters of ``insert_settlement``, in its order."""
    return (approval_id, status, [{"slack_user_id": "U0APP"}], None, T0, "pol_x")


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
    await database.execute("insert_approval", *approval())
    inserted: tuple[Any, ...] = ("insert_outbox", "apr_1", "post_card", {}, T0)
    with pytest.raises(RuntimeError):
        await fail_after(database, inserted, ("outbox_dead", 1, 0, T0, "gone"))
    assert await database.fetchrow("outbox_counts") == {"backlog": 0, "dead": 0}
    await database.execute(*inserted)
    [row] = await database.fetch("claim_outbox", T0, T0, 10, [])
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
    await database.execute("insert_approval", *approval())
    payload: dict[str, object] = {"steps": (1, 2)}
    await database.execute("insert_outbox", "apr_1", "post_card", payload, T0)
    payload["steps"] = (3,)
    [row] = await database.fetch("claim_outbox", T0, T0, 10, [])
    assert row["payload"] == {"steps": [1, 2]}


async def with_one_approval() -> memory_db.MemoryDatabase:
    """A database holding approval ``apr_1``, a delivered callback row (id 1) and a turn."""
    database = memory_db.MemoryDatabase()
    await database.execute("insert_approval", *approval())
    await database.execute("insert_outbox", "apr_1", "callback", {"url": "u"}, T0)
    await database.execute("outbox_done", [1], [T0])
    await database.execute("insert_turn", *turn())
    return database


async def everything(database: memory_db.MemoryDatabase) -> list[Any]:
    """What the tables of :func:`with_one_approval` hold, as the queries read it."""
    return [
        await database.fetch("get_approvals", ["apr_1", "apr_2"]),
        await database.fetch("list_attempts", "apr_1"),
        await database.fetch("audit_since", T0 - timedelta(days=1)),
        await database.fetchrow("outbox_counts"),
        await database.fetch("fired_timers", "apr_1"),
        await database.fetch("turns_for_session", "sales-bot", "s-1"),
    ]


@pytest.mark.parametrize(
    ("statement", "constraint"),
    [
        (("insert_approval", *approval("apr_2", request_id="r2", arguments_sha256="A" * 64)),
         "approvals_arguments_sha256_check"),
        (("insert_approval", *approval("apr_2", expires_at=T0)), "approvals_check"),
        (("set_cards", ["apr_1"], ["C0REVIEWS"], [None]), "approvals_check1"),
        (("insert_approval", *approval("apr_2", required_approvals=0)),
         "approvals_required_approvals_check"),
        (("settle_if_pending", "apr_1", "maybe", [], []), "approvals_status_check"),
        # PostgreSQL tests the checks before ON CONFLICT looks for the key: a resent row fails
        (("insert_approval", *approval("apr_2", request_id="apr_1", arguments_sha256="x")),
         "approvals_arguments_sha256_check"),
        (("insert_approval", *approval("apr_1", request_id="r2")), "approvals_pkey"),
        (("insert_settlement", *settlement(status="pending")), "settlements_status_check"),
        (("insert_settlement", *settlement(UNKNOWN)), "settlements_approval_id_fkey"),
        (("insert_attempt", *attempt(action="click")), "attempts_action_check"),
        (("insert_attempt", *attempt(outcome="lucky")), "attempts_outcome_check"),
        (("insert_attempt", *attempt(UNKNOWN)), "attempts_approval_id_fkey"),
        (("insert_outbox", "apr_1", "email", {}, T0), "outbox_kind_check"),
        (("insert_outbox", UNKNOWN, "post_card", {}, T0), "outbox_approval_id_fkey"),
        (("insert_timer", "apr_1", "nudge", 0, T0), "timers_kind_check"),
        (("insert_timer", UNKNOWN, "remind", 0, T0), "timers_approval_id_fkey"),
        (("insert_turn", *turn("t2", verdict="escalate")), "turn_verdicts_check"),
        (("insert_turn", *turn("t2", inputs_sha256="b" * 63)), "turn_verdicts_inputs_sha256_check"),
        (("insert_turn", *turn("t1", verdict="maybe")), "turn_verdicts_verdict_check"),
        (("insert_turn", *turn("t2", verdict="escalate", approval_id=UNKNOWN)),
         "turn_verdicts_approval_id_fkey"),
    ],
)  # fmt: skip
async def test_a_statement_breaking_a_constraint_fails_by_its_name_and_changes_nothing(
    statement: tuple[Any, ...], constraint: str
) -> None:
    database = await with_one_approval()
    before = await everything(database)
    with pytest.raises(memory_db.ConstraintViolation) as caught:
        await database.execute(*statement)
    assert caught.value.constraint_name == constraint
    assert f'"{constraint}"' in str(caught.value)  # PostgreSQL's message names it so
    assert await everything(database) == before


async def test_a_second_settlement_is_a_unique_violation_not_an_overwrite() -> None:
    database = await with_one_approval()
    await database.execute("insert_settlement", *settlement(status="approved"))
    with pytest.raises(memory_db.ConstraintViolation, match='"settlements_pkey"'):
        await database.execute("insert_settlement", *settlement(status="denied"))
    [row] = await database.fetch("get_approvals", ["apr_1"])
    assert row["settled_status"] == "approved"


async def approval_with_attempts(
    database: memory_db.MemoryDatabase, *attempts: tuple[Any, ...]
) -> None:
    async with database.transaction() as conn:
        await conn.execute("insert_approval", *approval())
        await conn.executemany("insert_attempt", attempts)


async def test_a_violation_rolls_back_the_whole_transaction() -> None:
    database = memory_db.MemoryDatabase()
    with pytest.raises(memory_db.ConstraintViolation, match='"attempts_outcome_check"'):
        await approval_with_attempts(database, attempt(), attempt(outcome="lucky"))
    assert await database.fetch("get_approvals", ["apr_1"]) == []
    assert await database.fetch("list_attempts", "apr_1") == []


async def test_a_caught_violation_still_dooms_its_transaction() -> None:
    """As in PostgreSQL: later statements are refused and the end is a rollback, not a commit
    of what came before the failure."""
    database = memory_db.MemoryDatabase()
    heard: list[str] = []
    await database.listen("channel", heard.append)
    async with database.transaction() as conn:
        await conn.execute("insert_approval", *approval())
        await conn.notify("channel", "never delivered")
        with pytest.raises(memory_db.ConstraintViolation):
            await conn.execute("insert_settlement", *settlement(UNKNOWN))
        with pytest.raises(memory_db.TransactionAborted):
            await conn.fetch("get_approvals", ["apr_1"])
        with pytest.raises(memory_db.TransactionAborted):
            await conn.notify("channel", "refused")
    assert await database.fetch("get_approvals", ["apr_1"]) == []
    assert heard == []
    await database.execute("insert_approval", *approval())  # the database goes on as before
    assert len(await database.fetch("get_approvals", ["apr_1"])) == 1


async def test_rows_read_share_no_json_with_the_table() -> None:
    database = await with_one_approval()
    await database.execute("settle_if_pending", "apr_1", "approved", [{"slack_user_id": "U0A"}], [])
    await database.execute("insert_settlement", *settlement())
    await database.execute("insert_outbox", "apr_1", "update_card", {"blocks": [1]}, T0)
    before = await everything(database)
    [row] = await database.fetch("get_approvals", ["apr_1"])
    for column in ("requester", "arguments", "context"):
        row[column]["edited"] = True
    for column in ("decided_by", "votes", "outsiders"):
        row[column].append("edited")
    [item] = await database.fetch("claim_outbox", T0, T0, 10, [])
    item["payload"]["blocks"].append(2)
    await database.execute("outbox_release", item["id"], item["claim_no"])
    [again] = await database.fetch("claim_outbox", T0, T0, 10, [])
    assert again["payload"] == {"blocks": [1]}
    [*_, settled] = await database.fetch("audit_since", T0)
    settled["decided_by"][0]["slack_user_id"] = "U0EVIL"
    [turn_row] = await database.fetch("turns_for_session", "sales-bot", "s-1")
    turn_row["evaluated"].append("edited")
    assert await everything(database) == before


async def test_timestamps_come_back_in_utc_whatever_offset_they_were_written_with() -> None:
    database = memory_db.MemoryDatabase()
    t0 = T0.astimezone(timezone(timedelta(hours=2)))
    later = t0 + timedelta(hours=1)
    await database.execute("insert_approval", *approval(created_at=t0, expires_at=later))
    await database.execute("insert_attempt", *attempt(at=t0))
    await database.execute("insert_timer", "apr_1", "escalate", 0, t0)
    await database.execute("claim_due_timers", later, 10)
    [row] = await database.fetch("get_approvals", ["apr_1"])
    [clicked] = await database.fetch("list_attempts", "apr_1")
    [fired] = await database.fetch("fired_timers", "apr_1")
    stamps = [
        row["created_at"], row["expires_at"], row["escalated_at"], clicked["at"],
        fired["due_at"], fired["fired_at"],
    ]  # fmt: skip
    assert stamps == [T0, T0 + timedelta(hours=1), T0 + timedelta(hours=1), T0, T0, later]
    assert {stamp.tzinfo for stamp in stamps} == {UTC}
