"""AG-UI end to end through the real bot: a run's events on the wire (SSE, encoded by
ag-ui-protocol's EventEncoder) → submit from the RUN_FINISHED interrupt outcome → clicks in the
Slack stand-in → a resume entry and the next RunAgentInput, validated by ag-ui-protocol."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
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
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from aiohttp import web

from countersign_client import Approval, BindingMismatch, CountersignClient
from countersign_client.adapters.ag_ui import NOT_EXECUTED, AgUiApprovals
from countersign_client.execution import ALREADY_EXECUTED, LAPSED
from tests.e2e.resumer import resume_in_two_processes
from tests.e2e.reviewer import card_for_call, refused_then_decided
from tests.support.edit_form import edit_and_approve, editing_bot
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


def run_events(
    run: str = RUN,
    call_id: str = CALL_ID,
    interrupt_id: str = INTERRUPT_ID,
    args: dict[str, Any] = ARGS,
    form: bool = True,
) -> list[BaseEvent]:
    """An interrupted run: it proposes a refund, then stops on a tool approval (and a form)."""
    text = json.dumps(args)
    cut = len(text) // 2
    return [
        RunStartedEvent(thread_id=THREAD, run_id=run),
        ToolCallStartEvent(
            tool_call_id=call_id, tool_call_name="refund_order", parent_message_id="m-1"
        ),
        ToolCallArgsEvent(tool_call_id=call_id, delta=text[:cut]),
        ToolCallArgsEvent(tool_call_id=call_id, delta=text[cut:]),
        ToolCallEndEvent(tool_call_id=call_id),
        MessagesSnapshotEvent(
            messages=[
                UserMessage(id="m-0", content="Refund order 1042"),
                AssistantMessage(
                    id="m-1",
                    tool_calls=[
                        ToolCall(
                            id=call_id,
                            function=FunctionCall(name="refund_order", arguments=text),
                        )
                    ],
                ),
            ]
        ),
        RunFinishedEvent(
            thread_id=THREAD,
            run_id=run,
            outcome=RunFinishedInterruptOutcome(
                interrupts=[
                    Interrupt(
                        id=interrupt_id,
                        reason="tool_call",
                        tool_call_id=call_id,
                        message="Refund EUR 129.50 for order ord-1042?",
                        response_schema=APPROVAL_SCHEMA,
                    ),
                    *(
                        [
                            Interrupt(
                                id=FORM_ID, reason="input_required", message="Note for the CRM?"
                            )
                        ]
                        if form
                        else []
                    ),
                ]
            ),
        ),
    ]


def form_interrupt() -> Interrupt:
    return Interrupt(id=FORM_ID, reason="input_required", message="Note for the CRM?")


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
                await approvals.resume_entry(tampered)
            assert refused.value.field == field_name
        with pytest.raises(ValueError, match="missing"):  # partial resumes are not allowed
            approvals.resume_input(THREAD, run_id="run-2", others=[form_answer()])

        mapping = time.perf_counter()
        entry = await approvals.resume_entry(decision)
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
            await approvals.resume_entry(decision)
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
    entry = await approvals.resume_entry(decision)
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
            await approvals.resume_entry(tampered)
        assert refused.value.field == field_name
    entry = await approvals.resume_entry(decision)
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


# -- an approval runs at most once ------------------------------------------------------------


@asynccontextmanager
async def refund_agent(ran: list[dict[str, Any]]) -> AsyncIterator[str]:
    """The AG-UI agent on loopback: it runs ``refund_order`` when a resume approves it (and
    records each run in ``ran``), answering with the resumed run's events over SSE."""
    encoder = EventEncoder()

    async def run(request: web.Request) -> web.StreamResponse:
        run_input = RunAgentInput.model_validate_json(await request.text())
        [entry] = [e for e in run_input.resume or () if e.interrupt_id == INTERRUPT_ID]
        events: list[BaseEvent] = [RunStartedEvent(thread_id=THREAD, run_id=run_input.run_id)]
        payload = entry.payload if isinstance(entry.payload, dict) else {}
        if entry.status == "resolved" and payload.get("approved") is True:
            ran.append(ARGS)
            events.append(
                ToolCallResultEvent(message_id="m-2", tool_call_id=CALL_ID, content="refunded")
            )
        events.append(RunFinishedEvent(thread_id=THREAD, run_id=run_input.run_id))
        body = "".join(encoder.encode(event) for event in events)
        return web.Response(text=body, content_type="text/event-stream")

    app = web.Application()
    app.router.add_post("/agent", run)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/agent"
    finally:
        await runner.cleanup()


async def resumed_run(agent_url: str, run_input: RunAgentInput) -> list[dict[str, Any]]:
    """POST the resume to the agent; the resumed run's events, as the client reads them."""
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            agent_url,
            data=run_input.model_dump_json(by_alias=True),
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        ) as response,
    ):
        text = await response.text()
    return [
        json.loads(line.removeprefix("data: "))
        for line in text.splitlines()
        if line.startswith("data: ")
    ]


async def test_two_clients_resume_the_same_pause_and_the_tool_runs_once(
    harness: Harness, tmp_path: Path
) -> None:
    ran: list[dict[str, Any]] = []
    wire = over_the_wire(run_events())
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(wire), "utf-8")
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs, refund_agent(ran) as url:
        [(_, submitted)] = await AgUiApprovals(cs, requester=REQUESTER_ID).submit_run(wire)
        await refused_then_decided(harness, CALL_ID, requester=REQUESTER, approver=APPROVER)
        # two client processes resume the same interrupted run, at the same time
        told = await resume_in_two_processes(
            {
                "framework": "ag-ui",
                "base_url": harness.base_url,
                "approval_id": submitted.approval_id,
                "saved": str(saved),
                "agent_url": url,
                "ran": str(tmp_path / "ran.jsonl"),
            },
            tmp_path,
        )
        after = await cs.get(submitted.approval_id)
    assert ran == [ARGS]  # the agent ran the tool exactly once
    payloads = sorted((json.loads(t) for t in told), key=lambda p: not p["approved"])
    assert payloads[0] == {"approved": True}
    assert payloads[1]["approved"] is False
    assert payloads[1]["reason"].startswith(ALREADY_EXECUTED)  # the agent reads why
    assert after.execution is not None
    assert after.execution.outcome is not None
    assert after.execution.outcome.status == "ok"  # from the resumed run's TOOL_CALL_RESULT


async def test_a_resume_after_valid_for_is_not_approved_and_says_why(harness: Harness) -> None:
    ran: list[dict[str, Any]] = []
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs, refund_agent(ran) as url:
        approvals = AgUiApprovals(cs, requester=REQUESTER_ID)
        [(_, submitted)] = await approvals.submit_run(over_the_wire(run_events()))
        waiter = asyncio.create_task(cs.wait(submitted.approval_id, timeout=20))
        await refused_then_decided(harness, CALL_ID, requester=REQUESTER, approver=APPROVER)
        decision = await waiter
        assert decision.approved
        harness.clock.advance(900 + 2)  # the rule's valid_for is the default, 900 s
        entry = await approvals.resume_entry(decision)
        run_input = approvals.resume_input(THREAD, run_id="run-2", others=[form_answer()])
        await approvals.report_run(await resumed_run(url, run_input))
        after = await cs.get(submitted.approval_id)
    assert ran == []
    assert entry.status == "resolved"
    assert isinstance(entry.payload, dict)
    assert entry.payload["approved"] is False
    assert entry.payload["reason"].startswith(LAPSED)
    assert after.execution is None


@pytest.fixture
async def editable(database_url: str, tmp_path: Path) -> AsyncIterator[Harness]:
    """The bot with a rule letting reviewers edit refund_order's amount."""
    async with editing_bot(database_url, tmp_path, "refund_order", ["amount.value"]) as harness:
        yield harness


async def test_an_edited_call_is_refused_and_its_call_again_runs_once_as_edited(
    editable: Harness,
) -> None:
    """The agent would run the arguments it recorded: approved with an edit, the resume entry
    is not approved, and its reason gives the exact arguments a reviewer approved. The agent's
    next run calls again with exactly those: approved at once on the editor's decision (no
    second card), claimed once; the original can no longer run."""
    harness = editable
    edited = {"order": "ord-1042", "amount": {"value": 100, "currency": "EUR"}}
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        approvals = AgUiApprovals(cs, requester=REQUESTER_ID)
        [(_, submitted)] = await approvals.submit_run(over_the_wire(run_events()))
        waiter = asyncio.create_task(cs.wait(submitted.approval_id, timeout=20))
        approval_id = await card_for_call(harness, CALL_ID)
        status, answer = await edit_and_approve(
            harness, APPROVER, approval_id, **{"amount.value": "100"}
        )
        assert (status, answer) == (200, "")
        decision = await waiter
        assert decision.edit is not None
        entry = await approvals.resume_entry(decision)
        assert entry.status == "resolved"
        assert isinstance(entry.payload, dict)
        assert entry.payload["approved"] is False
        reason = entry.payload["reason"]
        assert "approved this call in Countersign only with changed arguments" in reason
        assert '{"amount":{"currency":"EUR","value":100},"order":"ord-1042"}' in reason
        # the next run calls again with exactly the edited arguments
        run2 = run_events("run-2", "tc-refund-1042b", "int-refund-1042b", edited, form=False)
        [(_, again)] = await approvals.submit_run(over_the_wire(run2))
        assert (again.status, again.edit_of) == ("approved", approval_id)
        entry2 = await approvals.resume_entry(again)
        after = await cs.get(approval_id)
        recall = await cs.get(again.approval_id)
    assert isinstance(entry2.payload, dict)
    assert (entry2.interrupt_id, entry2.payload["approved"]) == ("int-refund-1042b", True)
    assert after.execution is None  # the original never runs
    assert after.edit is not None
    assert after.edit.called_again_as == again.approval_id
    assert recall.execution is not None  # the call again, claimed once
    messages = harness.standin.messages.get(CHANNEL, [])
    assert not any("(call tc-refund-1042b)" in json.dumps(m.get("blocks")) for m in messages)
