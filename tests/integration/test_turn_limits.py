"""Per-lead turn limits that can't be raced, resent or respelled (issue 8), over real HTTP
against real PostgreSQL.

- the count of a lead's allowed calls and the record of the new verdict are one atomic step,
  so concurrent turns can't all see "0 so far";
- a turn is idempotent on (agent, session_id, request_id): the identical body again is the
  stored verdict and spends nothing, other content under the same ids is a 409;
- a lead is counted by its normalised key, whatever the spelling of its e-mail or phone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.support.harness import CHANNEL, OPERATOR, Harness
from tests.support.harness import test_policy as harness_policy

ONE_A_DAY = "book_call"  # per_lead max 1
THREE_A_DAY = "book_demo"  # per_lead max 3


def limits_policy() -> dict[str, Any]:
    """The harness policy plus two tools with per-lead limits (no callbacks are used here)."""
    data = harness_policy(0).model_dump(mode="json", by_alias=True, exclude_none=True)
    tools = data["turns"]["tools"]
    tools[ONE_A_DAY] = {"per_lead": {"max": 1, "within": 86400}}
    tools[THREE_A_DAY] = {"per_lead": {"max": 3, "within": 86400}}
    return data


@pytest.fixture
async def harness(database_url: str, tmp_path: Path) -> AsyncIterator[Harness]:
    h = Harness(database_url=database_url, policy_file=tmp_path / "countersign.yml")
    h.write_policy(limits_policy())
    await h.start()
    yield h
    await h.stop()


def turn_body(n: int = 1, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "session_id": "wa-lena-1",
        "request_id": f"turn-{n}",
        "channel": "whatsapp",
        "lead": {"id": "lena@prospect.example", "name": "Lena"},
        "operator": {"slack_user_id": OPERATOR.id, "email": OPERATOR.email},
        "funnel": {"stage": "qualified"},
        "tool": {"name": ONE_A_DAY, "call_id": f"call-{n}", "arguments": {}},
    }
    body.update(overrides)
    return body


def tool(name: str, n: int, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "call_id": f"call-{n}", "arguments": arguments}


async def post(harness: Harness, body: dict[str, Any]) -> tuple[int, Any]:
    return await harness.call("POST", "/v1/turns", json_body=body)


async def answer(harness: Harness, body: dict[str, Any]) -> dict[str, Any]:
    status, got = await post(harness, body)
    assert status == 200, got
    assert isinstance(got, dict)
    return got


async def recorded(harness: Harness, session_id: str = "wa-lena-1") -> list[dict[str, Any]]:
    status, body = await harness.call("GET", f"/v1/turns?session_id={session_id}")
    assert status == 200, body
    turns: list[dict[str, Any]] = body["turns"]
    return turns


# -- 4. the count and the record are one atomic step -------------------------------------------


@pytest.mark.parametrize(
    ("tool_name", "limit", "concurrent"), [(ONE_A_DAY, 1, 10), (THREE_A_DAY, 3, 50)]
)
async def test_concurrent_turns_for_one_lead_allow_exactly_the_limit(
    harness: Harness, tool_name: str, limit: int, concurrent: int
) -> None:
    bodies = [turn_body(n, tool=tool(tool_name, n)) for n in range(concurrent)]
    answers = await asyncio.gather(*(answer(harness, b) for b in bodies))
    verdicts = [(a["verdict"], a["reason_code"]) for a in answers]
    assert verdicts.count(("allow", "allowed")) == limit
    assert verdicts.count(("refuse", "per_lead_limit")) == concurrent - limit
    assert len(await recorded(harness)) == concurrent  # every verdict is audited


async def test_a_lead_in_other_sessions_and_other_tools_has_its_own_count(harness: Harness) -> None:
    assert (await answer(harness, turn_body(1)))["verdict"] == "allow"
    # the same lead in another session of the same agent: the same quota
    other_session = turn_body(2, session_id="wa-lena-2")
    assert (await answer(harness, other_session))["reason_code"] == "per_lead_limit"
    # another tool, another lead: counted apart
    demo = turn_body(3, tool=tool(THREE_A_DAY, 3))
    assert (await answer(harness, demo))["verdict"] == "allow"
    someone_else = turn_body(4, lead={"id": "otto@prospect.example"})
    assert (await answer(harness, someone_else))["verdict"] == "allow"


# -- 5. a resent turn is the stored verdict and spends nothing -----------------------------------


async def test_an_identical_resend_returns_the_stored_verdict_and_spends_nothing(
    harness: Harness,
) -> None:
    body = turn_body(1)
    first, second, third = [await answer(harness, body) for _ in range(3)]
    assert first["verdict"] == "allow"
    assert second == first
    assert third == first
    assert [t["request_id"] for t in await recorded(harness)] == ["turn-1"]
    # the quota was spent once: the next *new* turn for the lead is the one refused
    refused = await answer(harness, turn_body(2))
    assert (refused["verdict"], refused["reason_code"]) == ("refuse", "per_lead_limit")


async def test_a_resent_refusal_stays_a_refusal(harness: Harness) -> None:
    await answer(harness, turn_body(1))
    refused = await answer(harness, turn_body(2))
    assert refused["reason_code"] == "per_lead_limit"
    assert await answer(harness, turn_body(2)) == refused


@pytest.mark.parametrize("tool_name", [ONE_A_DAY, "send_proposal"])  # with and without a count
async def test_concurrent_identical_resends_make_one_record(
    harness: Harness, tool_name: str
) -> None:
    body = turn_body(1, tool=tool(tool_name, 1))
    answers = await asyncio.gather(*(answer(harness, body) for _ in range(20)))
    assert answers[0]["verdict"] == "allow"
    assert all(a == answers[0] for a in answers)
    assert len(await recorded(harness)) == 1


@pytest.mark.parametrize(
    "change",
    [
        {"tool": tool(ONE_A_DAY, 1, slot="tomorrow")},  # other arguments
        {"tool": tool(THREE_A_DAY, 1)},  # other tool, same call id
        {"tool": tool(ONE_A_DAY, 99)},  # other call id
        {"lead": {"id": "otto@prospect.example", "name": "Lena"}},
        {"channel": "sms"},
        {"funnel": {"stage": "proposal"}},
        {"operator": None},
        {"summary": "a different summary"},
    ],
)
async def test_the_same_ids_with_other_content_are_a_conflict(
    harness: Harness, change: dict[str, Any]
) -> None:
    first = await answer(harness, turn_body(1))
    status, body = await post(harness, turn_body(1, **change))
    assert status == 409, body
    assert body["error"]["code"] == "conflict"
    assert [f["field"] for f in body["error"]["fields"]] == ["request_id"]
    # nothing written, and the stored verdict still answers the original body
    assert len(await recorded(harness)) == 1
    assert await answer(harness, turn_body(1)) == first


async def test_the_same_content_spelled_otherwise_is_a_replay(harness: Harness) -> None:
    """The fingerprint is of the validated body: key order, whitespace around ids and the case
    of an e-mail are not "other content"."""
    first = await answer(harness, turn_body(1))
    respelled = turn_body(1, request_id="  turn-1 ")
    respelled["operator"] = {"email": "OMAR@Example.com", "slack_user_id": OPERATOR.id}
    assert await answer(harness, dict(reversed(respelled.items()))) == first
    assert len(await recorded(harness)) == 1


async def test_racing_bodies_under_the_same_ids_bind_one(harness: Harness) -> None:
    a = turn_body(1)
    b = turn_body(1, tool=tool(ONE_A_DAY, 1, slot="tomorrow"))
    results = await asyncio.gather(*(post(harness, a if i % 2 else b) for i in range(20)))
    [stored] = await recorded(harness)
    statuses = [s for s, _ in results]
    assert 200 in statuses
    assert set(statuses) <= {200, 409}
    # every 200 is the one stored verdict; every 409 was the other body
    assert all(body["inputs_sha256"] == stored["inputs_sha256"] for s, body in results if s == 200)


async def test_a_resent_escalation_is_one_approval_and_one_record(harness: Harness) -> None:
    discount = turn_body(
        1, tool={"name": "grant_discount", "call_id": "d1", "arguments": {"discount_pct": 15}}
    )
    answers = await asyncio.gather(*(answer(harness, discount) for _ in range(5)))
    first = answers[0]
    assert first["verdict"] == "escalate"
    assert all(a == first for a in answers)
    [stored] = await recorded(harness)
    assert stored["approval_id"] == first["approval_id"]
    await harness.card_ts(first["approval_id"])
    await harness.settle_quietly()
    assert len(harness.standin.messages[CHANNEL]) == 1
    # resent later, the answer carries the approval's current status
    assert (await answer(harness, discount))["approval_status"] == "pending"


# -- 6. a lead is counted by its normalised key ------------------------------------------------


@pytest.mark.parametrize(
    "spellings",
    [
        ["lena@prospect.example", "Lena@Prospect.example", "LENA@PROSPECT.EXAMPLE"],
        ["+351 900 000 000", "+351900000000", "+351-900-000-000", "351 (900) 000.000"],
        ["\uff4c\uff45\uff4e\uff41@prospect.example", "lena@prospect.example"],  # full width
        ["+351\u00a0900\u00a0000\u00a0000", "+351900000000"],  # no-break spaces
    ],
)
async def test_one_lead_spelled_differently_shares_one_quota(
    harness: Harness, spellings: list[str]
) -> None:
    answers = [
        await answer(harness, turn_body(n, lead={"id": lead_id}))
        for n, lead_id in enumerate(spellings)
    ]
    assert [a["verdict"] for a in answers] == ["allow"] + ["refuse"] * (len(spellings) - 1)
    assert {a["reason_code"] for a in answers[1:]} == {"per_lead_limit"}
    # the audit keeps the id as the agent sent it
    assert [t["lead_id"] for t in await recorded(harness)] == spellings


async def test_opaque_lead_ids_are_counted_as_given(harness: Harness) -> None:
    assert (await answer(harness, turn_body(1, lead={"id": "crm-Lead-42"})))["verdict"] == "allow"
    # another CRM id that differs only in case is another record: opaque ids are kept as given
    assert (await answer(harness, turn_body(2, lead={"id": "crm-lead-42"})))["verdict"] == "allow"
    again = await answer(harness, turn_body(3, lead={"id": "crm-Lead-42"}))
    assert again["reason_code"] == "per_lead_limit"


async def test_the_stored_lead_key_is_the_normalised_one(harness: Harness) -> None:
    await answer(harness, turn_body(1, lead={"id": "Lena@Prospect.example"}))
    await answer(harness, turn_body(2, lead={"id": "+351 900-000-000"}))
    conn = await asyncpg.connect(harness.database_url)
    try:
        rows = await conn.fetch("SELECT lead_id, lead_key FROM turn_verdicts ORDER BY id")
    finally:
        await conn.close()
    assert [(r["lead_id"], r["lead_key"]) for r in rows] == [
        ("Lena@Prospect.example", "lena@prospect.example"),
        ("+351 900-000-000", "+351900000000"),
    ]
