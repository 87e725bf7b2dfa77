"""Wire contract v1 through real HTTP: every bad input is a 4xx naming the field, never a 500,
never a partial row."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import asyncpg
import pytest

from bot import slack_app, wire
from tests import slack_requests
from tests.support.harness import (
    CHANNEL,
    FINANCE,
    OTHER_AGENT_TOKEN,
    SIGNING_SECRET,
    Harness,
)


async def _rows(harness: Harness) -> dict[str, int]:
    conn = await asyncpg.connect(harness.database_url)
    try:
        return {
            table: await conn.fetchval(f"SELECT count(*) FROM {table}")
            for table in ("approvals", "outbox", "attempts", "settlements")
        }
    finally:
        await conn.close()


def _fields(body: Any) -> list[str]:
    return [f["field"] for f in body["error"]["fields"]]


async def test_created_then_idempotent_then_conflict(harness: Harness) -> None:
    body = harness.request_body()
    status, first = await harness.call("POST", "/v1/approvals", json_body=body)
    assert status == 201
    status, again = await harness.call("POST", "/v1/approvals", json_body=body)
    assert status == 200
    assert again["approval_id"] == first["approval_id"]
    changed = harness.request_body(
        tool={"name": "transfer_money", "call_id": "call_1", "arguments": {"amount": 5000}}
    )
    status, conflict = await harness.call("POST", "/v1/approvals", json_body=changed)
    assert status == 409
    assert conflict["error"]["code"] == "conflict"
    # never a silent rebind: the stored approval keeps the original arguments
    _, stored = await harness.call("GET", f"/v1/approvals/{first['approval_id']}")
    assert stored["tool"]["arguments"] == {"amount": 500}
    assert (await _rows(harness))["approvals"] == 1


async def test_concurrent_identical_submissions_make_one_approval(harness: Harness) -> None:
    body = harness.request_body(request_id="race-1")
    results = await asyncio.gather(
        *(harness.call("POST", "/v1/approvals", json_body=body) for _ in range(10))
    )
    statuses = sorted(status for status, _ in results)
    assert statuses == [200] * 9 + [201]
    assert len({b["approval_id"] for _, b in results}) == 1
    rows = await _rows(harness)
    assert rows["approvals"] == 1
    assert rows["outbox"] >= 1


async def test_arguments_sha256_is_canonical(harness: Harness) -> None:
    created = await harness.submit(
        tool={"name": "t", "call_id": "c", "arguments": {"b": [1, {"z": "é", "a": None}], "a": 1}}
    )
    import hashlib

    canonical = '{"a":1,"b":[1,{"a":null,"z":"é"}]}'.encode()
    assert created["arguments_sha256"] == hashlib.sha256(canonical).hexdigest()


@pytest.mark.parametrize(
    ("headers", "data", "status", "code"),
    [
        ({"Content-Type": "application/json"}, b"x" * (64 * 1024 + 1), 413, "too_large"),
        ({"Content-Type": "text/plain"}, b"{}", 415, "unsupported_media_type"),
        ({"Content-Type": "application/json"}, b'{"request_id": ', 400, "malformed_json"),
        ({"Content-Type": "application/json"}, b"\xff\xfe", 400, "malformed_json"),
    ],
)
async def test_bad_bodies(
    harness: Harness, headers: dict[str, str], data: bytes, status: int, code: str
) -> None:
    got, body = await harness.call("POST", "/v1/approvals", data=data, headers=headers)
    assert got == status
    assert body["error"]["code"] == code
    assert (await _rows(harness))["approvals"] == 0


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b'{"tool": {"arguments": {"x": NaN}}}', 400),
        (b'{"tool": {"arguments": {"x": Infinity}}}', 400),
        (b"[" * 5000 + b"]" * 5000, 400),  # nested too deeply
        (b'{"summary": "nul \\u0000 inside"}', 422),
        (b'{"tool": {"arguments": {"\\u0000k": 1}}}', 422),
        (b'{"tool": {"arguments": {"x": "\\ud800"}}}', 422),  # a lone surrogate
        # and without an escape: a surrogate encoded in UTF-8, a raw NUL (neither is JSON)
        (b'{"tool": {"arguments": {"x": "\xed\xa0\x80"}}}', 400),
        (b'{"summary": "raw \x00 nul"}', 400),
    ],
)
async def test_hostile_json_is_a_4xx_never_a_500(harness: Harness, raw: bytes, status: int) -> None:
    got, body = await harness.call(
        "POST", "/v1/approvals", data=raw, headers={"Content-Type": "application/json"}
    )
    assert got == status, body
    assert (await _rows(harness))["approvals"] == 0


async def test_an_escaped_backslash_before_u_is_text_not_an_escape(harness: Harness) -> None:
    """The check for NUL and lone surrogates runs only on bodies holding a \\u escape; the
    characters \\ and u0000 (an escaped backslash) are plain text, and taken."""
    body = harness.request_body(summary="path C:\\u0000\\x")
    status, answer = await harness.call("POST", "/v1/approvals", json_body=body)
    assert status == 201, answer
    assert answer["summary"] == "path C:\\u0000\\x"


async def test_nul_is_named_by_its_field(harness: Harness) -> None:
    body = harness.request_body(summary="a\x00b")
    status, answer = await harness.call("POST", "/v1/approvals", json_body=body)
    assert status == 422
    assert _fields(answer) == ["summary"]


@pytest.mark.parametrize("approval_id", ["apr_%00", "apr_x", "..%2F..%2Fetc", "a" * 300])
async def test_malformed_ids_are_404(harness: Harness, approval_id: str) -> None:
    for method, path in (
        ("GET", f"/v1/approvals/{approval_id}"),
        ("GET", f"/v1/approvals/{approval_id}?wait=1"),
        ("POST", f"/v1/approvals/{approval_id}/cancel"),
    ):
        status, _ = await harness.call(method, path)
        assert status == 404, (method, path)


async def test_expires_in_must_be_an_integer_not_true(harness: Harness) -> None:
    status, body = await harness.call(
        "POST", "/v1/approvals", json_body=harness.request_body(expires_in=True)
    )
    assert status == 422
    assert _fields(body) == ["expires_in"]


async def test_chunked_body_over_the_limit_is_413(harness: Harness) -> None:
    async def chunks() -> Any:
        for _ in range(20):
            yield b"x" * 4096

    assert harness.session is not None
    async with harness.session.post(
        harness.base_url + "/v1/approvals",
        data=chunks(),
        headers={
            "Authorization": "Bearer sales-bot-token-0123456789",
            "Content-Type": "application/json",
        },
    ) as response:
        assert response.status == 413


async def test_a_body_of_exactly_the_limit_is_read_one_byte_more_is_413(harness: Harness) -> None:
    text = json.dumps(harness.request_body(request_id="at-the-limit"))
    exact = text.encode() + b" " * (wire.MAX_BODY - len(text.encode()))
    status, _ = await harness.call(
        "POST", "/v1/approvals", data=exact, headers={"Content-Type": "application/json"}
    )
    assert status == 201
    status, body = await harness.call(
        "POST", "/v1/approvals", data=exact + b" ", headers={"Content-Type": "application/json"}
    )
    assert status == 413
    assert body["error"] == {
        "code": "too_large",
        "message": f"the body is over {wire.MAX_BODY} bytes",
        "fields": [],
    }


async def test_slack_payloads_are_not_held_to_the_agent_apis_limit(harness: Harness) -> None:
    """A click echoes the whole card back; with non-ASCII text, well past 64 KiB."""
    approval = await harness.submit(summary="é" * 2000)
    card = harness.standin.card(CHANNEL, await harness.card_ts(approval["approval_id"]))
    bulky = {**card, "blocks": card["blocks"] * 20}
    request = slack_requests.block_actions(
        signing_secret=SIGNING_SECRET,
        user_id=FINANCE[0].id,
        action_id="countersign_approve",
        value=approval["approval_id"],
        message=bulky,
    )
    assert wire.MAX_BODY < len(request.body.encode()) < slack_app.MAX_PAYLOAD
    assert await harness.post_slack(request) == 200
    _, settled = await harness.call("GET", f"/v1/approvals/{approval['approval_id']}?wait=5")
    assert settled["status"] == "approved"


@pytest.mark.parametrize(
    ("change", "fields"),
    [
        ({"request_id": ""}, ["request_id"]),
        ({"tool": {"name": "x", "arguments": {}}}, ["tool.call_id"]),
        ({"tool": {"name": "x", "call_id": "c", "arguments": []}}, ["tool.arguments"]),
        ({"requester": {"name": "nobody"}}, ["requester"]),
        ({"requester": {"slack_user_id": "not-an-id"}}, ["requester.slack_user_id"]),
        ({"expires_in": 0}, ["expires_in"]),
        ({"expires_in": "soon"}, ["expires_in"]),
        ({"framework": "crewai"}, ["framework"]),
        ({"agent": "someone-else"}, ["agent"]),  # the agent comes from the token, never the body
        ({"summary": "x" * 2001}, ["summary"]),
    ],
)
async def test_schema_errors_name_each_field(
    harness: Harness, change: dict[str, Any], fields: list[str]
) -> None:
    status, body = await harness.call(
        "POST", "/v1/approvals", json_body=harness.request_body(**change)
    )
    assert status == 422, body
    assert _fields(body) == fields
    assert (await _rows(harness))["approvals"] == 0


async def test_several_schema_errors_at_once(harness: Harness) -> None:
    body = harness.request_body(session_id=None, expires_in=-5)
    del body["tool"]
    status, answer = await harness.call("POST", "/v1/approvals", json_body=body)
    assert status == 422
    assert sorted(_fields(answer)) == ["expires_in", "session_id", "tool"]


@pytest.mark.parametrize(
    "url",
    [
        "http://evil.example/approvals",
        "http://127.0.0.1:1/approvals",  # right host, other port
        "file:///etc/passwd",
        "http://agent.internal@evil.example/",
        "not a url",
    ],
)
async def test_callback_host_not_allowed(harness: Harness, url: str) -> None:
    status, body = await harness.call(
        "POST", "/v1/approvals", json_body=harness.request_body(callback_url=url)
    )
    assert status == 422
    assert _fields(body) == ["callback_url"]
    assert (await _rows(harness))["approvals"] == 0


async def test_agent_without_callback_secret_cannot_ask_for_callbacks(harness: Harness) -> None:
    status, body = await harness.call(
        "POST", "/v1/approvals", json_body=harness.request_body(), token=OTHER_AGENT_TOKEN
    )
    assert status == 422
    assert _fields(body) == ["callback_url"]


@pytest.mark.parametrize("token", [None, "wrong-token-0123456789", ""])
async def test_unauthenticated(harness: Harness, token: str | None) -> None:
    status, body = await harness.call(
        "POST", "/v1/approvals", json_body=harness.request_body(), token=token
    )
    assert status == 401
    assert body["error"]["code"] == "unauthorized"


async def test_unknown_id_and_other_agents_approval_are_404(harness: Harness) -> None:
    status, body = await harness.call("GET", "/v1/approvals/apr_000000000000000000000000")
    assert status == 404
    assert body["error"]["code"] == "not_found"
    created = await harness.submit()
    status, _ = await harness.call(
        "GET", f"/v1/approvals/{created['approval_id']}", token=OTHER_AGENT_TOKEN
    )
    assert status == 404  # another agent's approval does not exist for you
    status, _ = await harness.call(
        "POST", f"/v1/approvals/{created['approval_id']}/cancel", token=OTHER_AGENT_TOKEN
    )
    assert status == 404


@pytest.mark.parametrize("wait", ["-1", "61", "soon", "nan"])
async def test_bad_wait_is_422(harness: Harness, wait: str) -> None:
    created = await harness.submit()
    status, body = await harness.call("GET", f"/v1/approvals/{created['approval_id']}?wait={wait}")
    assert status == 422
    assert _fields(body) == ["wait"]


async def test_cancel(harness: Harness) -> None:
    created = await harness.submit()
    approval_id = created["approval_id"]
    ts = await harness.card_ts(approval_id)
    status, body = await harness.call(
        "POST", f"/v1/approvals/{approval_id}/cancel", json_body={"reason": "user changed mind"}
    )
    assert status == 200
    assert body["status"] == "cancelled"
    assert "user changed mind" in body["reason"]
    [received] = await harness.receiver.wait_delivered(1)
    assert json.loads(received.body)["status"] == "cancelled"
    await harness.standin.wait_for(
        lambda: "Cancelled" in json.dumps(harness.standin.card("C0REVIEWS", ts)["blocks"])
    )
    status, again = await harness.call("POST", f"/v1/approvals/{approval_id}/cancel")
    assert status == 409
    assert again["error"]["code"] == "already_settled"


async def test_cancel_with_bad_body(harness: Harness) -> None:
    created = await harness.submit()
    status, body = await harness.call(
        "POST", f"/v1/approvals/{created['approval_id']}/cancel", json_body={"why": 1}
    )
    assert status == 422
    assert _fields(body) == ["why"]


async def test_long_poll_returns_when_settled(harness: Harness) -> None:
    from tests.support.harness import FINANCE

    created = await harness.submit(callback_url=None)
    approval_id = created["approval_id"]
    await harness.card_ts(approval_id)
    waiter = asyncio.create_task(harness.call("GET", f"/v1/approvals/{approval_id}?wait=30"))
    await asyncio.sleep(0.2)
    assert not waiter.done()
    loop = asyncio.get_running_loop()
    clicked_at = loop.time()
    await harness.click(FINANCE[1], approval_id)
    status, body = await asyncio.wait_for(waiter, 10)
    assert status == 200
    assert body["status"] == "approved"
    assert body["delivery"]["status"] == "none"  # no callback_url: the agent long-polls
    # woken by the notification: faster than the 2 s polling backstop, let alone the 30 s wait
    assert loop.time() - clicked_at < 1.5


async def test_long_poll_times_out_pending(harness: Harness) -> None:
    created = await harness.submit()
    status, body = await harness.call("GET", f"/v1/approvals/{created['approval_id']}?wait=0.3")
    assert status == 200
    assert body["status"] == "pending"
    assert body["resume"] is None


# -- I-JSON (RFC 7493): what can't be hashed and stored exactly is refused, on every route -----


async def _turn_rows(harness: Harness) -> int:
    conn = await asyncpg.connect(harness.database_url)
    try:
        count: int = await conn.fetchval("SELECT count(*) FROM turn_verdicts")
        return count
    finally:
        await conn.close()


def _turn_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "session_id": "wa-1",
        "request_id": "turn-1",
        "channel": "whatsapp",
        "lead": {"id": "lead-42"},
        "tool": {"name": "grant_discount", "call_id": "call-9", "arguments": {"amount": 1}},
    }
    return body | overrides


def _with_number(harness: Harness, route: str, literal: str) -> bytes:
    """A valid body of ``route`` whose ``tool.arguments.amount`` is the JSON text ``literal``."""
    body = harness.request_body() if route == "/v1/approvals" else _turn_body()
    body["tool"]["arguments"] = {"amount": "@"}
    return json.dumps(body).replace('"@"', literal).encode()


async def _post_raw(harness: Harness, route: str, raw: bytes) -> tuple[int, Any]:
    return await harness.call("POST", route, data=raw, headers={"Content-Type": "application/json"})


async def _nothing_written(harness: Harness) -> None:
    rows = await _rows(harness)
    assert rows == dict.fromkeys(rows, 0)
    assert await _turn_rows(harness) == 0


ROUTES = ["/v1/approvals", "/v1/turns"]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    "literal",
    [
        "1e400",  # a 500 before: json.loads makes it inf, and nothing could store or hash it
        "-1e400",
        "1E+309",
        "1e-400",  # nonzero, but it would silently become 0
        "-2.5e-999",
        "9007199254740992",  # 2^53: beyond it integers are no longer exact as doubles
        "-9007199254740992",
        "10000000000000000",
        "1" + "0" * 5000,  # past Python's int digit limit too: named, not a parse error
    ],
)
async def test_numbers_no_double_holds_are_422_naming_the_field(
    harness: Harness, route: str, literal: str
) -> None:
    status, answer = await _post_raw(harness, route, _with_number(harness, route, literal))
    assert status == 422, answer
    assert answer["error"]["code"] == "invalid_request"
    assert _fields(answer) == ["tool.arguments.amount"]
    await _nothing_written(harness)


@pytest.mark.parametrize(
    "literal", ["9007199254740991", "-9007199254740991", "1e16", "-0.0", "1.5e300", "5e-324", "0e5"]
)
async def test_numbers_a_double_holds_are_accepted(harness: Harness, literal: str) -> None:
    status, answer = await _post_raw(
        harness, "/v1/approvals", _with_number(harness, "/v1/approvals", literal)
    )
    assert status == 201, answer


async def test_the_whole_body_is_restricted_not_only_the_arguments(harness: Harness) -> None:
    body = harness.request_body(context={"limits": [1, {"cap": "@"}]})
    raw = (
        json.dumps(body)
        .replace('"@"', "1e999")
        .replace('"expires_in": 3600', '"expires_in": 1e999')
    )
    status, answer = await _post_raw(harness, "/v1/approvals", raw.encode())
    assert status == 422, answer
    assert sorted(_fields(answer)) == ["context.limits.1.cap", "expires_in"]
    await _nothing_written(harness)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    "duplicate",
    [
        # the reviewer's card and the agent's runtime could each take another of the two
        ('"amount": 1', '"amount": 1, "amount": 1000000'),
        ('"tool": {', '"tool": {"name": "harmless", '),
        ('"session_id": ', '"session_id": "other", "session_id": '),
    ],
    ids=["argument", "tool-name", "top-level"],
)
async def test_a_key_twice_in_one_object_is_malformed(
    harness: Harness, route: str, duplicate: tuple[str, str]
) -> None:
    body = harness.request_body() if route == "/v1/approvals" else _turn_body()
    body["tool"]["arguments"] = {"amount": 1}
    raw = json.dumps(body)
    assert duplicate[0] in raw
    status, answer = await _post_raw(harness, route, raw.replace(*duplicate, 1).encode())
    assert status == 400, answer
    assert answer["error"]["code"] == "malformed_json"
    assert "twice" in answer["error"]["message"]
    await _nothing_written(harness)


async def test_the_same_key_in_sibling_objects_is_fine(harness: Harness) -> None:
    arguments = {"a": {"id": 1}, "b": {"id": 2}, "list": [{"id": 3}, {"id": 4}]}
    created = await harness.submit(tool={"name": "t", "call_id": "c", "arguments": arguments})
    assert created["tool"]["arguments"] == arguments


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
async def test_nan_and_infinity_stay_malformed(harness: Harness, route: str, literal: str) -> None:
    status, answer = await _post_raw(harness, route, _with_number(harness, route, literal))
    assert status == 400, answer
    assert answer["error"]["code"] == "malformed_json"
    await _nothing_written(harness)


@pytest.mark.parametrize("route", ROUTES)
async def test_a_lone_surrogate_in_the_arguments_is_422_on_every_route(
    harness: Harness, route: str
) -> None:
    raw = _with_number(harness, route, '"\\udc00 alone"')
    status, answer = await _post_raw(harness, route, raw)
    assert status == 422, answer
    assert _fields(answer) == ["tool.arguments.amount"]
    await _nothing_written(harness)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    ("literal", "field"),
    [
        ('[{"y": "ok"}, {"y": "\\uDBFF"}]', "tool.arguments.amount.1.y"),  # deep, upper case
        ('{"\\u0000k": 1}', "tool.arguments.amount"),  # in a key
        ('"\\\\\\u0000"', "tool.arguments.amount"),  # an escaped backslash, then a NUL
    ],
)
async def test_nul_and_lone_surrogates_are_found_wherever_they_are(
    harness: Harness, route: str, literal: str, field: str
) -> None:
    """The walk naming them runs only on bodies holding a \\u escape: every escape is seen."""
    status, answer = await _post_raw(harness, route, _with_number(harness, route, literal))
    assert status == 422, answer
    assert _fields(answer) == [field]
    await _nothing_written(harness)


# -- the reserved request-id prefix of guard escalations --------------------------------------


@pytest.mark.parametrize("request_id", ["turn:call-9", "  turn:call-9", "turn:"])
async def test_an_agent_cannot_use_the_turn_prefix(harness: Harness, request_id: str) -> None:
    status, answer = await harness.call(
        "POST", "/v1/approvals", json_body=harness.request_body(request_id=request_id)
    )
    assert status == 422, answer
    assert _fields(answer) == ["request_id"]
    await _nothing_written(harness)


async def test_look_alikes_of_the_prefix_are_ordinary_request_ids(harness: Harness) -> None:
    for request_id in ("TURN:call-9", "turn-call-9", "my-turn:1"):
        created = await harness.submit(request_id=request_id)
        assert created["request_id"] == request_id


async def test_an_agent_cannot_pre_empt_a_turns_escalation(harness: Harness) -> None:
    """Were ``turn:call-9`` open to agents, a harmless approval made first under that id would
    be what the guard's escalation of call-9 maps to (idempotent on the request id)."""
    pre_empt = harness.request_body(
        request_id="turn:call-9",
        session_id="wa-1",
        tool={"name": "grant_discount", "call_id": "call-9", "arguments": {"discount_pct": 1}},
    )
    status, answer = await harness.call("POST", "/v1/approvals", json_body=pre_empt)
    assert status == 422, answer
    assert _fields(answer) == ["request_id"]
    await _nothing_written(harness)

    turn = _turn_body(
        tool={"name": "grant_discount", "call_id": "call-9", "arguments": {"discount_pct": 15}},
        operator={"slack_user_id": "U0OPER", "email": "omar@example.com"},
        funnel={"stage": "qualified"},
    )
    status, verdict = await harness.call("POST", "/v1/turns", json_body=turn)
    assert status == 200, verdict
    assert verdict["verdict"] == "escalate"
    _, approval = await harness.call("GET", f"/v1/approvals/{verdict['approval_id']}")
    assert approval["request_id"] == "turn:call-9"
    assert approval["tool"]["arguments"] == {"discount_pct": 15}  # the turn's own, not a decoy
    assert approval["required"]["role"] == "sales-lead"
    assert approval["requester"]["slack_user_id"] == "U0OPER"


async def test_a_slack_request_over_its_limit_is_refused_unread(harness: Harness) -> None:
    """Slack's limit is a bound too: past it aiohttp answers 413 and nothing reaches bolt."""
    assert harness.session is not None
    body = io.BytesIO(b"payload=" + b"x" * slack_app.MAX_PAYLOAD)
    async with harness.session.post(
        harness.base_url + "/slack/events",
        data=body,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    ) as response:
        assert response.status == 413
