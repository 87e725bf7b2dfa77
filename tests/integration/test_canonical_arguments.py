"""The arguments an agent gets back are byte for byte the RFC 8785 text that was hashed: in the
answer to POST, in GET, in the callback, in Claude Code's ``resume.updatedInput`` — through real
HTTP and a real PostgreSQL, whose ``jsonb`` would otherwise rewrite the numbers."""

from __future__ import annotations

import hashlib
import itertools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from approvals import hashing, models
from approvals.repository import Repository
from tests.support.harness import AGENT_TOKEN, APPROVER, OPERATOR, Harness

# the reproduced break: jsonb gave back an integer, 0.0 and a 301-digit integer
BROKEN = {"x": 1e16, "y": -0.0, "z": 1.5e300}
BROKEN_TEXT = b'{"x":10000000000000000,"y":0,"z":1.5e+300}'


def _members(text: str, start: int) -> dict[str, tuple[int, int]]:
    """The span of each member's value in the JSON object starting at ``start``."""
    decoder = json.JSONDecoder()

    def skip(at: int) -> int:
        while text[at] in " \t\r\n":
            at += 1
        return at

    spans: dict[str, tuple[int, int]] = {}
    assert text[start] == "{"
    at = skip(start + 1)
    while text[at] != "}":
        key, at = decoder.raw_decode(text, at)
        at = skip(at)
        assert text[at] == ":"
        value_at = skip(at + 1)
        _, end = decoder.raw_decode(text, value_at)
        spans[key] = (value_at, end)
        at = skip(end)
        at = skip(at + 1) if text[at] == "," else at
    return spans


def raw_member(body: bytes, *path: str) -> bytes:
    """The exact bytes of the value at ``path`` in a JSON answer, as sent (never re-encoded)."""
    text = body.decode("utf-8")
    start, end = 0, len(text)
    for key in path:
        start, end = _members(text, start)[key]
    return text[start:end].encode("utf-8")


async def post_raw(harness: Harness, path: str, body: bytes) -> tuple[int, bytes]:
    assert harness.session is not None
    headers = {"Authorization": f"Bearer {AGENT_TOKEN}", "Content-Type": "application/json"}
    async with harness.session.post(harness.base_url + path, data=body, headers=headers) as r:
        return r.status, await r.read()


async def get_raw(harness: Harness, approval_id: str) -> bytes:
    assert harness.session is not None
    headers = {"Authorization": f"Bearer {AGENT_TOKEN}"}
    async with harness.session.get(
        f"{harness.base_url}/v1/approvals/{approval_id}", headers=headers
    ) as response:
        assert response.status == 200
        assert response.content_type == "application/json"
        return await response.read()


def submission(harness: Harness, arguments: Any, **overrides: Any) -> bytes:
    tool = {"name": "deploy_api", "call_id": "call-1", "arguments": arguments}
    return json.dumps(harness.request_body(tool=tool, **overrides)).encode()


def assert_bound(answer: bytes, canonical: bytes) -> None:
    """tool.arguments are the canonical bytes, and they hash to the arguments_sha256 beside."""
    digest = json.loads(answer)["arguments_sha256"]
    assert raw_member(answer, "tool", "arguments") == canonical
    assert hashlib.sha256(canonical).hexdigest() == digest
    # what an agent in any language does: parse (numbers are doubles), canonicalise, hash
    reparsed = json.loads(raw_member(answer, "tool", "arguments"), parse_int=float)
    assert hashlib.sha256(rfc8785.dumps(reparsed)).hexdigest() == digest


async def test_the_reproduced_break_comes_back_as_hashed(harness: Harness) -> None:
    status, created = await post_raw(harness, "/v1/approvals", submission(harness, BROKEN))
    assert status == 201
    assert_bound(created, BROKEN_TEXT)
    fetched = await get_raw(harness, json.loads(created)["approval_id"])
    assert_bound(fetched, BROKEN_TEXT)


async def test_an_idempotent_retry_answers_the_stored_bytes(harness: Harness) -> None:
    first = submission(harness, BROKEN)
    await post_raw(harness, "/v1/approvals", first)
    status, again = await post_raw(harness, "/v1/approvals", first)
    assert status == 200
    assert_bound(again, BROKEN_TEXT)


async def test_one_json_number_written_two_ways_is_the_same_request(harness: Harness) -> None:
    """500 and 500.0 are one double, one canonical text, one hash: a retry, not a conflict."""
    status, first = await post_raw(harness, "/v1/approvals", submission(harness, {"n": 500}))
    assert status == 201
    status, again = await post_raw(harness, "/v1/approvals", submission(harness, {"n": 500.0}))
    assert status == 200
    assert json.loads(again)["approval_id"] == json.loads(first)["approval_id"]
    assert_bound(again, b'{"n":500}')


async def test_the_callback_embeds_the_hashed_bytes(harness: Harness) -> None:
    status, created = await post_raw(harness, "/v1/approvals", submission(harness, BROKEN))
    assert status == 201
    approval_id = json.loads(created)["approval_id"]
    await harness.click(APPROVER, approval_id)
    [received] = await harness.receiver.wait_delivered(1)
    assert json.loads(received.body)["status"] == "approved"
    assert_bound(received.body, BROKEN_TEXT)


async def test_claude_codes_updated_input_is_the_hashed_bytes(harness: Harness) -> None:
    status, created = await post_raw(
        harness, "/v1/approvals", submission(harness, BROKEN, framework="claude-code")
    )
    assert status == 201
    approval_id = json.loads(created)["approval_id"]
    await harness.click(APPROVER, approval_id)
    [received] = await harness.receiver.wait_delivered(1)
    fetched = await get_raw(harness, approval_id)
    for answer in (received.body, fetched):
        assert json.loads(answer)["resume"]["behavior"] == "allow"
        assert raw_member(answer, "resume", "updatedInput") == BROKEN_TEXT
        assert_bound(answer, BROKEN_TEXT)


async def test_a_row_from_before_migration_0007_is_still_served(harness: Harness) -> None:
    """No canonical text stored: the jsonb value is served (its numbers as jsonb left them),
    never a 500; for integers and strings that is still the text that was hashed."""
    plain: dict[str, Any] = {"amount": 500, "memo": "Zoë 🚀", "tags": ["a", None, True]}
    status, old = await post_raw(harness, "/v1/approvals", submission(harness, plain))
    assert status == 201
    status, odd = await post_raw(
        harness, "/v1/approvals", submission(harness, BROKEN, request_id="old-2")
    )
    assert status == 201
    conn = await asyncpg.connect(harness.database_url)
    try:
        await conn.execute("UPDATE approvals SET arguments_jcs = NULL")
    finally:
        await conn.close()
    fetched = await get_raw(harness, json.loads(old)["approval_id"])
    assert_bound(fetched, rfc8785.dumps(plain))
    odd_fetched = await get_raw(harness, json.loads(odd)["approval_id"])
    assert json.loads(raw_member(odd_fetched, "tool", "arguments")) == {
        "x": 10**16,
        "y": 0.0,
        "z": 15 * 10**299,
    }


# -- the property: arbitrary I-JSON values, stored in PostgreSQL and read back over HTTP -------

TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=6)
NUMBERS = (
    st.integers(-hashing.MAX_SAFE_INTEGER, hashing.MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([1e16, -0.0, 1.5e300, 1e21, 1e-7, 5e-324, 0.1, 2.0**53])
)
VALUES = st.recursive(
    st.none() | st.booleans() | NUMBERS | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=16,
)
request_ids = itertools.count()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(arguments=st.dictionaries(TEXT, VALUES, max_size=6), ascii_only=st.booleans())
async def test_any_i_json_arguments_come_back_as_the_bytes_hashed(
    harness: Harness, arguments: dict[str, Any], ascii_only: bool
) -> None:
    tool = {"name": "deploy_api", "call_id": "call-p", "arguments": arguments}
    body = harness.request_body(tool=tool, request_id=f"p-{next(request_ids)}")
    status, created = await post_raw(
        harness, "/v1/approvals", json.dumps(body, ensure_ascii=ascii_only).encode()
    )
    assert status == 201, created
    canonical = rfc8785.dumps(arguments)
    assert_bound(created, canonical)
    assert_bound(await get_raw(harness, json.loads(created)["approval_id"]), canonical)


# -- both stores keep the text ---------------------------------------------------------------


async def test_each_store_gives_back_the_text_and_values_of_the_hash(store: Repository) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    approval = models.Approval(
        approval_id="apr_" + "1" * 24,
        status=models.Status.PENDING,
        agent="sales-bot",
        request_id="r-1",
        session_id="s-1",
        tool=models.ToolCall(name="t", call_id="c", arguments=BROKEN),
        arguments_sha256=hashing.arguments_sha256(BROKEN),
        requester=models.Requester(slack_user_id=OPERATOR.id),
        required=models.Required(role="approvers"),
        rule="rules[0]",
        created_at=now,
        expires_at=now + timedelta(hours=1),
        policy_version="pol_x",
        fingerprint="f" * 64,
    )
    assert approval.arguments_jcs == BROKEN_TEXT.decode()
    await store.create_approval(approval, [])
    stored = await store.get_approval(approval.approval_id)
    assert stored is not None
    assert stored.arguments_jcs == BROKEN_TEXT.decode()
    # the values the card and the guards see are those of the text, not jsonb's rewrite
    assert stored.tool.arguments == {"x": 10**16, "y": 0, "z": 1.5e300}
    assert isinstance(stored.tool.arguments["z"], float)
