"""The Python samples of the framework pages (docs/*.md) run as written, with the real
frameworks, against the real bot on loopback: the approver clicks in the Slack stand-in, and
each sample's own output says the tool ran. Only two things are the test's: the addresses
(:func:`localise`) and, where a page names a real model (MAF's ``OpenAIChatClient``, the Agents
SDK's default OpenAI model), a scripted one in its place."""

from __future__ import annotations

import ast
import asyncio
import hashlib
import hmac
import json
import sys
import textwrap
import time
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.support import waiting
from tests.support.doc_samples import (
    DEV_SIGNING,
    DEV_TOKEN,
    Block,
    DocHarness,
    localise,
    of_kind,
    run_sample,
    script_of,
)
from tests.support.harness import APPROVER, CHANNEL, Harness

pytestmark = pytest.mark.e2e

DEPLOYED = "deployed api 1.2.3"


@pytest.fixture
async def bot(
    database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> AsyncIterator[DocHarness]:
    """The bot with make run's credentials; the agent receiver's port is the samples' (the
    policy allows callbacks there), freed for the sample's own receiver. Files the samples
    write land in ``tmp_path``."""
    h = DocHarness(database_url=database_url)
    await h.start()
    await h.receiver.stop()
    monkeypatch.chdir(tmp_path)
    yield h
    await h.stop()


class Approver:
    """Approves every card that shows up in the reviewer channel, as Slack would send it."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.approved: list[str] = []
        self._task: asyncio.Task[None] | None = None

    def _pending_cards(self) -> list[str]:
        found = []
        for message in self.harness.standin.messages.get(CHANNEL, []):
            for block in message.get("blocks") or []:
                for element in block.get("elements", []):
                    value = element.get("value")
                    if (
                        element.get("action_id") == "countersign_approve"
                        and value not in self.approved
                    ):
                        found.append(str(value))
        return found

    async def _run(self) -> None:
        while True:
            for approval_id in self._pending_cards():
                self.approved.append(approval_id)
                assert await self.harness.click(APPROVER, approval_id) == 200
            await asyncio.sleep(0.02)

    def __enter__(self) -> Approver:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()


def sample(path: str, needle: str) -> Block:
    [found] = [b for b in of_kind("python-e2e") if b.path == path and needle in b.text]
    return found


def program(bot: Harness, block: Block, **names: Any) -> dict[str, Any]:
    """A sample program's module namespace, everything but its ``asyncio.run(main())``."""
    namespace: dict[str, Any] = {"__name__": f"sample_{block.line}", **names}
    run_sample(block, namespace, localise(script_of(block), bot.base_url, bot.receiver.port))
    return namespace


async def run_fragment(block: Block, namespace: dict[str, Any]) -> None:
    """A fragment (indented as in its page, ``await`` at its top) run in ``namespace``."""
    code = compile(
        textwrap.dedent(block.text), block.id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    )
    result = eval(code, namespace)  # noqa: S307 - this checkout's own documentation
    if isinstance(result, Awaitable):
        await result


def exists(path: Path) -> bool:
    return path.exists()


async def until_file(program: asyncio.Task[Any], path: Path, exists: bool = True) -> None:
    """Wait until the sample program wrote (or removed) ``path``; its own error if it died."""

    def done() -> bool:
        if program.done():
            program.result()  # raises what the program raised
        return path.exists() == exists

    what = f"{path.name} {'written' if exists else 'removed'}"
    await waiting.until(done, timeout=20, what=what)


async def stop(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# -- LangGraph ---------------------------------------------------------------------------------


async def test_langgraph_create_agent_sample(
    bot: DocHarness, capsys: pytest.CaptureFixture[str]
) -> None:
    block = sample("docs/langgraph.md", "create_agent(")
    namespace = program(bot, block)
    with Approver(bot) as approver:
        await asyncio.wait_for(namespace["main"](), 30)
    assert len(approver.approved) == 1
    assert capsys.readouterr().out == "Done.\n"  # the scripted model's answer after the tool ran
    from langchain_core.messages import ToolMessage
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    config: Any = {"configurable": {"thread_id": "deploy-42"}}
    async with AsyncSqliteSaver.from_conn_string("checkpoints.sqlite") as checkpointer:
        saved = await checkpointer.aget_tuple(config)
    assert saved is not None
    results = [
        m for m in saved.checkpoint["channel_values"]["messages"] if isinstance(m, ToolMessage)
    ]
    assert [m.content for m in results] == [DEPLOYED]  # the tool ran, once


async def test_langgraph_raw_interrupt_node_sample(bot: DocHarness) -> None:
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    from countersign_client import CountersignClient
    from countersign_client.adapters.langgraph import LangGraphApprovals

    main = program(bot, sample("docs/langgraph.md", "create_agent("))  # its deploy_service
    gate_block = sample("docs/langgraph.md", "def gate(")
    namespace: dict[str, Any] = {"deploy_service": main["deploy_service"]}
    run_sample(gate_block, namespace)
    graph = (
        StateGraph(MessagesState)
        .add_node("gate", namespace["gate"])
        .add_edge(START, "gate")
        .add_edge("gate", END)
        .compile(checkpointer=InMemorySaver())
    )
    config: Any = {"configurable": {"thread_id": "deploy-43"}}
    call = {"name": "deploy_service", "args": {"service": "api", "version": "1.2.3"}, "id": "c1"}
    await graph.ainvoke({"messages": [AIMessage("", tool_calls=[call])]}, config)
    # "the surrounding code is the same as in the example above"
    async with CountersignClient(bot.base_url, DEV_TOKEN) as cs:
        approvals = LangGraphApprovals(cs, requester={"email": "ana@example.com"}, expires_in=3600)
        with Approver(bot):
            [(_, submitted)] = await approvals.submit_pending(graph, config)
            decision = await cs.wait(submitted.approval_id, timeout=30)
        state = await graph.ainvoke(await approvals.resume_command(graph, config, decision), config)
    last = state["messages"][-1]
    assert isinstance(last, ToolMessage)
    assert last.content == DEPLOYED


# -- OpenAI Agents SDK ---------------------------------------------------------------------------


@pytest.fixture
def no_tracing() -> Iterator[None]:
    """The SDK would export traces to OpenAI: off (loopback only)."""
    from agents import set_tracing_disabled

    set_tracing_disabled(True)
    yield
    set_tracing_disabled(False)


def scripted_agents_model(*turns: list[Any]) -> Any:
    from agents.testing import ScriptedModel

    return ScriptedModel(list(turns))


def deploy_call(call_id: str) -> Any:
    from agents.testing import function_call

    return function_call("deploy_service", {"service": "api", "version": "1.2.3"}, call_id=call_id)


def tool_outputs(model: Any) -> list[tuple[str, str]]:
    """The tool results in the scripted model's latest input."""
    items = model.last_call.input
    return [(i["call_id"], i["output"]) for i in items if i.get("type") == "function_call_output"]


def signed(body: bytes, secret: str) -> dict[str, str]:
    t = str(int(time.time()))
    v1 = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return {"Countersign-Signature": f"t={t},v1={v1}", "Content-Type": "application/json"}


@pytest.mark.usefixtures("no_tracing")
async def test_openai_agents_callback_sample_survives_restarts_and_redelivery(
    bot: DocHarness, capsys: pytest.CaptureFixture[str]
) -> None:
    from agents.testing import assistant_message

    block = sample("docs/openai-agents.md", "async def on_decision(")
    saved = Path("paused.json")

    models: list[Any] = []

    def process(*turns: list[Any]) -> asyncio.Task[None]:
        """One run of the program (a fresh module: nothing remembered but paused.json)."""
        namespace = program(bot, block)
        models.append(scripted_agents_model(*turns))
        namespace["agent"].model = models[-1]
        return asyncio.get_running_loop().create_task(namespace["main"]())

    # the first process pauses on the call and saves the pause, then stops before a decision
    first = process([deploy_call("call_1")])
    await until_file(first, saved)
    await stop(first)
    # restarted, it waits for the callback; the approver clicks; the handler resumes the run
    second = process([assistant_message("Deployed api 1.2.3.")])
    with Approver(bot) as approver:
        await until_file(second, saved, exists=False)
    await stop(second)
    assert capsys.readouterr().out == "Deployed api 1.2.3.\n"
    assert tool_outputs(models[-1]) == [("call_1", DEPLOYED)]  # the tool ran, once
    [approval_id] = approver.approved
    # the same decision again after another restart (the answer to it was lost): the saved
    # pause is gone and the verifier remembers nothing; a 2xx, never a 500
    third = process([assistant_message("Nothing to deploy.")])
    status, resource = await bot.call("GET", f"/v1/approvals/{approval_id}", token=DEV_TOKEN)
    assert status == 200
    body = json.dumps(resource).encode()
    url = f"http://127.0.0.1:{bot.receiver.port}/approvals"
    headers = {**signed(body, DEV_SIGNING), "Idempotency-Key": approval_id}

    statuses: list[int] = []

    async def answered() -> bool:
        assert bot.session is not None
        try:
            async with bot.session.post(url, data=body, headers=headers) as response:
                statuses.append(response.status)
                return True
        except OSError:
            return False  # not listening yet

    await waiting.until(answered, what="the restarted receiver")
    await stop(third)
    assert len(statuses) == 1
    assert 200 <= statuses[0] < 300, statuses


@pytest.mark.usefixtures("no_tracing")
async def test_openai_agents_long_poll_sample_decides_every_call_of_a_pause(
    bot: DocHarness, capsys: pytest.CaptureFixture[str]
) -> None:
    from agents import Runner
    from agents.testing import assistant_message

    from countersign_client import CountersignClient
    from countersign_client.adapters.openai_agents import OpenAIAgentsApprovals

    main = program(bot, sample("docs/openai-agents.md", "async def on_decision("))
    agent = main["agent"]
    # two gated calls in one turn: the loop must not change paused.pending while reading it
    agent.model = scripted_agents_model(
        [deploy_call("call_1"), deploy_call("call_2")], [assistant_message("Both deployed.")]
    )
    block = sample("docs/openai-agents.md", "list(paused.pending)")
    async with CountersignClient(bot.base_url, DEV_TOKEN) as cs:
        approvals = OpenAIAgentsApprovals(
            cs, requester={"email": "ana@example.com", "name": "Ana"}, expires_in=3600
        )
        namespace = {"Runner": Runner, "agent": agent, "approvals": approvals, "cs": cs}
        with Approver(bot) as approver:
            await asyncio.wait_for(run_fragment(block, namespace), 30)
    assert len(approver.approved) == 2
    assert capsys.readouterr().out == "Both deployed.\n"
    assert tool_outputs(agent.model) == [("call_1", DEPLOYED), ("call_2", DEPLOYED)]


# -- Microsoft Agent Framework -------------------------------------------------------------------


def scripted_maf_client(*replies: Any) -> Any:
    from tests.e2e.test_maf import ScriptedChatClient

    return ScriptedChatClient(list(replies))


def maf_deploy_call(call_id: str) -> Any:
    from agent_framework import Content, Message

    arguments = json.dumps({"service": "api", "version": "1.2.3"})
    return Message(
        "assistant",
        [Content.from_function_call(call_id=call_id, name="deploy_service", arguments=arguments)],
    )


def maf_text(text: str) -> Any:
    from agent_framework import Message

    return Message("assistant", [text])


def openai_module(client: Callable[[], Any]) -> types.ModuleType:
    """``agent_framework.openai`` as the page imports it, its client scripted."""
    module = types.ModuleType("agent_framework.openai")
    module.OpenAIChatClient = client  # type: ignore[attr-defined]
    return module


async def test_maf_long_poll_sample_across_a_restart(
    bot: DocHarness, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    block = sample("docs/maf.md", "AgentSession.from_dict(json.loads")
    saved = Path("session.json")

    clients: list[Any] = []

    def process(*replies: Any) -> asyncio.Task[None]:
        def client() -> Any:
            clients.append(scripted_maf_client(*replies))
            return clients[-1]

        monkeypatch.setitem(sys.modules, "agent_framework.openai", openai_module(client))
        return asyncio.get_running_loop().create_task(program(bot, block)["main"]())

    first = process(maf_deploy_call("call_1"))
    await until_file(first, saved)
    await stop(first)
    second = process(maf_text("Deployed api 1.2.3."))  # restored from session.json
    with Approver(bot) as approver:
        await asyncio.wait_for(second, 30)
    assert len(approver.approved) == 1
    assert capsys.readouterr().out == "Deployed api 1.2.3.\n"
    assert DEPLOYED in json.dumps(clients[-1].seen[-1])  # the model read the tool's result
    assert not exists(saved)


async def test_maf_callback_sample(bot: DocHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_framework import Agent, AgentSession, tool

    from countersign_client import (
        BindingMismatch,
        CallbackVerifier,
        CountersignClient,
        DuplicateDelivery,
        SignatureError,
    )
    from countersign_client.adapters.maf import MafApprovals

    monkeypatch.setenv("SALES_BOT_SIGNING", DEV_SIGNING)
    ran: list[str] = []

    @tool(approval_mode="always_require")
    def deploy_service(service: str, version: str) -> str:
        """Deploy a version of a service."""
        ran.append(f"{service} {version}")
        return f"deployed {service} {version}"

    def build_agent() -> Any:
        client = scripted_maf_client(maf_text("Deployed api 1.2.3."))
        return Agent(client=client, tools=[deploy_service], name="ops-bot")

    sessions: dict[str, dict[str, Any]] = {}
    callback_url = f"http://127.0.0.1:{bot.receiver.port}/approvals"
    async with CountersignClient(bot.base_url, DEV_TOKEN) as cs:
        approvals = MafApprovals(
            cs, requester={"email": "ana@example.com"}, callback_url=callback_url, expires_in=3600
        )
        namespace: dict[str, Any] = {
            "os": __import__("os"),
            "web": web,
            "CallbackVerifier": CallbackVerifier,
            "DuplicateDelivery": DuplicateDelivery,
            "SignatureError": SignatureError,
            "BindingMismatch": BindingMismatch,
            "AgentSession": AgentSession,
            "approvals": approvals,
            "build_agent": build_agent,
            "load_session": lambda session_id: sessions[session_id],
            "save_session": lambda session: sessions.__setitem__(
                session.session_id, session.to_dict()
            ),
        }
        run_sample(sample("docs/maf.md", "async def on_decision("), namespace)
        app = web.Application()
        app.router.add_post("/approvals", namespace["on_decision"])
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", bot.receiver.port).start()
        try:
            agent = Agent(
                client=scripted_maf_client(maf_deploy_call("call_1")),
                tools=[deploy_service],
                name="ops-bot",
            )
            session = agent.create_session(session_id="deploy-44")
            response = await agent.run("Deploy api 1.2.3", session=session)
            await approvals.submit(response, session, summary="Deploy api 1.2.3")
            sessions[session.session_id] = session.to_dict()
            with Approver(bot):
                await waiting.until(lambda: ran != [], timeout=20, what="the tool run")
        finally:
            await runner.cleanup()
    assert ran == ["api 1.2.3"]
    restored = AgentSession.from_dict(sessions["deploy-44"])
    assert approvals.pending(restored) == []


# -- AG-UI -----------------------------------------------------------------------------------------


async def test_ag_ui_sample(bot: DocHarness, capsys: pytest.CaptureFixture[str]) -> None:
    namespace = program(bot, sample("docs/ag-ui.md", "AgUiApprovals("))
    with Approver(bot) as approver:
        await asyncio.wait_for(namespace["main"](), 30)
    assert len(approver.approved) == 1
    run_input = json.loads(capsys.readouterr().out)
    [entry] = run_input["resume"]
    assert (entry["interruptId"], entry["status"], entry["payload"]) == (
        "int-1",
        "resolved",
        {"approved": True},
    )


# -- nothing left out ------------------------------------------------------------------------------

RUN_HERE = {
    ("docs/langgraph.md", "create_agent("),
    ("docs/langgraph.md", "def gate("),
    ("docs/openai-agents.md", "async def on_decision("),
    ("docs/openai-agents.md", "list(paused.pending)"),
    ("docs/maf.md", "AgentSession.from_dict(json.loads"),
    ("docs/maf.md", "async def on_decision("),
    ("docs/ag-ui.md", "AgUiApprovals("),
}


def test_every_framework_sample_is_run_here() -> None:
    for block in of_kind("python-e2e"):
        runs = [n for path, n in RUN_HERE if path == block.path and n in block.text]
        assert len(runs) == 1, f"{block.id}: no test here runs it (mark it not-run or add one)"
