"""OpenAI Agents SDK end to end: a real ``Agent`` and ``Runner`` with a ``needs_approval`` tool, the
SDK's own ``ScriptedModel`` (no LLM, tracing off), the real bot and the Slack stand-in."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import time
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, FunctionTool, RunConfig, Runner, RunResult, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from countersign_client import (
    Approval,
    BindingMismatch,
    CallbackVerifier,
    CountersignClient,
    arguments_sha256,
)
from countersign_client.adapters.openai_agents import (
    NOT_EXECUTED,
    OpenAIAgentsApprovals,
    PausedRun,
)
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
SESSION = "oa-conversation-1"
OFFLINE = RunConfig(tracing_disabled=True)  # no trace export: loopback only


def calls_deploy(*call_ids: str, arguments: tuple[dict[str, str], ...] = (ARGS,)) -> list[Any]:
    """The model's turn: one ``deploy`` call per id (the n-th with the n-th arguments)."""
    return [function_call("deploy", a, call_id=c) for c, a in zip(call_ids, arguments, strict=True)]


def deploy_tool(ran: list[dict[str, str]]) -> FunctionTool:
    @function_tool(needs_approval=True)
    def deploy(service: str, version: str) -> str:
        """Deploy ``service`` at ``version``."""
        ran.append({"service": service, "version": version})
        return f"deployed {service} {version}"

    return deploy


def build_agent(model: ScriptedModel, ran: list[dict[str, str]]) -> Agent[Any]:
    return Agent(name="ops-bot", model=model, tools=[deploy_tool(ran)])


async def pause(agent: Agent[Any]) -> RunResult:
    paused = await Runner.run(agent, "Deploy api 1.2.3", run_config=OFFLINE)
    assert [item.name for item in paused.interruptions] == ["deploy"]
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
        f"\n[openai-agents] {what}: pause→card {pause_to_card * 1000:.0f} ms, "
        f"click→agent resumed {click_to_resumed * 1000:.0f} ms"
    )


def outputs(model: ScriptedModel) -> list[dict[str, Any]]:
    """The tool outputs in the model's latest input."""
    last = model.last_call
    assert last is not None
    assert isinstance(last.input, list)
    return [dict(item) for item in last.input if item.get("type") == "function_call_output"]


async def test_approve_resumes_the_run_with_the_original_arguments(harness: Harness) -> None:
    ran: list[dict[str, str]] = []
    model = ScriptedModel(
        [calls_deploy("call_oa_1"), [assistant_message("Deployed.")], calls_deploy("call_oa_1")]
    )
    agent = build_agent(model, ran)
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = OpenAIAgentsApprovals(cs, requester=REQUESTER_ID)
        result = await pause(agent)
        paused_at = time.perf_counter()
        paused = await adapter.submit(result, session_id=SESSION, summary="Deploy api 1.2.3")
        [(approval_id, pending)] = paused.pending.items()
        assert ran == []
        assert pending.request_id.startswith("call_oa_1@")
        assert (pending.session_id, pending.call_id, pending.arguments) == (
            SESSION,
            "call_oa_1",
            ARGS,
        )
        waiter = asyncio.create_task(cs.wait(approval_id, timeout=20))
        await card_for_call(harness, "call_oa_1")
        card_at = time.perf_counter()
        clicked = await decide(harness, "call_oa_1")
        decision = await waiter
        assert decision.approved
        assert decision.arguments_sha256 == arguments_sha256(ARGS)
        done = await adapter.resume(agent, paused, decision, run_config=OFFLINE)
        resumed = time.perf_counter()
        assert done is not None
        assert ran == [ARGS]
        assert done.final_output == "Deployed."
        assert [(o["call_id"], o["output"]) for o in outputs(model)] == [
            ("call_oa_1", "deployed api 1.2.3")
        ]
        report("approve", card_at - paused_at, resumed - clicked)

        # the model reuses the call id in a later run: a new approval, never the old decision
        again = await Runner.run(
            agent, [*done.to_input_list(), {"role": "user", "content": "again"}], run_config=OFFLINE
        )
        repaused = await adapter.submit(again, session_id=SESSION)
        [(second_id, second)] = repaused.pending.items()
        assert second_id != approval_id
        assert (await cs.get(second_id)).status == "pending"
        assert second.call_id == "call_oa_1"
    assert ran == [ARGS]


async def test_deny_never_runs_the_tool_and_the_model_reads_the_reason(harness: Harness) -> None:
    ran: list[dict[str, str]] = []
    model = ScriptedModel([calls_deploy("call_oa_2"), [assistant_message("Not deploying.")]])
    agent = build_agent(model, ran)
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = OpenAIAgentsApprovals(cs, requester=REQUESTER_ID)
        paused = await adapter.submit(await pause(agent), session_id=SESSION)
        [approval_id] = paused.pending
        waiter = asyncio.create_task(cs.wait(approval_id, timeout=20))
        await decide(harness, "call_oa_2", "countersign_deny")
        decision = await waiter
        done = await adapter.resume(agent, paused, decision, run_config=OFFLINE)
    assert done is not None
    assert decision.status == "denied"
    assert decision.reason is not None
    assert REASON in decision.reason
    assert ran == []
    assert done.final_output == "Not deploying."
    # the tool output the model reads for the call is the rejection message, with the reason
    [output] = outputs(model)
    assert output["call_id"] == "call_oa_2"
    assert decision.reason in output["output"]
    assert output["output"].endswith(NOT_EXECUTED)


async def test_two_calls_in_one_turn_run_on_once_both_are_decided(harness: Harness) -> None:
    ran: list[dict[str, str]] = []
    turn = calls_deploy("call_oa_5a", "call_oa_5b", arguments=(ARGS, OTHER))
    model = ScriptedModel([turn, [assistant_message("One of two deployed.")]])
    agent = build_agent(model, ran)
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = OpenAIAgentsApprovals(cs, requester=REQUESTER_ID)
        result = await Runner.run(agent, "Deploy api and web", run_config=OFFLINE)
        paused = await adapter.submit(result, session_id=SESSION)
        by_call = {call.call_id: approval_id for approval_id, call in paused.pending.items()}
        decisions = []
        for call_id, action in (("call_oa_5a", "countersign_deny"), ("call_oa_5b", "")):
            waiter = asyncio.create_task(cs.wait(by_call[call_id], timeout=20))
            await decide(harness, call_id, action or "countersign_approve")
            decisions.append(await waiter)
        assert await adapter.resume(agent, paused, decisions[0], run_config=OFFLINE) is None
        assert ran == []  # the run waits for the whole pause to be decided
        done = await adapter.resume(agent, paused, decisions[1], run_config=OFFLINE)
    assert done is not None
    assert done.final_output == "One of two deployed."
    assert ran == [OTHER]
    denied, deployed = outputs(model)
    assert denied["call_id"] == "call_oa_5a"
    assert str(decisions[0].reason) in denied["output"]
    assert (deployed["call_id"], deployed["output"]) == ("call_oa_5b", "deployed web 2.0")


async def test_tampered_decisions_are_refused(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[dict[str, str]] = []
    agent = build_agent(ScriptedModel([calls_deploy("call_oa_3"), [assistant_message("ok")]]), ran)
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = OpenAIAgentsApprovals(cs, requester=REQUESTER_ID)
        paused = await adapter.submit(await pause(agent), session_id=SESSION)
        [approval_id] = paused.pending
        waiter = asyncio.create_task(cs.wait(approval_id, timeout=20))
        await decide(harness, "call_oa_3")
        decision = await waiter

        def with_tool(**update: Any) -> Approval:
            return decision.model_copy(update={"tool": decision.tool.model_copy(update=update)})

        tampered = (
            with_tool(call_id="call_x"),
            decision.model_copy(update={"session_id": "another-conversation"}),
            decision.model_copy(update={"request_id": "call_oa_3"}),  # the bare call id
            decision.model_copy(update={"approval_id": "apr_forged"}),
            decision.model_copy(update={"arguments_sha256": arguments_sha256({"version": "9"})}),
            # the echoed arguments changed under an intact hash: still refused, never run
            with_tool(arguments={**ARGS, "version": "9"}),
            with_tool(name="delete_everything"),
            decision.model_copy(update={"resume": {**(decision.resume or {}), "approve": False}}),
        )
        for forged in tampered:
            with caplog.at_level(logging.WARNING), pytest.raises(BindingMismatch):
                await adapter.resume(agent, paused, forged, run_config=OFFLINE)
        assert ran == []
        assert len([r for r in caplog.records if "decision refused" in r.message]) == len(tampered)
        assert len(paused.state.get_interruptions()) == 1  # nothing was applied
        # the call is still pending: the genuine decision resumes it, once
        await adapter.resume(agent, paused, decision, run_config=OFFLINE)
        assert ran == [ARGS]
        with pytest.raises(BindingMismatch):
            adapter.bind(paused, decision)


async def test_the_agent_process_restarts_between_pause_and_decision(harness: Harness) -> None:
    async def first_process() -> tuple[str, str, weakref.ref[Agent[Any]], float]:
        ran: list[dict[str, str]] = []
        agent = build_agent(ScriptedModel([calls_deploy("call_oa_4")]), ran)
        async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
            adapter = OpenAIAgentsApprovals(
                cs, requester=REQUESTER_ID, callback_url=harness.receiver.url
            )
            result = await pause(agent)
            paused_at = time.perf_counter()
            paused = await adapter.submit(result, session_id=SESSION)
        assert ran == []
        [approval_id] = paused.pending
        return paused.to_json(), approval_id, weakref.ref(agent), paused_at

    saved, approval_id, first_agent, paused_at = await first_process()
    gc.collect()
    assert first_agent() is None  # nothing of the first process is left but the saved JSON
    await card_for_call(harness, "call_oa_4")
    card_at = time.perf_counter()
    clicked = await decide(harness, "call_oa_4")

    # the second process: the callback arrives, the agent and the RunState are rebuilt
    [received] = await harness.receiver.wait_delivered(1)
    headers = {
        "Countersign-Signature": received.signature,
        "Idempotency-Key": received.idempotency_key,
    }
    decision = CallbackVerifier(CALLBACK_SECRET).verify(received.body, headers)
    assert decision.approval_id == approval_id
    ran: list[dict[str, str]] = []
    agent = build_agent(ScriptedModel([[assistant_message("Deployed after a restart.")]]), ran)
    paused = await PausedRun.from_json(agent, saved)
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = OpenAIAgentsApprovals(cs, requester=REQUESTER_ID)
        done = await adapter.resume(agent, paused, decision, run_config=OFFLINE)
    resumed = time.perf_counter()
    assert done is not None
    assert ran == [ARGS]
    assert done.final_output == "Deployed after a restart."
    report("restart (callback)", card_at - paused_at, resumed - clicked)


# -- an approval runs at most once ------------------------------------------------------------


async def test_two_processes_resume_the_same_pause_and_the_tool_runs_once(
    harness: Harness, tmp_path: Path
) -> None:
    agent = build_agent(ScriptedModel([calls_deploy("call_oa_6")]), [])
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        paused = await OpenAIAgentsApprovals(cs, requester=REQUESTER_ID).submit(
            await pause(agent), session_id=SESSION
        )
        [approval_id] = paused.pending
        saved = tmp_path / "paused.json"
        saved.write_text(paused.to_json(), "utf-8")
        await decide(harness, "call_oa_6")
        # two workers pick up the same saved run and decision, at the same time
        told = await resume_in_two_processes(
            {
                "framework": "openai-agents",
                "base_url": harness.base_url,
                "approval_id": approval_id,
                "saved": str(saved),
                "ran": str(tmp_path / "ran.jsonl"),
            },
            tmp_path,
        )
        after = await cs.get(approval_id)
    assert runs(tmp_path / "ran.jsonl") == [ARGS]  # exactly once, across both processes
    ran_here, refused = sorted(told, key=lambda text: text.startswith(ALREADY_EXECUTED))
    assert ran_here == "deployed api 1.2.3"
    assert refused.startswith(ALREADY_EXECUTED)  # the other model reads that it ran elsewhere
    assert after.execution is not None
    assert after.execution.outcome is not None
    assert after.execution.outcome.status == "ok"


async def test_a_resume_after_valid_for_does_not_run_and_the_model_reads_why(
    harness: Harness,
) -> None:
    ran: list[dict[str, str]] = []
    model = ScriptedModel([calls_deploy("call_oa_7"), [assistant_message("I'll ask again.")]])
    agent = build_agent(model, ran)
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = OpenAIAgentsApprovals(cs, requester=REQUESTER_ID)
        paused = await adapter.submit(await pause(agent), session_id=SESSION)
        [approval_id] = paused.pending
        waiter = asyncio.create_task(cs.wait(approval_id, timeout=20))
        await decide(harness, "call_oa_7")
        decision = await waiter
        harness.clock.advance(900 + 2)  # the rule's valid_for is the default, 900 s
        done = await adapter.resume(agent, paused, decision, run_config=OFFLINE)
        after = await cs.get(approval_id)
    assert done is not None
    assert done.final_output == "I'll ask again."
    assert ran == []
    [told] = outputs(model)
    assert told["call_id"] == "call_oa_7"
    assert told["output"].startswith(LAPSED)
    assert after.execution is None


async def test_a_tool_that_raises_is_reported_as_an_error(harness: Harness) -> None:
    @function_tool(needs_approval=True)
    def deploy(service: str, version: str) -> str:
        """Deploy ``service`` at ``version``."""
        raise RuntimeError(f"secret-token-in-{service}")  # its text must not reach the card

    model = ScriptedModel([calls_deploy("call_oa_8"), [assistant_message("It failed.")]])
    agent = Agent(name="ops-bot", model=model, tools=[deploy])
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = OpenAIAgentsApprovals(cs, requester=REQUESTER_ID)
        paused = await adapter.submit(await pause(agent), session_id=SESSION)
        [approval_id] = paused.pending
        waiter = asyncio.create_task(cs.wait(approval_id, timeout=20))
        await decide(harness, "call_oa_8")
        done = await adapter.resume(agent, paused, await waiter, run_config=OFFLINE)
        after = await cs.get(approval_id)
    assert done is not None
    assert after.execution is not None
    assert after.execution.outcome is not None
    assert after.execution.outcome.status == "error"
    assert "secret" not in after.execution.outcome.detail


@pytest.fixture
async def editable(database_url: str, tmp_path: Path) -> AsyncIterator[Harness]:
    """The bot with a rule letting reviewers edit deploy's version."""
    async with editing_bot(database_url, tmp_path, "deploy", ["version"]) as harness:
        yield harness


async def test_an_edited_call_runs_once_as_edited_when_the_model_calls_again(
    editable: Harness,
) -> None:
    """The SDK runs only the arguments it recorded: approved with an edit, the call is refused
    (never run with the requested arguments), and its output tells the model the exact
    arguments a reviewer approved. The model's call again with exactly those is approved at
    once on the editor's decision (no second card) and runs once, as edited."""
    harness = editable
    ran: list[dict[str, str]] = []
    edited = {"service": "api", "version": "1.2.4"}
    model = ScriptedModel(
        [
            calls_deploy("call_oa_e"),
            calls_deploy("call_oa_e2", arguments=(edited,)),
            [assistant_message("Deployed 1.2.4, as the reviewer changed it.")],
        ]
    )
    agent = build_agent(model, ran)
    async with CountersignClient(harness.base_url, AGENT_TOKEN) as cs:
        adapter = OpenAIAgentsApprovals(cs, requester=REQUESTER_ID)
        paused = await adapter.submit(await pause(agent), session_id=SESSION)
        [approval_id] = paused.pending
        waiter = asyncio.create_task(cs.wait(approval_id, timeout=20))
        await card_for_call(harness, "call_oa_e")
        status, answer = await edit_and_approve(harness, APPROVER, approval_id, version="1.2.4")
        assert (status, answer) == (200, "")
        decision = await waiter
        assert decision.approved
        assert decision.edit is not None
        again = await adapter.resume(agent, paused, decision, run_config=OFFLINE)
        assert again is not None
        assert ran == []  # the requested arguments never ran
        [output] = outputs(model)
        text = output["output"]
        assert "approved this call in Countersign only with changed arguments" in text
        assert '/version "1.2.3" → "1.2.4"' in text
        assert '{"service":"api","version":"1.2.4"}' in text
        # the model called again with exactly the edited arguments: approved at once
        assert [item.name for item in again.interruptions] == ["deploy"]
        paused2 = await adapter.submit(again, session_id=SESSION)
        [approval_id2] = paused2.pending
        decision2 = await cs.wait(approval_id2, timeout=10)
        assert (decision2.approved, decision2.edit_of) == (True, approval_id)
        done = await adapter.resume(agent, paused2, decision2, run_config=OFFLINE)
        original = await cs.get(approval_id)
    assert done is not None
    assert ran == [edited]  # once, as edited
    assert done.final_output == "Deployed 1.2.4, as the reviewer changed it."
    assert original.execution is None
    assert original.edit is not None
    assert original.edit.called_again_as == approval_id2
    assert [o["output"] for o in outputs(model) if o["call_id"] == "call_oa_e2"] == [
        "deployed api 1.2.4"
    ]
    messages = harness.standin.messages.get(CHANNEL, [])
    assert not any("(call call_oa_e2)" in json.dumps(m.get("blocks")) for m in messages)
