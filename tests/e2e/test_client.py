"""The agent-side client against the real bot: submit, long-poll, verify callbacks, bind."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from countersign_client import (
    CallbackVerifier,
    Conflict,
    CountersignClient,
    DuplicateDelivery,
    InvalidRequest,
    NotFound,
    PendingCall,
    SignatureError,
    Unauthorized,
    arguments_sha256,
    check_binding,
)
from countersign_client.errors import BindingMismatch
from tests.e2e.reviewer import refused_then_decided
from tests.support.harness import AGENT_TOKEN, APPROVER, CALLBACK_SECRET, REQUESTER, Harness

REQUESTER_ID = {"slack_user_id": REQUESTER.id, "email": REQUESTER.email, "name": "Rita"}


async def test_submit_wait_verify_and_bind(harness: Harness) -> None:
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        pending = await cs.submit(
            request_id="r-1",
            session_id="s-1",
            tool="deploy",
            call_id="call-1",
            arguments={"service": "api", "version": "1.2.3"},
            requester=REQUESTER_ID,
            callback_url=harness.receiver.url,
        )
        assert pending.status == "pending"
        waiter = asyncio.create_task(cs.wait(pending.approval_id, timeout=20))
        await refused_then_decided(harness, "call-1", requester=REQUESTER, approver=APPROVER)
        decision = await waiter
    assert decision.approved
    call = PendingCall(
        approval_id=pending.approval_id,
        request_id="r-1",
        session_id="s-1",
        call_id="call-1",
        arguments={"version": "1.2.3", "service": "api"},  # key order does not matter
    )
    assert check_binding(decision, call) is decision
    for tampered in (
        dataclasses.replace(call, call_id="call-2"),
        dataclasses.replace(call, session_id="s-2"),
        dataclasses.replace(call, arguments={"service": "api", "version": "9.9.9"}),
    ):
        with pytest.raises(BindingMismatch):
            check_binding(decision, tampered)

    [received] = await harness.receiver.wait_delivered(1)
    headers = {
        "Countersign-Signature": received.signature,
        "Idempotency-Key": received.idempotency_key,
    }
    verifier = CallbackVerifier(CALLBACK_SECRET)
    pushed = verifier.verify(received.body, headers)
    assert pushed.approval_id == pending.approval_id
    assert pushed.approved
    with pytest.raises(DuplicateDelivery):
        verifier.verify(received.body, headers)
    with pytest.raises(SignatureError):
        CallbackVerifier("wrong-secret").verify(received.body, headers)
    with pytest.raises(SignatureError):
        CallbackVerifier(CALLBACK_SECRET).verify(
            received.body.replace(b"approved", b"denied!"), headers
        )
    with pytest.raises(SignatureError):  # a valid old body replayed later
        CallbackVerifier(CALLBACK_SECRET, clock=lambda: 10**10).verify(received.body, headers)


async def test_typed_errors(harness: Harness) -> None:
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        kwargs = dict(
            request_id="r-1", session_id="s-1", tool="deploy", call_id="c", requester=REQUESTER_ID
        )
        await cs.submit(arguments={"a": 1}, **kwargs)  # type: ignore[arg-type]
        with pytest.raises(Conflict):
            await cs.submit(arguments={"a": 2}, **kwargs)  # type: ignore[arg-type]
        with pytest.raises(InvalidRequest) as invalid:
            await cs.submit(arguments={}, **{**kwargs, "requester": {}})  # type: ignore[arg-type]
        assert [f["field"] for f in invalid.value.fields] == ["requester"]
        with pytest.raises(NotFound):
            await cs.get("apr_000000000000000000000000")
    async with CountersignClient(harness.base_url, "not-a-token-at-all") as bad:
        with pytest.raises(Unauthorized):
            await bad.get("apr_000000000000000000000000")


async def test_wait_survives_a_bot_restart(harness: Harness) -> None:
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        pending = await cs.submit(
            request_id="r-1",
            session_id="s-1",
            tool="deploy",
            call_id="call-1",
            arguments={},
            requester=REQUESTER_ID,
        )
        waiter = asyncio.create_task(cs.wait(pending.approval_id, timeout=30))
        await asyncio.sleep(0.3)
        await harness.stop_bot()  # the long-poll's connection drops
        await asyncio.sleep(0.5)  # the client retries against nothing for a while
        await harness.start_bot(same_port=True)
        await refused_then_decided(harness, "call-1", requester=REQUESTER, approver=APPROVER)
        decision = await asyncio.wait_for(waiter, 20)
    assert decision.approved


async def test_wait_honours_fractions_of_a_second(harness: Harness) -> None:
    import time

    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        pending = await cs.submit(
            request_id="r-f",
            session_id="s-1",
            tool="deploy",
            call_id="call-f",
            arguments={},
            requester=REQUESTER_ID,
        )
        started = time.monotonic()
        still = await cs.wait(pending.approval_id, timeout=0.8)
        waited = time.monotonic() - started
    assert still.status == "pending"
    assert 0.7 < waited < 3  # it really waited, and not for a whole extra second


async def test_arguments_read_back_hash_as_sent(harness: Harness) -> None:
    """Numbers jsonb would rewrite (1e16, -0.0, 1.5e300) and a key outside the BMP: the decision
    binds to the call as the agent holds it, and its own arguments hash to its hash."""
    arguments = {"x": 1e16, "y": -0.0, "z": 1.5e300, "\U0001f680": "launch", "\uff61": 1}
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        pending = await cs.submit(
            request_id="r-n",
            session_id="s-1",
            tool="deploy",
            call_id="call-n",
            arguments=arguments,
            requester=REQUESTER_ID,
        )
        waiter = asyncio.create_task(cs.wait(pending.approval_id, timeout=20))
        await refused_then_decided(harness, "call-n", requester=REQUESTER, approver=APPROVER)
        decision = await waiter
    assert decision.approved
    call = PendingCall(
        approval_id=pending.approval_id,
        request_id="r-n",
        session_id="s-1",
        call_id="call-n",
        arguments=arguments,
    )
    assert check_binding(decision, call) is decision
    assert decision.tool.arguments["x"] == 10**16  # read back by Python as an int
    assert arguments_sha256(decision.tool.arguments) == decision.arguments_sha256
