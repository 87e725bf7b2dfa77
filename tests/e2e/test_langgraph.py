"""LangGraph end to end through the real bot: LangChain's HumanInTheLoopMiddleware (per-call)
and a raw ``interrupt()`` node, each with a scripted chat model (no LLM) and a real tool."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any, Literal

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain.agents.middleware.human_in_the_loop import DecisionType
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import interrupt
from pydantic import Field

from countersign_client import Approval, BindingMismatch, CountersignClient
from countersign_client.adapters.langgraph import (
    NOT_EXECUTED,
    LangGraphApprovals,
    tool_approval_request,
)
from countersign_client.execution import ALREADY_EXECUTED, LAPSED
from tests.e2e.resumer import resume_in_two_processes, runs
from tests.e2e.reviewer import card_for_call, refused_then_decided
from tests.support.edit_form import edit_and_approve, editing_bot
from tests.support.harness import AGENT_TOKEN, APPROVER, CHANNEL, REQUESTER, Harness

Kind = Literal["hitl", "raw"]
Graph = CompiledStateGraph[Any, Any, Any, Any]

REQUESTER_ID = {"slack_user_id": REQUESTER.id, "email": REQUESTER.email, "name": "Rita"}
CALL_ID = "call-deploy-1"
ARGS: dict[str, Any] = {
    "service": "billing-api",
    "version": "2.4.1",
    "regions": ["eu-west-1", "us-east-1"],
    "canary_percent": 10,
}
PROMPT = "Ship billing-api 2.4.1 to eu-west-1 and us-east-1, 10% canary."


class ScriptedModel(BaseChatModel):
    """A chat model that answers from a script and records every input it was given.

    The reply is chosen by how many AI turns the conversation already holds, so a model
    rebuilt after a restart carries on where the checkpoint left off.
    """

    script: list[AIMessage]
    inputs: list[list[BaseMessage]] = Field(default_factory=list)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.inputs.append(list(messages))
        turn = sum(isinstance(m, AIMessage) for m in messages)
        return ChatResult(generations=[ChatGeneration(message=self.script[turn])])

    def bind_tools(
        self,
        tools: Sequence[Any],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self

    @property
    def _llm_type(self) -> str:
        return "scripted"


def scripted_model(*again: dict[str, Any]) -> ScriptedModel:
    """The model calls deploy_service with ARGS, then (after each result) with each of
    ``again`` (ids call-deploy-2, …), then says it is done."""
    calls = [dict(ARGS), *again]
    return ScriptedModel(
        script=[
            *(
                AIMessage(
                    content="",
                    tool_calls=[{"name": "deploy_service", "args": a, "id": f"call-deploy-{n}"}],
                )
                for n, a in enumerate(calls, start=1)
            ),
            AIMessage(content="Done."),
        ],
        inputs=[],
    )


@dataclass
class Ledger:
    """The tool's side effects, kept outside any graph (they survive a "restart")."""

    calls: list[dict[str, Any]] = dataclass_field(default_factory=list)
    at: list[float] = dataclass_field(default_factory=list)

    def tool(self) -> BaseTool:
        @tool
        def deploy_service(
            service: str, version: str, regions: list[str], canary_percent: int
        ) -> str:
            """Deploy a version of a service to some regions."""
            self.at.append(time.perf_counter())
            self.calls.append(
                {
                    "service": service,
                    "version": version,
                    "regions": regions,
                    "canary_percent": canary_percent,
                }
            )
            return f"deployed {service} {version}"

        return deploy_service


def hitl_agent(
    model: ScriptedModel,
    ledger: Ledger,
    checkpointer: BaseCheckpointSaver[Any],
    allowed: tuple[DecisionType, ...] = ("approve", "reject"),
) -> Graph:
    """``create_agent`` with HumanInTheLoopMiddleware gating the tool, one interrupt per call."""
    gate = HumanInTheLoopMiddleware(
        interrupt_on={"deploy_service": {"allowed_decisions": list(allowed)}},
        interrupt_mode="per_call",
    )
    return create_agent(model, tools=[ledger.tool()], middleware=[gate], checkpointer=checkpointer)


def raw_graph(
    model: ScriptedModel, ledger: Ledger, checkpointer: BaseCheckpointSaver[Any]
) -> Graph:
    """A hand-built graph: model → gate (a raw ``interrupt()``, then the tool) → model."""
    deploy = ledger.tool()

    def call_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    def gate(state: MessagesState) -> dict[str, list[BaseMessage]]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        [call] = last.tool_calls
        decision = interrupt(tool_approval_request(call, "Deploy to production"))
        if decision["type"] == "approve":
            content = str(deploy.invoke(call["args"]))
            return {"messages": [ToolMessage(content, tool_call_id=call["id"], name=call["name"])]}
        message = ToolMessage(decision["message"], tool_call_id=call["id"], status="error")
        return {"messages": [message]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "gate" if isinstance(last, AIMessage) and last.tool_calls else END

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_node("gate", gate)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["gate", END])
    builder.add_edge("gate", "model")
    return builder.compile(checkpointer=checkpointer)


BUILD: dict[Kind, Callable[[ScriptedModel, Ledger, BaseCheckpointSaver[Any]], Graph]] = {
    "hitl": hitl_agent,
    "raw": raw_graph,
}
KINDS: list[Kind] = ["hitl", "raw"]


def config_for(kind: Kind) -> RunnableConfig:
    return {"configurable": {"thread_id": f"thread-{kind}-1"}}


def start() -> dict[str, list[BaseMessage]]:
    return {"messages": [HumanMessage(PROMPT)]}


def report(capsys: pytest.CaptureFixture[str], kind: Kind, card: float, resumed: float) -> None:
    with capsys.disabled():
        print(
            f"\n[langgraph {kind}] pause → card visible {card * 1000:.0f} ms · "
            f"click → graph resumed (tool running) {resumed * 1000:.0f} ms"
        )


def tool_messages(messages: Sequence[BaseMessage]) -> list[str]:
    return [str(m.content) for m in messages if isinstance(m, ToolMessage)]


@pytest.mark.parametrize("kind", KINDS)
async def test_approve_runs_the_original_arguments_and_tampering_is_refused(
    harness: Harness, kind: Kind, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger, model, config = Ledger(), scripted_model(), config_for(kind)
    graph = BUILD[kind](model, ledger, InMemorySaver())
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = LangGraphApprovals(cs, requester=REQUESTER_ID)
        await graph.ainvoke(start(), config)
        paused = time.perf_counter()
        [(call, submitted)] = await adapter.submit_pending(graph, config)
        assert (call.tool, call.call_id, call.arguments) == ("deploy_service", CALL_ID, ARGS)
        assert submitted.request_id == call.interrupt_id
        assert submitted.session_id == "thread-" + kind + "-1"
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
        assert decision.approved

        for field_name, tampered in tamperings(decision):
            with pytest.raises(BindingMismatch) as refused:
                await adapter.resume_command(graph, config, tampered)
            assert refused.value.field == field_name
        assert ledger.calls == []  # nothing ran on a refused decision

        resuming = time.perf_counter()
        command = await adapter.resume_command(graph, config, decision)
        assert command.resume == {call.interrupt_id: {"type": "approve"}}
        result = await graph.ainvoke(command, config)
        assert ledger.calls == [ARGS]  # exactly the arguments the model asked for
        assert result["messages"][-1].content == "Done."

        # the same decision again: its interrupt is no longer pending in this thread
        with pytest.raises(BindingMismatch) as replayed:
            await adapter.resume_command(graph, config, decision)
        assert replayed.value.field == "request_id"
    assert ledger.calls == [ARGS]
    # click → resumed, leaving out the time spent on the tampered decisions above
    report(capsys, kind, card_seen - paused, (decided - clicked) + (ledger.at[0] - resuming))


def tamperings(decision: Approval) -> list[tuple[str, Approval]]:
    """The decision with one echoed field changed at a time (and the field that must catch it)."""
    tool = decision.tool
    return [
        ("approval_id", decision.model_copy(update={"approval_id": "apr_" + "0" * 24})),
        ("request_id", decision.model_copy(update={"request_id": "0" * 32})),
        ("session_id", decision.model_copy(update={"session_id": "thread-other"})),
        (
            "tool.call_id",
            decision.model_copy(update={"tool": tool.model_copy(update={"call_id": "call-2"})}),
        ),
        (
            "arguments_sha256",
            decision.model_copy(update={"arguments_sha256": "0" * 64}),
        ),
        (
            "tool.arguments",
            decision.model_copy(
                update={"tool": tool.model_copy(update={"arguments": {**ARGS, "regions": []}})}
            ),
        ),
        (
            "tool.name",
            decision.model_copy(update={"tool": tool.model_copy(update={"name": "rollback"})}),
        ),
    ]


@pytest.mark.parametrize("kind", KINDS)
async def test_deny_skips_the_tool_and_the_model_reads_the_reason(
    harness: Harness, kind: Kind
) -> None:
    ledger, model, config = Ledger(), scripted_model(), config_for(kind)
    graph = BUILD[kind](model, ledger, InMemorySaver())
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = LangGraphApprovals(cs, requester=REQUESTER_ID)
        await graph.ainvoke(start(), config)
        [(_, submitted)] = await adapter.submit_pending(graph, config)
        waiter = asyncio.create_task(cs.wait(submitted.approval_id, timeout=20))
        await refused_then_decided(
            harness, CALL_ID, requester=REQUESTER, approver=APPROVER, action="countersign_deny"
        )
        decision = await waiter
        assert decision.status == "denied"
        assert decision.reason
        await graph.ainvoke(await adapter.resume_command(graph, config, decision), config)
    assert ledger.calls == []
    [told] = tool_messages(model.inputs[-1])  # the model's next input
    assert decision.reason in told
    assert NOT_EXECUTED in told
    assert model.inputs[-1][-1].content == told


@asynccontextmanager
async def checkpointer(path: str, *, sync: bool) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """A persistent checkpointer on ``path``: SqliteSaver (sync) or AsyncSqliteSaver."""
    if sync:
        with SqliteSaver.from_conn_string(path) as saver:
            yield saver
    else:
        async with AsyncSqliteSaver.from_conn_string(path) as async_saver:
            yield async_saver


async def invoke(graph: Graph, value: Any, config: RunnableConfig, *, sync: bool) -> Any:
    """Run the graph; a sync checkpointer means the sync API, in a worker thread."""
    if sync:
        return await asyncio.to_thread(graph.invoke, value, config)
    return await graph.ainvoke(value, config)


@pytest.mark.parametrize("kind", KINDS)
async def test_restart_between_pause_and_decision_resumes_from_the_checkpoint(
    harness: Harness, kind: Kind, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """HITL on AsyncSqliteSaver; the raw graph on the sync SqliteSaver (run in a thread)."""
    path, sync = str(tmp_path / "checkpoints.sqlite"), kind == "raw"
    ledger, config = Ledger(), config_for(kind)

    # process 1: run to the interrupt, submit, then drop everything
    async with (
        CountersignClient(harness.base_url, AGENT_TOKEN) as cs,
        checkpointer(path, sync=sync) as saver,
    ):
        graph = BUILD[kind](scripted_model(), ledger, saver)
        await invoke(graph, start(), config, sync=sync)
        adapter = LangGraphApprovals(cs, requester=REQUESTER_ID)
        [(before, submitted)] = await adapter.submit_pending(graph, config)
    del graph, adapter, saver

    # the approver decides while the agent is down
    await refused_then_decided(harness, CALL_ID, requester=REQUESTER, approver=APPROVER)

    # process 2: a new graph, checkpointer, model, client and adapter, from the file alone
    model = scripted_model()
    async with (
        CountersignClient(harness.base_url, AGENT_TOKEN) as cs,
        checkpointer(path, sync=sync) as saver,
    ):
        graph = BUILD[kind](model, ledger, saver)
        adapter = LangGraphApprovals(cs, requester=REQUESTER_ID)
        [after] = await adapter.pending(graph, config)
        assert after == before  # same interrupt id, call and arguments, from the file
        decision = await cs.wait(submitted.approval_id, timeout=20)
        assert decision.approved
        started = time.perf_counter()
        # the fresh adapter learns the approval id by submitting again (idempotent); resume
        # runs the graph on (a sync checkpointer: in a thread) and reports the outcome
        await adapter.resume(graph, config, decision)
        reported = await cs.get(submitted.approval_id)
    assert ledger.calls == [ARGS]
    assert model.inputs[-1][-1].content == "deployed billing-api 2.4.1"
    assert reported.execution is not None
    assert reported.execution.outcome is not None
    assert reported.execution.outcome.status == "ok"
    cards = [m for m in harness.standin.messages.get(CHANNEL, []) if CALL_ID in str(m)]
    assert len(cards) == 1  # submitting again made no second card
    with capsys.disabled():
        print(
            f"\n[langgraph {kind}] after restart: decision → tool running "
            f"{(ledger.at[0] - started) * 1000:.0f} ms"
        )


# -- an approval runs at most once ------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_two_processes_resume_the_same_pause_and_the_tool_runs_once(
    harness: Harness, kind: Kind, tmp_path: Path
) -> None:
    """Two workers share the checkpoint store (AsyncSqliteSaver on one file) and both read the
    paused thread before either resumes it: one claims and runs the tool, the other is refused
    with AlreadyClaimed and leaves the shared thread alone (a reject of its own could overtake
    the claimer's run)."""
    path, config = str(tmp_path / "checkpoints.sqlite"), config_for(kind)
    async with (
        CountersignClient(harness.base_url, AGENT_TOKEN) as cs,
        checkpointer(path, sync=False) as saver,
    ):
        graph = BUILD[kind](scripted_model(), Ledger(), saver)
        await graph.ainvoke(start(), config)
        [(_, submitted)] = await LangGraphApprovals(cs, requester=REQUESTER_ID).submit_pending(
            graph, config
        )
    await refused_then_decided(harness, CALL_ID, requester=REQUESTER, approver=APPROVER)
    told = await resume_in_two_processes(
        {
            "framework": "langgraph",
            "kind": kind,
            "base_url": harness.base_url,
            "approval_id": submitted.approval_id,
            "saved": path,
            "ran": str(tmp_path / "ran.jsonl"),
        },
        tmp_path,
    )
    assert runs(tmp_path / "ran.jsonl") == [ARGS], told  # exactly once, across both processes
    ran_here, refused = sorted(told, key=lambda text: ALREADY_EXECUTED in text)
    assert ran_here == "deployed billing-api 2.4.1"
    assert refused.startswith(ALREADY_EXECUTED)  # the other worker is told it ran elsewhere
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        after = await cs.get(submitted.approval_id)
    assert after.execution is not None
    assert after.execution.outcome is not None
    assert after.execution.outcome.status == "ok"


@pytest.mark.parametrize("kind", KINDS)
async def test_a_resume_after_valid_for_does_not_run_and_the_model_reads_why(
    harness: Harness, kind: Kind
) -> None:
    ledger, model, config = Ledger(), scripted_model(), config_for(kind)
    graph = BUILD[kind](model, ledger, InMemorySaver())
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = LangGraphApprovals(cs, requester=REQUESTER_ID)
        await graph.ainvoke(start(), config)
        [(call, submitted)] = await adapter.submit_pending(graph, config)
        waiter = asyncio.create_task(cs.wait(submitted.approval_id, timeout=20))
        await refused_then_decided(harness, CALL_ID, requester=REQUESTER, approver=APPROVER)
        decision = await waiter
        harness.clock.advance(900 + 2)  # the rule's valid_for is the default, 900 s
        command = await adapter.resume_command(graph, config, decision)
        assert command.resume is not None
        assert command.resume[call.interrupt_id]["type"] == "reject"
        await graph.ainvoke(command, config)
        after = await cs.get(submitted.approval_id)
    assert ledger.calls == []
    [told] = tool_messages(model.inputs[-1])  # the model's next input
    assert LAPSED in told
    assert after.execution is None


async def test_a_tool_that_raises_is_reported_as_an_error(harness: Harness) -> None:
    @tool
    def deploy_service(service: str, version: str, regions: list[str], canary_percent: int) -> str:
        """Deploy a version of a service to some regions."""
        raise RuntimeError(f"secret-token-in-{service}")  # its text must not reach the card

    gate = HumanInTheLoopMiddleware(
        interrupt_on={"deploy_service": {"allowed_decisions": ["approve", "reject"]}},
        interrupt_mode="per_call",
    )
    graph: Graph = create_agent(
        scripted_model(), tools=[deploy_service], middleware=[gate], checkpointer=InMemorySaver()
    )
    config = config_for("hitl")
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = LangGraphApprovals(cs, requester=REQUESTER_ID)
        await graph.ainvoke(start(), config)
        [(_, submitted)] = await adapter.submit_pending(graph, config)
        waiter = asyncio.create_task(cs.wait(submitted.approval_id, timeout=20))
        await refused_then_decided(harness, CALL_ID, requester=REQUESTER, approver=APPROVER)
        decision = await waiter
        with pytest.raises(RuntimeError):  # the tool node re-raises what the tool raised
            await adapter.resume(graph, config, decision)
        after = await cs.get(submitted.approval_id)
    assert after.execution is not None
    assert after.execution.outcome is not None
    assert after.execution.outcome.status == "error"
    assert "secret" not in after.execution.outcome.detail


EDITED: dict[str, Any] = {**ARGS, "version": "2.4.2", "canary_percent": 5}


@pytest.fixture
async def editable(database_url: str, tmp_path: Path) -> AsyncIterator[Harness]:
    """The bot with a rule letting reviewers edit deploy_service's version and canary."""
    async with editing_bot(
        database_url, tmp_path, "deploy_service", ["version", "canary_percent"]
    ) as harness:
        yield harness


@pytest.mark.parametrize("kind", KINDS)
async def test_an_edited_call_runs_once_as_edited_and_the_model_is_told(
    editable: Harness, kind: Kind
) -> None:
    """HumanInTheLoopMiddleware allowing edit: the middleware's edit decision runs the call
    once with exactly the edited arguments and tells the model so. A raw interrupt node that
    knows no edit: the call does not run, the model reads what was approved instead, and its
    call again with exactly that is approved at once on the editor's decision and runs once."""
    harness = editable
    ledger, config = Ledger(), config_for(kind)
    model = scripted_model() if kind == "hitl" else scripted_model(dict(EDITED))
    checkpointer = InMemorySaver()
    graph = (
        hitl_agent(model, ledger, checkpointer, ("approve", "edit", "reject"))
        if kind == "hitl"
        else raw_graph(model, ledger, checkpointer)
    )
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = LangGraphApprovals(cs, requester=REQUESTER_ID)
        await graph.ainvoke(start(), config)
        [(_, submitted)] = await adapter.submit_pending(graph, config)
        waiter = asyncio.create_task(cs.wait(submitted.approval_id, timeout=20))
        approval_id = await card_for_call(harness, CALL_ID)
        status, answer = await edit_and_approve(
            harness, APPROVER, approval_id, version="2.4.2", canary_percent="5"
        )
        assert (status, answer) == (200, "")
        decision = await waiter
        assert decision.approved
        assert decision.edit is not None
        assert decision.edit.arguments == EDITED
        assert decision.tool.arguments == ARGS  # the requested ones, still bound

        command = await adapter.resume_command(graph, config, decision)
        [value] = command.resume.values()  # type: ignore[union-attr]
        await graph.ainvoke(command, config)
        await adapter.report_outcomes(graph, config)
        after = await cs.get(submitted.approval_id)
        if kind == "raw":
            [told] = tool_messages(model.inputs[-1])
            # the model called again with exactly the edited arguments: approved at once
            [(call, again)] = await adapter.submit_pending(graph, config)
            assert (call.call_id, again.status, again.edit_of) == (
                "call-deploy-2",
                "approved",
                approval_id,
            )
            await graph.ainvoke(await adapter.resume_command(graph, config, again), config)
            await adapter.report_outcomes(graph, config)
            recall = await cs.get(again.approval_id)
            after = await cs.get(submitted.approval_id)
    if kind == "hitl":
        [told] = tool_messages(model.inputs[-1])
        assert value == {
            "type": "edit",
            "edited_action": {"name": "deploy_service", "args": EDITED},
        }
        assert ledger.calls == [EDITED]  # once, exactly as edited
        assert told.startswith("Note: a human reviewer replaced this tool call")
        assert '"version": "2.4.2"' in told
        assert after.execution is not None
        assert after.execution.outcome is not None
        assert after.execution.outcome.status == "ok"
    else:
        assert value["type"] == "reject"
        assert "approved this call in Countersign only with changed arguments" in told
        assert '/version "2.4.1" → "2.4.2"' in told
        exact = told.split("nothing added, removed or changed: ")[1].split(". Any other")[0]
        assert json.loads(exact) == EDITED
        assert ledger.calls == [EDITED]  # the call again, once; the requested call never
        assert after.execution is None
        assert after.edit is not None
        assert after.edit.called_again_as == recall.approval_id
        assert recall.execution is not None
        assert recall.execution.outcome is not None
        assert recall.execution.outcome.status == "ok"
        assert tool_messages(model.inputs[-1])[-1] == "deployed billing-api 2.4.2"
        messages = harness.standin.messages.get(CHANNEL, [])
        assert not any("(call call-deploy-2)" in json.dumps(m.get("blocks")) for m in messages)
