"""The client's side of single-use claims: typed 409s, the texts the model reads, claim keys, and
an attempt that retries a lost answer with its own key but never runs twice (against a stand-in
Countersign on loopback)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web

from countersign_client import errors, execution
from countersign_client.binding import PendingCall, arguments_sha256
from countersign_client.client import CountersignClient
from countersign_client.models import Approval

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
APPROVAL_ID = "apr_0123456789abcdef01234567"
ARGS = {"service": "api"}


def conflict(code: str, **details: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": f"{code}!", "fields": [], **details}}


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        ("already_claimed", errors.AlreadyClaimed),
        ("not_approved", errors.NotApproved),
        ("decision_lapsed", errors.DecisionLapsed),
        ("not_claimed", errors.NotClaimed),
        ("outcome_already_reported", errors.OutcomeAlreadyReported),
        ("already_settled", errors.Conflict),
    ],
)
def test_a_409_is_typed_by_its_code_and_stays_a_conflict(
    code: str, cls: type[errors.Conflict]
) -> None:
    error = errors.from_response(409, conflict(code))
    assert type(error) is cls
    assert isinstance(error, errors.Conflict)  # existing ``except Conflict`` still catches it
    assert (error.status, error.code, error.message) == (409, code, f"{code}!")


def test_the_refusals_carry_what_the_server_said() -> None:
    claimed = errors.from_response(
        409,
        conflict(
            "already_claimed",
            claim={"claim_id": "exc_1", "claimed_at": "2026-12-02T12:00:00+00:00"},
        ),
    )
    assert isinstance(claimed, errors.AlreadyClaimed)
    assert (claimed.claim_id, claimed.claimed_at) == ("exc_1", "2026-12-02T12:00:00+00:00")
    lapsed = errors.from_response(409, conflict("decision_lapsed", valid_until="2026-12-02T12:15"))
    assert isinstance(lapsed, errors.DecisionLapsed)
    assert lapsed.valid_until == "2026-12-02T12:15"
    denied = errors.from_response(409, conflict("not_approved", status="denied"))
    assert isinstance(denied, errors.NotApproved)
    assert denied.approval_status == "denied"
    # a body without the details (or not JSON at all) still gives the typed error
    bare = errors.from_response(409, {"error": {"code": "already_claimed"}})
    assert isinstance(bare, errors.AlreadyClaimed)
    assert bare.claim_id == ""
    assert type(errors.from_response(409, "busy")) is errors.Conflict


def test_what_the_model_is_told() -> None:
    claimed = errors.from_response(
        409, conflict("already_claimed", claim={"claim_id": "exc_1", "claimed_at": "t0"})
    )
    text = execution.refusal_text(claimed)
    assert text.startswith(execution.ALREADY_EXECUTED)
    assert "exc_1" in text
    lapsed = execution.refusal_text(
        errors.from_response(409, conflict("decision_lapsed", valid_until="t1"))
    )
    assert lapsed.startswith(execution.LAPSED)
    assert "t1" in lapsed
    assert "denied" in execution.refusal_text(
        errors.from_response(409, conflict("not_approved", status="denied"))
    )
    unreachable = execution.refusal_text(ConnectionResetError("10.0.0.1 secret"))
    assert unreachable.startswith("Not executed")
    assert "secret" not in unreachable  # only the type, never the text
    assert execution.error_detail(ValueError("token=abc")) == "raised ValueError"


def test_every_attempt_has_its_own_key_the_server_accepts() -> None:
    keys = {execution.attempt_key(APPROVAL_ID) for _ in range(100)}
    assert len(keys) == 100
    for key in keys:
        assert key.startswith(APPROVAL_ID + "/")
        assert 1 <= len(key) <= 200
        assert key.isprintable()


def test_an_approval_from_an_older_server_has_no_window_or_execution() -> None:
    body = resource()
    del body["valid_until"], body["execution"]
    approval = Approval.model_validate(body)
    assert (approval.valid_until, approval.execution) == (None, None)
    claimed = Approval.model_validate(
        resource(execution={"claim_id": "exc_1", "claimed_at": NOW.isoformat(), "outcome": None})
    )
    assert claimed.execution is not None
    assert claimed.execution.claim_id == "exc_1"
    assert claimed.valid_until == NOW + timedelta(seconds=900)


# -- an attempt against a stand-in Countersign ------------------------------------------------


def resource(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "approval_id": APPROVAL_ID,
        "status": "approved",
        "agent": "sales-bot",
        "request_id": "r-1",
        "session_id": "s-1",
        "tool": {"name": "deploy", "call_id": "c-1", "arguments": ARGS},
        "arguments_sha256": arguments_sha256(ARGS),
        "requester": {"email": "rita@example.com"},
        "created_at": NOW.isoformat(),
        "expires_at": (NOW + timedelta(hours=1)).isoformat(),
        "decided_at": NOW.isoformat(),
        "policy_version": "pol_test",
        "valid_until": (NOW + timedelta(seconds=900)).isoformat(),
        "execution": None,
    }
    body.update(changes)
    return body


PENDING = PendingCall(APPROVAL_ID, "r-1", "s-1", "c-1", ARGS)
Answer = Callable[[str, dict[str, Any]], web.Response]


@asynccontextmanager
async def countersign(answers: dict[str, list[Answer]]) -> AsyncIterator[tuple[str, list[Any]]]:
    """Answers each route's requests in turn from ``answers``; records (route, body)."""
    seen: list[Any] = []

    def route(name: str) -> Any:
        async def handle(request: web.Request) -> web.Response:
            body = await request.json()
            seen.append((name, body))
            return answers[name].pop(0)(name, body)

        return handle

    app = web.Application()
    app.router.add_post("/v1/approvals/{id}/execution", route("execution"))
    app.router.add_post("/v1/approvals/{id}/outcome", route("outcome"))
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", seen
    finally:
        await runner.cleanup()


def claimed(name: str, body: dict[str, Any]) -> web.Response:
    execution_ = {"claim_id": "exc_1", "claimed_at": NOW.isoformat(), "outcome": None}
    return web.json_response(resource(execution=execution_))


def unavailable(name: str, body: dict[str, Any]) -> web.Response:
    return web.json_response({"error": {"code": "unavailable", "message": "db"}}, status=503)


def taken(name: str, body: dict[str, Any]) -> web.Response:
    claim = {"claim_id": "exc_0", "claimed_at": NOW.isoformat()}
    return web.json_response(conflict("already_claimed", claim=claim), status=409)


async def test_a_lost_answer_is_retried_with_the_same_key_and_the_claim_comes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(execution, "PAUSE", 0.0)
    answers: dict[str, list[Answer]] = {
        "execution": [unavailable, claimed],
        "outcome": [unavailable, unavailable, unavailable],
    }
    async with countersign(answers) as (url, seen), CountersignClient(url, "t") as cs:
        attempt = execution.Attempt(cs, APPROVAL_ID)
        assert await attempt.claim(PENDING, "deploy") is None
        await attempt.report("ok")  # never delivered: logged, not raised
        await attempt.report("ok")  # and not sent again
    claims = [body["idempotency_key"] for route, body in seen if route == "execution"]
    assert claims == [attempt.key, attempt.key]
    reports = [body for route, body in seen if route == "outcome"]
    assert reports == [{"idempotency_key": attempt.key, "status": "ok", "detail": ""}] * 3


async def test_a_claim_held_elsewhere_or_not_bound_to_the_call_is_refused() -> None:
    def other_arguments(name: str, body: dict[str, Any]) -> web.Response:
        execution_ = {"claim_id": "exc_1", "claimed_at": NOW.isoformat(), "outcome": None}
        return web.json_response(
            resource(execution=execution_, arguments_sha256=arguments_sha256({"x": 1}))
        )

    def reported(name: str, body: dict[str, Any]) -> web.Response:
        return web.json_response(resource())

    answers: dict[str, list[Answer]] = {
        "execution": [taken, other_arguments],
        "outcome": [reported],
    }
    async with countersign(answers) as (url, seen), CountersignClient(url, "t") as cs:
        elsewhere = execution.Attempt(cs, APPROVAL_ID)
        told = await elsewhere.claim(PENDING, "deploy")
        assert told is not None
        assert told.startswith(execution.ALREADY_EXECUTED)
        assert isinstance(elsewhere.refusal, errors.AlreadyClaimed)
        await elsewhere.report("ok")  # nothing claimed: nothing to report
        unbound = execution.Attempt(cs, APPROVAL_ID)
        told = await unbound.claim(PENDING, "deploy")
        assert told is not None
        assert "arguments_sha256" in told
    # the unbound claim is reported as not run, by its own key
    [(_, report)] = [s for s in seen if s[0] == "outcome"]
    assert report["idempotency_key"] == unbound.key
    assert report["status"] == "error"
