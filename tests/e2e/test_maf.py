"""Microsoft Agent Framework end to end: a real ``Agent`` with a tool that always requires
approval, a scripted chat client (no LLM), the real bot and the Slack stand-in."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from agent_framework import (
    Agent,
    AgentResponse,
    AgentSession,
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    FunctionTool,
    Message,
    tool,
)

from countersign_client import (
    Approval,
    BindingMismatch,
    CallbackVerifier,
    CountersignClient,
    arguments_sha256,
)
from countersign_client.adapters.maf import NOT_EXECUTED, MafApprovals
from countersign_client.execution import ALREADY_EXECUTED, LAPSED
from tests.e2e.resumer import resume_in_two_processes, runs
from tests.e2e.reviewer import card_for_call
from tests.support.edit_form import edit_and_approve, editing_bot
from tests.support.harness import (
    AGENT_TOKEN,
    APPROVER,
    CALLBACK_SECRET,
    CHANNEL,
    REQUESTER,
    Harness,
)

pytestmark = pytest.mark.e2e

REQUESTER_ID = {"slack_user_id": REQUESTER.id, "email": REQUESTER.email, "name": "Rita"}
ARGS = {"service": "api", "version": "1.2.3"}
REASON = "too risky on a Friday"  # typed into the Deny modal
OTHER = {"service": "web", "version": "2.0"}
SESSION = "maf-thread-1"


class ScriptedChatClient(
    FunctionInvocationLayer[Any], ChatMiddlewareLayer[Any], BaseChatClient[Any]
):
    """A chat client that answers from a script and records every input the model was given
    (layered like MAF's own clients: function invocation, then chat middleware)."""

    def __init__(self, script: Sequence[Message]) -> None:
        super().__init__()
        self.script = list(script)
        self.seen: list[list[dict[str, Any]]] = []

    def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Mapping[str, Any], **_: Any
    ) -> Awaitable[ChatResponse[Any]]:
        assert not stream
        self.seen.append([message.to_dict() for message in messages])

        async def answer() -> ChatResponse[Any]:
            return ChatResponse(messages=[self.script.pop(0)], response_id=f"r{len(self.seen)}")

        return answer()


def calls_deploy(*call_ids: str, arguments: tuple[dict[str, str], ...] = (ARGS,)) -> Message:
    """The model's turn: one ``deploy`` call per id (the n-th with the n-th arguments); no
    ``Content.id``, so the framework mints the request ids."""
    calls = [
        Content.from_function_call(call_id=c, name="deploy", arguments=json.dumps(a))
        for c, a in zip(call_ids, arguments, strict=True)
    ]
    return Message("assistant", calls)


def deploy_tool(ran: list[dict[str, str]]) -> FunctionTool:
    @tool(name="deploy", approval_mode="always_require")
    def deploy(service: str, version: str) -> str:
        """Deploy ``service`` at ``version``."""
        ran.append({"service": service, "version": version})
        return f"deployed {service} {version}"

    return deploy


def build_agent(model: ScriptedChatClient, ran: list[dict[str, str]]) -> Agent[Any]:
    return Agent(client=model, tools=[deploy_tool(ran)], name="ops-bot")


async def pause(agent: Agent[Any], session: AgentSession) -> AgentResponse[Any]:
    paused = await agent.run("Deploy api 1.2.3", session=session)
    assert [r.type for r in paused.user_input_requests] == ["function_approval_request"]
    return paused


async def decide(harness: Harness, call_id: str, action: str = "countersign_approve") -> float:
    """The requester's click is refused, then the approver's counts (a Deny is submitted in its
    modal with REASON); when the approver clicked."""
    approval_id = await card_for_call(harness, call_id)
    refused = len(harness.ephemerals_for(REQUESTER))
    await harness.click(REQUESTER, approval_id, action, reason=REASON)
    why = (await harness.wait_ephemeral(REQUESTER, refused + 1))[-1]
    assert "you requested this call" in why
    clicked = time.perf_counter()
    await harness.click(APPROVER, approval_id, action, reason=REASON)
    return clicked


def report(what: str, pause_to_card: float, click_to_resumed: float) -> None:
    print(
        f"\n[maf] {what}: pause→card {pause_to_card * 1000:.0f} ms, "
        f"click→agent resumed {click_to_resumed * 1000:.0f} ms"
    )


def cards(harness: Harness) -> list[dict[str, Any]]:
    return list(harness.standin.messages.get(CHANNEL, []))


def contents(seen: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [content for message in seen for content in message["contents"]]


async def test_approve_resumes_the_session_with_the_original_arguments(harness: Harness) -> None:
    ran: list[dict[str, str]] = []
    model = ScriptedChatClient([calls_deploy("call_maf_1"), Message("assistant", ["Deployed."])])
    agent = build_agent(model, ran)
    session = agent.create_session(session_id=SESSION)
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = MafApprovals(cs, requester=REQUESTER_ID)
        paused = await pause(agent, session)
        paused_at = time.perf_counter()
        [request] = paused.user_input_requests
        [pending] = await adapter.submit(paused, session, summary="Deploy api 1.2.3")
        assert ran == []
        # the framework-minted request id, not the model's call_id
        assert pending.request_id == request.id != "call_maf_1"
        assert (pending.session_id, pending.tool.call_id) == (SESSION, "call_maf_1")
        assert pending.tool.arguments == ARGS
        assert pending.arguments_sha256 == arguments_sha256(ARGS)
        waiter = asyncio.create_task(cs.wait(pending.approval_id, timeout=20))
        await card_for_call(harness, "call_maf_1")
        card_at = time.perf_counter()
        clicked = await decide(harness, "call_maf_1")
        decision = await waiter
        assert decision.approved
        result = await adapter.resume(agent, decision, session)
        resumed = time.perf_counter()
    assert ran == [ARGS]
    assert result.text == "Deployed."
    [result_seen] = [c for c in contents(model.seen[-1]) if c["type"] == "function_result"]
    assert result_seen["call_id"] == "call_maf_1"
    assert result_seen["result"] == "deployed api 1.2.3"
    report("approve", card_at - paused_at, resumed - clicked)


async def test_deny_never_runs_the_tool_and_the_model_reads_the_reason(harness: Harness) -> None:
    ran: list[dict[str, str]] = []
    model = ScriptedChatClient(
        [calls_deploy("call_maf_2"), Message("assistant", ["Understood, not deploying."])]
    )
    agent = build_agent(model, ran)
    session = agent.create_session(session_id=SESSION)
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = MafApprovals(cs, requester=REQUESTER_ID)
        [pending] = await adapter.submit(await pause(agent, session), session)
        waiter = asyncio.create_task(cs.wait(pending.approval_id, timeout=20))
        await decide(harness, "call_maf_2", "countersign_deny")
        decision = await waiter
        result = await adapter.resume(agent, decision, session)
    assert decision.status == "denied"
    assert decision.reason is not None
    assert REASON in decision.reason
    assert ran == []
    assert result.text == "Understood, not deploying."
    # the function result the model reads for the call carries the approver's reason
    [rejected] = [c for c in contents(model.seen[-1]) if c["type"] == "function_result"]
    assert rejected["call_id"] == "call_maf_2"
    assert decision.reason in rejected["result"]
    assert rejected["result"].endswith(NOT_EXECUTED)
    assert [item["text"] for item in rejected["items"]] == [rejected["result"]]
    # ... and it stays in the session's history for later turns
    history = json.dumps(session.to_dict())
    assert decision.reason in history
    assert "rejected by user" not in history


async def test_two_calls_in_one_turn_run_on_once_both_are_decided(harness: Harness) -> None:
    ran: list[dict[str, str]] = []
    turn = calls_deploy("call_maf_5a", "call_maf_5b", arguments=(ARGS, OTHER))
    model = ScriptedChatClient([turn, Message("assistant", ["One of two deployed."])])
    agent = build_agent(model, ran)
    session = agent.create_session(session_id=SESSION)
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = MafApprovals(cs, requester=REQUESTER_ID)
        pending = await adapter.submit(await agent.run("Deploy both", session=session), session)
        by_call = {approval.tool.call_id: approval.approval_id for approval in pending}
        decisions = []
        for call_id, action in (("call_maf_5a", "countersign_deny"), ("call_maf_5b", "")):
            waiter = asyncio.create_task(cs.wait(by_call[call_id], timeout=20))
            await decide(harness, call_id, action or "countersign_approve")
            decisions.append(await waiter)
        # MAF holds the batch until every request of it is answered, then runs it
        waiting = await adapter.resume(agent, decisions[0], session)
        assert [
            r.function_call.call_id for r in waiting.user_input_requests if r.function_call
        ] == ["call_maf_5b"]
        assert ran == []
        done = await adapter.resume(agent, decisions[1], session)
    assert done.text == "One of two deployed."
    assert ran == [OTHER]
    denied, deployed = [c for c in contents(model.seen[-1]) if c["type"] == "function_result"]
    assert denied["call_id"] == "call_maf_5a"
    assert str(decisions[0].reason) in denied["result"]
    assert (deployed["call_id"], deployed["result"]) == ("call_maf_5b", "deployed web 2.0")


async def test_tampered_decisions_are_refused(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[dict[str, str]] = []
    model = ScriptedChatClient([calls_deploy("call_maf_3"), Message("assistant", ["ok"])])
    agent = build_agent(model, ran)
    session = agent.create_session(session_id=SESSION)
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = MafApprovals(cs, requester=REQUESTER_ID)
        [pending] = await adapter.submit(await pause(agent, session), session)
        waiter = asyncio.create_task(cs.wait(pending.approval_id, timeout=20))
        await decide(harness, "call_maf_3")
        decision = await waiter

        def with_tool(**update: Any) -> Approval:
            return decision.model_copy(update={"tool": decision.tool.model_copy(update=update)})

        tampered = (
            with_tool(call_id="call_x"),
            decision.model_copy(update={"session_id": "another-thread"}),
            decision.model_copy(update={"request_id": "call_maf_3"}),  # the model's call id
            decision.model_copy(update={"approval_id": "apr_forged"}),
            decision.model_copy(update={"arguments_sha256": arguments_sha256({"version": "9"})}),
            # the echoed arguments changed under an intact hash: still refused, never run
            with_tool(arguments={**ARGS, "version": "9"}),
            with_tool(name="delete_everything"),
            decision.model_copy(update={"resume": {**(decision.resume or {}), "approved": False}}),
        )
        for forged in tampered:
            with caplog.at_level(logging.WARNING), pytest.raises(BindingMismatch):
                await adapter.resume(agent, forged, session)
        assert ran == []
        assert len([r for r in caplog.records if "decision refused" in r.message]) == len(tampered)
        assert adapter.pending(session) == [decision.approval_id]
        # the request is still pending: the genuine decision resumes it, once
        await adapter.resume(agent, decision, session)
        assert ran == [ARGS]
        with pytest.raises(BindingMismatch):
            await adapter.resume(agent, decision, session)
    assert ran == [ARGS]


async def test_the_agent_process_restarts_between_pause_and_decision(harness: Harness) -> None:
    async def first_process() -> tuple[str, str, weakref.ref[Agent[Any]], float]:
        ran: list[dict[str, str]] = []
        agent = build_agent(ScriptedChatClient([calls_deploy("call_maf_4")]), ran)
        session = agent.create_session(session_id=SESSION)
        async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
            adapter = MafApprovals(cs, requester=REQUESTER_ID, callback_url=harness.receiver.url)
            paused = await pause(agent, session)
            paused_at = time.perf_counter()
            [pending] = await adapter.submit(paused, session)
        assert ran == []
        return json.dumps(session.to_dict()), pending.approval_id, weakref.ref(agent), paused_at

    saved, approval_id, first_agent, paused_at = await first_process()
    gc.collect()
    assert first_agent() is None  # nothing of the first process is left but the saved session
    await card_for_call(harness, "call_maf_4")
    card_at = time.perf_counter()
    clicked = await decide(harness, "call_maf_4")

    # the second process: the callback arrives, the agent and its session are rebuilt
    [received] = await harness.receiver.wait_delivered(1)
    headers = {
        "Countersign-Signature": received.signature,
        "Idempotency-Key": received.idempotency_key,
    }
    decision = CallbackVerifier(CALLBACK_SECRET).verify(received.body, headers)
    assert decision.approval_id == approval_id
    ran: list[dict[str, str]] = []
    model = ScriptedChatClient([Message("assistant", ["Deployed after a restart."])])
    agent = build_agent(model, ran)
    session = AgentSession.from_dict(json.loads(saved))
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = MafApprovals(cs, requester=REQUESTER_ID)
        assert adapter.pending(session) == [approval_id]
        result = await adapter.resume(agent, decision, session)
        assert adapter.pending(session) == []
    resumed = time.perf_counter()
    assert ran == [ARGS]
    assert result.text == "Deployed after a restart."
    report("restart (callback)", card_at - paused_at, resumed - clicked)


# -- an approval runs at most once ------------------------------------------------------------


async def test_two_processes_resume_the_same_pause_and_the_tool_runs_once(
    harness: Harness, tmp_path: Path
) -> None:
    agent = build_agent(ScriptedChatClient([calls_deploy("call_maf_6")]), [])
    session = agent.create_session(session_id=SESSION)
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        [pending] = await MafApprovals(cs, requester=REQUESTER_ID).submit(
            await pause(agent, session), session
        )
        saved = tmp_path / "session.json"
        saved.write_text(json.dumps(session.to_dict()), "utf-8")
        await decide(harness, "call_maf_6")
        # two workers pick up the same saved session and decision, at the same time
        told = await resume_in_two_processes(
            {
                "framework": "maf",
                "base_url": harness.base_url,
                "approval_id": pending.approval_id,
                "saved": str(saved),
                "ran": str(tmp_path / "ran.jsonl"),
            },
            tmp_path,
        )
        after = await cs.get(pending.approval_id)
    assert runs(tmp_path / "ran.jsonl") == [ARGS]  # exactly once, across both processes
    ran_here, refused = sorted(told, key=lambda text: text.startswith(ALREADY_EXECUTED))
    assert ran_here == "deployed api 1.2.3"
    assert refused.startswith(ALREADY_EXECUTED)  # the other model reads that it ran elsewhere
    assert after.execution is not None
    assert after.execution.outcome is not None
    assert after.execution.outcome.status == "ok"
    assert after.execution.claim_id in refused


async def test_a_resume_after_valid_for_does_not_run_and_the_model_reads_why(
    harness: Harness,
) -> None:
    ran: list[dict[str, str]] = []
    model = ScriptedChatClient([calls_deploy("call_maf_7"), Message("assistant", ["I'll ask."])])
    agent = build_agent(model, ran)
    session = agent.create_session(session_id=SESSION)
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = MafApprovals(cs, requester=REQUESTER_ID)
        [pending] = await adapter.submit(await pause(agent, session), session)
        waiter = asyncio.create_task(cs.wait(pending.approval_id, timeout=20))
        await decide(harness, "call_maf_7")
        decision = await waiter
        assert decision.valid_until is not None
        harness.clock.advance(900 + 2)  # the rule's valid_for is the default, 900 s
        result = await adapter.resume(agent, decision, session)
        after = await cs.get(pending.approval_id)
    assert ran == []
    assert result.text == "I'll ask."
    [told] = [c for c in contents(model.seen[-1]) if c["type"] == "function_result"]
    assert told["call_id"] == "call_maf_7"
    assert told["result"].startswith(LAPSED)
    assert decision.valid_until.isoformat() in told["result"]
    assert after.execution is None


async def test_a_tool_that_raises_is_reported_as_an_error(harness: Harness) -> None:
    @tool(name="deploy", approval_mode="always_require")
    def deploy(service: str, version: str) -> str:
        """Deploy ``service`` at ``version``."""
        raise RuntimeError(f"secret-token-in-{service}")  # its text must not reach the card

    model = ScriptedChatClient([calls_deploy("call_maf_8"), Message("assistant", ["It failed."])])
    agent = Agent(client=model, tools=[deploy], name="ops-bot")
    session = agent.create_session(session_id=SESSION)
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = MafApprovals(cs, requester=REQUESTER_ID)
        [pending] = await adapter.submit(await pause(agent, session), session)
        waiter = asyncio.create_task(cs.wait(pending.approval_id, timeout=20))
        await decide(harness, "call_maf_8")
        result = await adapter.resume(agent, await waiter, session)
        after = await cs.get(pending.approval_id)
    assert result.text == "It failed."
    assert after.execution is not None
    assert after.execution.outcome is not None
    assert after.execution.outcome.status == "error"
    assert after.execution.outcome.detail == "raised RuntimeError"


async def test_an_approval_response_handled_once_is_refused_when_replayed() -> None:
    """The middleware remembers, in the session's state, which approval responses it claimed:
    the same response again (a resume replayed in this session) does not run the tool, even
    where MAF itself would invoke it."""
    from types import SimpleNamespace
    from typing import cast

    from agent_framework import FunctionInvocationContext

    from countersign_client.adapters import maf

    ran: list[str] = []

    async def call_next() -> None:
        ran.append("ran")

    middleware = maf._RunOnce(cast(Any, None), approved={}, handled=["req-1"])
    context = SimpleNamespace(
        metadata={"approval_response": SimpleNamespace(id="req-1")}, result=None
    )
    await middleware.process(cast(FunctionInvocationContext, context), call_next)
    assert (ran, context.result) == ([], maf.HANDLED_ALREADY)
    # a response Countersign never handled (not one of its approvals) runs as MAF decides
    other = SimpleNamespace(
        metadata={"approval_response": SimpleNamespace(id="req-2")}, result=None
    )
    await middleware.process(cast(FunctionInvocationContext, other), call_next)
    assert ran == ["ran"]


@pytest.fixture
async def editable(database_url: str, tmp_path: Path) -> AsyncIterator[Harness]:
    """The bot with a rule letting reviewers edit deploy's version."""
    async with editing_bot(database_url, tmp_path, "deploy", ["version"]) as harness:
        yield harness


async def test_an_edited_call_runs_once_as_edited_when_the_model_calls_again(
    editable: Harness,
) -> None:
    """MAF runs the call it recorded: approved with an edit, the call is refused (never run
    with the requested arguments), and its result tells the model the exact arguments a
    reviewer approved. The model's call again with exactly those is approved at once on the
    editor's decision (no second card) and runs once, as edited."""
    harness = editable
    ran: list[dict[str, str]] = []
    edited = {"service": "api", "version": "1.2.4"}
    model = ScriptedChatClient(
        [
            calls_deploy("call_maf_e"),
            calls_deploy("call_maf_e2", arguments=(edited,)),
            Message("assistant", ["Deployed 1.2.4, as the reviewer changed it."]),
        ]
    )
    agent = build_agent(model, ran)
    session = agent.create_session(session_id=SESSION)
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = MafApprovals(cs, requester=REQUESTER_ID)
        [pending] = await adapter.submit(await pause(agent, session), session)
        waiter = asyncio.create_task(cs.wait(pending.approval_id, timeout=20))
        approval_id = await card_for_call(harness, "call_maf_e")
        status, answer = await edit_and_approve(harness, APPROVER, approval_id, version="1.2.4")
        assert (status, answer) == (200, "")
        decision = await waiter
        assert decision.approved
        assert decision.edit is not None
        again = await adapter.resume(agent, decision, session)
        assert ran == []  # refused: the requested 1.2.3 never runs
        [refused] = [c for c in contents(model.seen[-1]) if c["type"] == "function_result"]
        assert refused["call_id"] == "call_maf_e"
        assert "approved this call in Countersign only with changed arguments" in refused["result"]
        assert '{"service":"api","version":"1.2.4"}' in refused["result"]
        # the model called again with exactly the edited arguments: approved at once
        [pending2] = await adapter.submit(again, session)
        decision2 = await cs.wait(pending2.approval_id, timeout=10)
        assert (decision2.approved, decision2.edit_of) == (True, approval_id)
        assert decision2.decided_by[0].slack_user_id == APPROVER.id
        result = await adapter.resume(agent, decision2, session)
        original = await cs.get(approval_id)
    assert ran == [edited]  # once, as edited
    assert result.text == "Deployed 1.2.4, as the reviewer changed it."
    assert original.execution is None
    assert original.edit is not None
    assert original.edit.called_again_as == decision2.approval_id
    [ok] = [
        c
        for c in contents(model.seen[-1])
        if c["type"] == "function_result" and c["call_id"] == "call_maf_e2"
    ]
    assert ok["result"] == "deployed api 1.2.4"
    assert not any("(call call_maf_e2)" in json.dumps(m.get("blocks")) for m in cards(harness))
