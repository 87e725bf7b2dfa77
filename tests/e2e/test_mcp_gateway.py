"""The MCP gateway end to end: the ``mcp`` SDK's own client against ``countersign-mcp-gateway``
(a real process, over stdio and over Streamable HTTP), fronting the upstream test server (one
over stdio, one over HTTP), with the bot on loopback and the Slack stand-in."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import mcp_types as types
import pytest
from mcp import MCPError

from tests.e2e.mcp_gateway import (
    MODERN,
    ROOT,
    Rig,
    direct_tools,
    http_client,
    http_gateway,
    http_upstream,
    modern_client,
    pending_card,
    raw_post,
    stdio_gateway,
)
from tests.support.doc_samples import Block, of_kind
from tests.support.edit_form import edit_and_approve, editing_bot
from tests.support.harness import AGENT_TOKEN, APPROVER, REQUESTER, Harness
from tests.support.mcp_stdio import stdio_session
from tests.support.mcp_upstream import NOTE_SCHEMA, WRITE_SCHEMA
from tests.support.waiting import until


@pytest.fixture
def rig(harness: Harness, tmp_path: Path) -> Iterator[Rig]:
    rig = Rig(tmp_path, harness.base_url)
    with http_upstream(rig) as url:
        rig.upstream_http = url
        yield rig


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_ungated_tools_pass_through_untouched(rig: Rig) -> None:
    async with stdio_gateway(rig) as gateway:
        listed = {tool.name: tool for tool in (await gateway.list_tools()).tools}
        assert set(listed) == {
            *(
                f"{p}{n}"
                for p in ("", "billing_")
                for n in (
                    "read_note",
                    "write_note",
                    "delete_note",
                    "explode",
                    "fail_soft",
                    "slow_count",
                )
            )
        }
        direct = await direct_tools(rig)
        for name, tool in direct.items():  # byte for byte as the SDK client reads it directly
            for exposed in (name, f"billing_{name}"):
                assert json.dumps(listed[exposed].input_schema) == json.dumps(tool.input_schema)
                assert listed[exposed].model_dump(exclude={"name"}) == tool.model_dump(
                    exclude={"name"}
                )
        read = listed["read_note"]
        assert read.input_schema == NOTE_SCHEMA
        assert listed["billing_write_note"].input_schema == WRITE_SCHEMA
        assert read.description == "Read a note (never changes anything)"
        assert read.annotations is not None
        assert read.annotations.read_only_hint is True

        result = await gateway.call_tool("read_note", {"name": "readme"})
        assert not result.is_error
        assert text_of(result) == "Countersign gateway test upstream"

        soft = await gateway.call_tool("fail_soft", {})
        assert soft.is_error
        assert text_of(soft) == "a soft failure, as the tool reports it"

        with pytest.raises(MCPError) as raised:
            await gateway.call_tool("explode", {})
        assert (raised.value.code, raised.value.message) == (-32001, "the upstream exploded")
        assert raised.value.data == {"why": "on purpose"}

        steps: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            steps.append((progress, total, message))

        counted = await gateway.call_tool("slow_count", {"steps": 3}, progress_callback=on_progress)
        assert text_of(counted) == "counted to 3"
        assert steps == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]

        [readme] = (await gateway.list_resources()).resources
        assert str(readme.uri) == "note://readme"
        contents = await gateway.read_resource("note://readme")
        assert contents.contents[0].text == "Countersign gateway test upstream"  # type: ignore[union-attr]
        prompts = {p.name for p in (await gateway.list_prompts()).prompts}
        assert prompts == {"summarize", "billing_summarize"}
        prompt = await gateway.get_prompt("billing_summarize", {"note": "readme"})
        assert prompt.messages[0].content.text == "Summarize the note readme"  # type: ignore[union-attr]
    assert [e["tool"] for e in rig.executions()] == [
        "read_note",
        "fail_soft",
        "explode",
        "slow_count",
    ]


async def test_a_gated_call_waits_and_runs_once_for_an_approver(harness: Harness, rig: Rig) -> None:
    arguments = {"name": "plan", "text": "ship it — «now»", "amount": 2.75, "meta": {"tags": ["a"]}}
    waited: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        waited.append(message)

    async with stdio_gateway(rig) as gateway:
        call = asyncio.create_task(
            gateway.call_tool("write_note", arguments, progress_callback=on_progress)
        )
        approval_id = await pending_card(harness, "write_note")
        await harness.click(REQUESTER, approval_id)  # four eyes: the requester cannot
        [why] = await harness.wait_ephemeral(REQUESTER)
        assert "you requested this call" in why
        await until(lambda: len(waited) >= 2, what="progress while waiting")
        assert not call.done()
        assert rig.executions() == []
        await harness.click(APPROVER, approval_id)
        result = await asyncio.wait_for(call, 15)
    assert not result.is_error
    assert text_of(result) == "wrote plan"
    assert result.structured_content == {"written": arguments}
    assert rig.executions() == [{"tool": "write_note", "arguments": arguments}]
    assert any(m and approval_id in m for m in waited)
    body = await harness.approval(approval_id)
    assert body["framework"] == "mcp"
    assert body["tool"] == {
        "name": "write_note",
        "call_id": body["request_id"],
        "arguments": arguments,
    }
    assert body["session_id"].startswith("mcp-stdio-")
    assert body["execution"]["outcome"]["status"] == "ok"


async def test_a_deny_over_http_is_an_error_result_and_the_upstream_never_sees_it(
    harness: Harness, rig: Rig
) -> None:
    """The gateway on Streamable HTTP, the gated tool on the HTTP upstream (every tool gated)."""
    with http_gateway(rig) as (url, _):
        async with http_client(url) as gateway:
            call = asyncio.create_task(gateway.call_tool("billing_delete_note", {"name": "q3"}))
            approval_id = await pending_card(harness, "billing_delete_note")
            await harness.click(APPROVER, approval_id, "countersign_deny", reason="keep Q3")
            result = await asyncio.wait_for(call, 15)
            # the HTTP upstream has no gate: every tool is gated, a read too, run once approved
            read = asyncio.create_task(gateway.call_tool("billing_read_note", {"name": "readme"}))
            read_id = await pending_card(harness, "billing_read_note")
            await harness.click(APPROVER, read_id)
            assert text_of(await asyncio.wait_for(read, 15)) == "Countersign gateway test upstream"
    assert result.is_error
    text = text_of(result)
    assert text.startswith("Not executed: denied in Countersign")
    assert "keep Q3" in text
    assert approval_id in text
    assert rig.executions("delete_note") == []
    body = await harness.approval(approval_id)
    assert body["status"] == "denied"
    assert body["session_id"].startswith("mcp-")


async def test_a_client_cancel_withdraws_the_approval(harness: Harness, rig: Rig) -> None:
    async with stdio_gateway(rig) as gateway:
        call = asyncio.create_task(gateway.call_tool("delete_note", {"name": "old"}))
        approval_id = await pending_card(harness, "delete_note")
        call.cancel()  # the SDK sends notifications/cancelled for the request
        with pytest.raises(asyncio.CancelledError):
            await call

        async def withdrawn() -> bool:
            return bool((await harness.approval(approval_id))["status"] == "cancelled")

        await until(withdrawn, what="the approval withdrawn")
        await harness.click(APPROVER, approval_id)  # too late: nothing to approve, nothing runs
        [why] = await harness.wait_ephemeral(APPROVER)
        assert "cancelled" in why.lower()
        # the gateway still serves: the same call again is a new question
        again = asyncio.create_task(gateway.call_tool("delete_note", {"name": "old"}))
        second = await pending_card(harness, "delete_note", seen={approval_id})
        await harness.click(APPROVER, second, "countersign_deny", reason="no")
        assert (await asyncio.wait_for(again, 15)).is_error
    body = await harness.approval(approval_id)
    assert "cancelled the call" in (body["reason"] or "")
    assert rig.executions("delete_note") == []


DOCUMENTED = [b for b in of_kind("json") if 'countersign-mcp-gateway"' in b.text]


@pytest.mark.parametrize("block", DOCUMENTED, ids=[b.id for b in DOCUMENTED])
async def test_each_documented_client_entry_starts_the_gateway(
    block: Block, tmp_path: Path
) -> None:
    """docs/mcp-gateway.md's entries for Claude Desktop, Cursor and VS Code, run as each client
    runs them: the installed command, the entry's arguments (its file: the test's), its env."""
    [entry] = (
        json.loads(block.text).get("mcpServers") or json.loads(block.text)["servers"]
    ).values()
    command = shutil.which("countersign-mcp-gateway", path=str(Path(sys.executable).parent))
    assert command is not None, "the countersign-mcp-gateway entry point is installed"
    rig = Rig(tmp_path, "http://127.0.0.1:9")
    args = [str(rig.write()) if arg.endswith("gateway.yml") else arg for arg in entry["args"]]
    env = {"PATH": os.environ.get("PATH", ""), **dict.fromkeys(entry["env"], AGENT_TOKEN)}
    async with stdio_session(args, env, command=command) as gateway:
        listed = {tool.name for tool in (await gateway.list_tools()).tools}
        read = await gateway.call_tool("read_note", {"name": "readme"})
    assert {"read_note", "write_note", "delete_note"} <= listed
    assert text_of(read) == "Countersign gateway test upstream"


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_protocol_2026_07_28_gets_the_same_gate(
    harness: Harness, rig: Rig, transport: str
) -> None:
    """The newest revision (a client that skips the initialize handshake; over HTTP, no MCP
    session): pass-through, a gated call approved runs once, a cancelled one is withdrawn."""
    async with modern_client(rig, transport) as client:
        assert client.protocol_version == MODERN
        read = await client.call_tool("read_note", {"name": "readme"})
        assert text_of(read) == "Countersign gateway test upstream"
        call = asyncio.create_task(client.call_tool("write_note", {"name": "m", "text": "t"}))
        approval_id = await pending_card(harness, "write_note")
        await harness.click(APPROVER, approval_id)
        result = await asyncio.wait_for(call, 15)
        assert text_of(result) == "wrote m"
        cancelled = asyncio.create_task(client.call_tool("delete_note", {"name": "m"}))
        second = await pending_card(harness, "delete_note")
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled

        async def withdrawn() -> bool:
            return bool((await harness.approval(second))["status"] == "cancelled")

        await until(withdrawn, what="the approval withdrawn")
    assert rig.executions("write_note") == [
        {"tool": "write_note", "arguments": {"name": "m", "text": "t"}}
    ]
    assert rig.executions("delete_note") == []
    body = await harness.approval(approval_id)
    assert body["framework"] == "mcp"
    assert body["execution"]["outcome"]["status"] == "ok"


async def test_a_retry_while_waiting_joins_the_same_approval(harness: Harness, rig: Rig) -> None:
    arguments = {"name": "twice", "text": "once"}
    async with stdio_gateway(rig) as gateway:
        first = asyncio.create_task(gateway.call_tool("write_note", arguments))
        approval_id = await pending_card(harness, "write_note")
        retry = asyncio.create_task(gateway.call_tool("write_note", arguments))
        await asyncio.sleep(0.5)
        await harness.click(APPROVER, approval_id)
        results = await asyncio.wait_for(asyncio.gather(first, retry), 15)
    assert [text_of(r) for r in results] == ["wrote twice", "wrote twice"]
    assert len(rig.executions("write_note")) == 1
    cards = [
        m for m in harness.standin.messages.get("C0REVIEWS", []) if "write_note" in json.dumps(m)
    ]
    assert len(cards) == 1


async def test_a_gateway_killed_while_a_call_waits_never_runs_it_twice(
    harness: Harness, rig: Rig
) -> None:
    """Killed (SIGKILL: nothing withdrawn) while the call waits; approved while it is down; the
    client's retry on the restarted gateway (the same pinned session) runs that approval once,
    and a call after it is a new question."""
    config = rig.write(session_id="desk-42")
    arguments = {"name": "restart", "text": "survive"}
    with http_gateway(rig, config) as (url, first):
        async with http_client(url) as gateway:
            call = asyncio.create_task(gateway.call_tool("write_note", arguments))
            approval_id = await pending_card(harness, "write_note")
            first.kill()
            first.wait()
            done, _ = await asyncio.wait({call}, timeout=15)  # the connection is gone
            assert done
            assert call.exception() is not None
    await harness.click(APPROVER, approval_id)
    assert rig.executions("write_note") == []
    with http_gateway(rig, config) as (url, _):
        async with http_client(url) as gateway:
            result = await gateway.call_tool("write_note", arguments)
            assert text_of(result) == "wrote restart"
            again = asyncio.create_task(gateway.call_tool("write_note", arguments))
            second = await pending_card(harness, "write_note", seen={approval_id})
            await harness.click(APPROVER, second, "countersign_deny", reason="once is enough")
            assert (await asyncio.wait_for(again, 15)).is_error
    assert rig.executions("write_note") == [{"tool": "write_note", "arguments": arguments}]
    body = await harness.approval(approval_id)
    assert body["session_id"] == "desk-42"
    assert body["execution"]["outcome"]["status"] == "ok"


async def test_countersign_down_fails_closed_and_a_restart_is_waited_through(
    harness: Harness, rig: Rig
) -> None:
    async with stdio_gateway(rig) as gateway:
        # a restart while the call waits: the long-poll comes back, the decision arrives
        call = asyncio.create_task(gateway.call_tool("write_note", {"name": "a", "text": "b"}))
        approval_id = await pending_card(harness, "write_note")
        await harness.stop_bot()
        await asyncio.sleep(1.0)
        assert not call.done()
        await harness.start_bot(same_port=True)
        await harness.click(APPROVER, approval_id)
        assert text_of(await asyncio.wait_for(call, 20)) == "wrote a"

        await harness.stop_bot()  # down: nothing gated passes, the ungated still do
        refused = await gateway.call_tool("delete_note", {"name": "a"})
        assert refused.is_error
        assert text_of(refused).startswith("Not executed: Countersign could not be reached")
        assert not (await gateway.call_tool("read_note", {"name": "readme"})).is_error
        await harness.start_bot(same_port=True)
    assert [e["tool"] for e in rig.executions()] == ["write_note", "read_note"]


async def test_arguments_that_cannot_be_bound_are_refused_before_anything_is_submitted(
    harness: Harness, rig: Rig
) -> None:
    async with stdio_gateway(rig, rig.write(max_argument_bytes=2048)) as gateway:
        huge = await gateway.call_tool("write_note", {"name": "big", "text": "x" * 4096})
        unsafe = await gateway.call_tool(
            "write_note", {"name": "n", "text": "t", "amount": 2**60 + 1}
        )
    assert huge.is_error
    assert "over the gateway's limit of 2048" in text_of(huge)
    assert unsafe.is_error
    assert "not I-JSON" in text_of(unsafe)
    assert "nothing was submitted" in text_of(unsafe)
    await asyncio.sleep(0.3)
    assert harness.standin.messages.get("C0REVIEWS", []) == []
    assert rig.executions() == []


@pytest.fixture
async def editable(database_url: str, tmp_path: Path) -> AsyncIterator[Harness]:
    """The bot with a rule letting reviewers edit a note's text."""
    async with editing_bot(database_url, tmp_path, "write_note", ["text"]) as harness:
        yield harness


async def test_an_edited_approval_runs_the_edited_arguments_and_says_so(
    editable: Harness, tmp_path: Path
) -> None:
    harness = editable
    rig = Rig(tmp_path, harness.base_url)
    asked = {"name": "memo", "text": "send it to everyone"}
    async with stdio_gateway(rig) as gateway:
        call = asyncio.create_task(gateway.call_tool("write_note", asked))
        approval_id = await pending_card(harness, "write_note")
        status, answer = await edit_and_approve(
            harness, APPROVER, approval_id, text="send it to the team"
        )
        assert (status, answer) == (200, "")
        result = await asyncio.wait_for(call, 15)
    edited = {"name": "memo", "text": "send it to the team"}
    assert rig.executions("write_note") == [{"tool": "write_note", "arguments": edited}]
    first = result.content[0]
    assert isinstance(first, types.TextContent)
    assert "approved this call only with changed arguments" in first.text
    assert '"send it to everyone" → "send it to the team"' in first.text
    assert '{"name":"memo","text":"send it to the team"}' in first.text
    assert text_of(result).endswith("wrote memo")
    assert result.structured_content == {"written": edited}
    body = await harness.approval(approval_id)
    assert body["execution"]["outcome"]["status"] == "ok"


async def test_a_file_that_cannot_run_the_gateway_stops_it_naming_the_problem(rig: Rig) -> None:
    clash = rig.config()
    clash["upstreams"]["billing"]["prefix"] = ""  # both expose read_note, write_note, …
    typo = rig.config()
    typo["upstreams"]["files"]["gates"] = typo["upstreams"]["files"].pop("gate")
    for data, expected in (
        (clash, "upstreams billing and files both expose the tool 'read_note'"),
        (typo, "upstreams.files.gates: Extra inputs are not permitted"),
    ):
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "countersign_client.gateway", "--config", str(rig.write(data))],
            cwd=ROOT,
            env=rig.env(),
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 2, done.stderr
        assert expected in done.stderr
        assert "Traceback" not in done.stderr
    no_token = {k: v for k, v in rig.env().items() if k != "COUNTERSIGN_AGENT_TOKEN"}
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "countersign_client.gateway", "--config", str(rig.write())],
        cwd=ROOT,
        env=no_token,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert "countersign.token_env: COUNTERSIGN_AGENT_TOKEN is not set" in done.stderr


async def test_http_checks_origin_host_and_the_bearer_token(rig: Rig) -> None:
    data = rig.config()
    data["http"] = {"token_env": "GATEWAY_TOKEN", "allowed_origins": ["https://ide.example"]}
    with http_gateway(rig, rig.write(data), GATEWAY_TOKEN="s3cret-gw") as (url, _):
        bearer = {"Authorization": "Bearer s3cret-gw"}
        assert (await raw_post(url, {}))[0] == 401
        assert (await raw_post(url, {"Authorization": "Bearer wrong"}))[0] == 401
        assert (await raw_post(url, {**bearer, "Origin": "https://evil.example"}))[0] == 403
        assert (await raw_post(url, {**bearer, "Host": "evil.example"}))[0] == 421
        assert (await raw_post(url, {**bearer, "Origin": "https://ide.example"}))[0] == 200
        assert (await raw_post(url, bearer))[0] == 200  # no Origin: not a browser
