"""AG-UI end to end through the real bot: a run's events on the wire (SSE, encoded by
ag-ui-protocol's EventEncoder) → submit from the RUN_FINISHED interrupt outcome → clicks in the
Slack stand-in → a resume entry and the next RunAgentInput, validated by ag-ui-protocol."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    FunctionCall,
    Interrupt,
    MessagesSnapshotEvent,
    ResumeEntry,
    RunAgentInput,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    UserMessage,
)
from ag_ui.encoder import EventEncoder

from countersign_client import Approval, BindingMismatch, CountersignClient
from countersign_client.adapters.ag_ui import NOT_EXECUTED, AgUiApprovals
from tests.e2e.reviewer import card_for_call, refused_then_decided
from tests.support.harness import AGENT_TOKEN, APPROVER, CHANNEL, REQUESTER, Harness

REQUESTER_ID = {"slack_user_id": REQUESTER.id, "email": REQUESTER.email, "name": "Rita"}
THREAD, RUN = "thread-agui-1", "run-1"
CALL_ID, INTERRUPT_ID, FORM_ID = "tc-refund-1042", "int-refund-1042", "int-note"
ARGS: dict[str, Any] = {"order": "ord-1042", "amount": {"value": 129.5, "currency": "EUR"}}
APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["approved"],
}


def run_events() -> list[BaseEvent]:
    """An interrupted run: it proposes a refund, then stops on a tool approval (and a form)."""
    text = json.dumps(ARGS)
    cut = len(text) // 2
    return [
        RunStartedEvent(thread_id=THREAD, run_id=RUN),
        ToolCallStartEvent(
            tool_call_id=CALL_ID, tool_call_name="refund_order", parent_message_id="m-1"
        ),
        ToolCallArgsEvent(tool_call_id=CALL_ID, delta=text[:cut]),
        ToolCallArgsEvent(tool_call_id=CALL_ID, delta=text[cut:]),
        ToolCallEndEvent(tool_call_id=CALL_ID),
        MessagesSnapshotEvent(
            messages=[
                UserMessage(id="m-0", content="Refund order 1042"),
                AssistantMessage(
                    id="m-1",
                    tool_calls=[
                        ToolCall(
                            id=CALL_ID,
                            function=FunctionCall(name="refund_order", arguments=text),
                        )
                    ],
                ),
            ]
        ),
        RunFinishedEvent(
            thread_id=THREAD,
            run_id=RUN,
            outcome=RunFinishedInterruptOutcome(
                interrupts=[
                    Interrupt(
                        id=INTERRUPT_ID,
                        reason="tool_call",
                        tool_call_id=CALL_ID,
                        message="Refund EUR 129.50 for order ord-1042?",
                        response_schema=APPROVAL_SCHEMA,
                    ),
                    Interrupt(id=FORM_ID, reason="input_required", message="Note for the CRM?"),
                ]
            ),
        ),
    ]


def over_the_wire(events: list[BaseEvent]) -> list[dict[str, Any]]:
    """The events as a client reads them: SSE frames from EventEncoder, parsed back to JSON."""
    encoder = EventEncoder()
    stream = "".join(encoder.encode(event) for event in events)
    return [
        json.loads(line.removeprefix("data: "))
        for line in stream.splitlines()
        if line.startswith("data: ")
    ]


def tamperings(decision: Approval) -> list[tuple[str, Approval]]:
    """The decision with one echoed field changed at a time (and the field that must catch it)."""
    tool = decision.tool
    return [
        ("approval_id", decision.model_copy(update={"approval_id": "apr_" + "0" * 24})),
        ("request_id", decision.model_copy(update={"request_id": FORM_ID})),
        ("session_id", decision.model_copy(update={"session_id": "thread-other"})),
        (
            "tool.call_id",
            decision.model_copy(update={"tool": tool.model_copy(update={"call_id": "tc-2"})}),
        ),
        ("arguments_sha256", decision.model_copy(update={"arguments_sha256": "0" * 64})),
        (
            "tool.arguments",
            decision.model_copy(
                update={"tool": tool.model_copy(update={"arguments": {**ARGS, "amount": 1}})}
            ),
        ),
        (
            "tool.name",
            decision.model_copy(update={"tool": tool.model_copy(update={"name": "wipe"})}),
        ),
    ]


def form_answer() -> ResumeEntry:
    return ResumeEntry(interrupt_id=FORM_ID, status="resolved", payload={"note": "VIP"})


async def test_approval_becomes_a_validated_resume_and_tampering_is_refused(
    harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    wire = over_the_wire(run_events())
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        approvals = AgUiApprovals(cs, requester=REQUESTER_ID)
        paused = time.perf_counter()  # RUN_FINISHED with the interrupt outcome is in hand
        [(call, submitted)] = await approvals.submit_run(wire)
        assert (call.tool, call.call_id, call.arguments) == ("refund_order", CALL_ID, ARGS)
        assert (submitted.request_id, submitted.session_id) == (INTERRUPT_ID, THREAD)
        waiter = asyncio.create_task(cs.wait(submitted.approval_id, timeout=20))
        assert await card_for_call(harness, CALL_ID) == submitted.approval_id
        card_seen = time.perf_counter()
        await harness.click(REQUESTER, submitted.approval_id)
        [why] = await harness.wait_ephemeral(REQUESTER)
        assert "you requested this call" in why
        clicked = time.perf_counter()
        await harness.click(APPROVER, submitted.approval_id)
        decision = await waiter
        decided = time.perf_counter()

        for field_name, tampered in tamperings(decision):
            with pytest.raises(BindingMismatch) as refused:
                approvals.resume_entry(tampered)
            assert refused.value.field == field_name
        with pytest.raises(ValueError, match="missing"):  # partial resumes are not allowed
            approvals.resume_input(THREAD, run_id="run-2", others=[form_answer()])

        mapping = time.perf_counter()
        entry = approvals.resume_entry(decision)
        ready = time.perf_counter()
        assert entry.interrupt_id == INTERRUPT_ID
        assert entry.status == "resolved"
        assert entry.payload == {"approved": True}
        assert entry.metadata is not None
        assert entry.metadata["countersign"]["arguments_sha256"] == submitted.arguments_sha256
        # the server's own ``resume`` says the same thing (we build ours from the checked fields)
        assert decision.resume == {
            "interruptId": INTERRUPT_ID,
            "status": "resolved",
            "payload": {"approved": True},
        }
        with pytest.raises(BindingMismatch) as again:  # answered: no longer open
            approvals.resume_entry(decision)
        assert again.value.field == "request_id"
        with pytest.raises(ValueError, match="non-approval"):  # no bypassing the approval
            approvals.resume_input(
                THREAD,
                run_id="run-2",
                others=[ResumeEntry(interrupt_id=INTERRUPT_ID, status="resolved", payload={})],
            )

        run_input = approvals.resume_input(
            THREAD,
            run_id="run-2",
            messages=[UserMessage(id="m-0", content="Refund order 1042")],
            others=[form_answer()],
        )
        assert isinstance(run_input, RunAgentInput)
        body = run_input.model_dump_json(by_alias=True)
        assert RunAgentInput.model_validate_json(body) == run_input
        sent = json.loads(body)
        assert sent["threadId"] == THREAD
        assert [r["interruptId"] for r in sent["resume"]] == [INTERRUPT_ID, FORM_ID]
        assert sent["resume"][0]["payload"] == {"approved": True}

        # the client restarts and reads the same events again: same approval, no second card
        again_submitted = await AgUiApprovals(cs, requester=REQUESTER_ID).submit_run(wire)
        assert [a.approval_id for _, a in again_submitted] == [submitted.approval_id]
    cards = [m for m in harness.standin.messages.get(CHANNEL, []) if CALL_ID in str(m)]
    assert len(cards) == 1
    with capsys.disabled():
        print(
            f"\n[ag-ui] pause → card visible {(card_seen - paused) * 1000:.0f} ms · "
            f"click → resume entry ready {((decided - clicked) + (ready - mapping)) * 1000:.0f} ms"
        )


async def test_deny_becomes_resolved_not_approved_with_the_reason(harness: Harness) -> None:
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        approvals = AgUiApprovals(cs, requester=REQUESTER_ID)
        [(_, submitted)] = await approvals.submit_run(over_the_wire(run_events()))
        waiter = asyncio.create_task(cs.wait(submitted.approval_id, timeout=20))
        await refused_then_decided(
            harness, CALL_ID, requester=REQUESTER, approver=APPROVER, action="countersign_deny"
        )
        decision = await waiter
    assert decision.status == "denied"
    assert decision.reason
    entry = approvals.resume_entry(decision)
    assert entry.status == "resolved"
    assert isinstance(entry.payload, dict)
    assert entry.payload["approved"] is False
    assert decision.reason in entry.payload["reason"]
    assert NOT_EXECUTED in entry.payload["reason"]
    run_input = approvals.resume_input(THREAD, run_id="run-2", others=[form_answer()])
    assert run_input.resume is not None
    assert run_input.resume[0].payload == entry.payload


async def test_expired_becomes_cancelled(harness: Harness) -> None:
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        approvals = AgUiApprovals(cs, requester=REQUESTER_ID, expires_in=60)
        [(_, submitted)] = await approvals.submit_run(over_the_wire(run_events()))
        await card_for_call(harness, CALL_ID)
        harness.clock.advance(61)  # nobody decided in time
        decision = await cs.wait(submitted.approval_id, timeout=20)
    assert decision.status == "expired"
    for field_name, tampered in tamperings(decision):
        with pytest.raises(BindingMismatch) as refused:
            approvals.resume_entry(tampered)
        assert refused.value.field == field_name
    entry = approvals.resume_entry(decision)
    assert entry.status == "cancelled"
    assert entry.payload is None  # a cancelled entry carries no answer
    assert entry.metadata is not None
    assert entry.metadata["countersign"]["status"] == "expired"
    assert NOT_EXECUTED in entry.metadata["countersign"]["reason"]
    run_input = approvals.resume_input(THREAD, run_id="run-2", others=[form_answer()])
    sent = json.loads(run_input.model_dump_json(by_alias=True))
    assert sent["resume"][0] == {
        "interruptId": INTERRUPT_ID,
        "status": "cancelled",
        "metadata": entry.metadata,
    }
    assert RunAgentInput.model_validate(sent) == run_input
