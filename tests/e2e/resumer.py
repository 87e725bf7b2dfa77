"""A second agent process, for real: ``python -m tests.e2e.resumer SPEC.json`` rebuilds one
framework's agent from what the first process saved, reads the decision from the bot and
resumes, exactly as a duplicate worker would. The tool appends a line to ``spec["ran"]`` each
time it runs; what the model was told for the call is printed as one JSON line.

:func:`resume_in_two_processes` starts two of them at once on the same pause.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from countersign_client import CountersignClient, errors, execution
from tests.support.harness import AGENT_TOKEN

ROOT = Path(__file__).resolve().parents[2]


class FileLedger(list[dict[str, Any]]):
    """A tool's list of runs that also appends each run to a file (shared across processes)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def append(self, item: dict[str, Any]) -> None:
        super().append(item)
        with open(self.path, "a", encoding="utf-8") as runs:
            runs.write(json.dumps(item) + "\n")


def _text(path: str | Path) -> str:
    return Path(path).read_text("utf-8")


def _arrive(path: Path) -> int:
    """Add this process to the barrier file; how many have arrived."""
    with open(path, "a", encoding="utf-8") as arrived:
        arrived.write(f"{os.getpid()}\n")
    return len(_text(path).splitlines())


def _write_spec(where: Path, spec: dict[str, Any]) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    path = where / "spec.json"
    path.write_text(json.dumps(spec), "utf-8")
    return path


def runs(path: Path) -> list[dict[str, Any]]:
    """Every run the tool made, in any process."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]


async def _maf(spec: dict[str, Any], cs: CountersignClient) -> str:
    from agent_framework import AgentSession, Message

    from countersign_client.adapters.maf import MafApprovals
    from tests.e2e.test_maf import REQUESTER_ID, ScriptedChatClient, build_agent, contents

    model = ScriptedChatClient([Message("assistant", ["Done."])])
    agent = build_agent(model, FileLedger(spec["ran"]))
    session = AgentSession.from_dict(json.loads(_text(spec["saved"])))
    decision = await cs.wait(spec["approval_id"], timeout=20)
    await MafApprovals(cs, requester=REQUESTER_ID).resume(agent, decision, session)
    [told] = [c for c in contents(model.seen[-1]) if c["type"] == "function_result"]
    return str(told["result"])


async def _openai_agents(spec: dict[str, Any], cs: CountersignClient) -> str:
    from agents.testing import ScriptedModel, assistant_message

    from countersign_client.adapters.openai_agents import OpenAIAgentsApprovals, PausedRun
    from tests.e2e.test_openai_agents import OFFLINE, REQUESTER_ID, build_agent, outputs

    model = ScriptedModel([[assistant_message("Done.")]])
    agent = build_agent(model, FileLedger(spec["ran"]))
    paused = await PausedRun.from_json(agent, _text(spec["saved"]))
    decision = await cs.wait(spec["approval_id"], timeout=20)
    adapter = OpenAIAgentsApprovals(cs, requester=REQUESTER_ID)
    await adapter.resume(agent, paused, decision, run_config=OFFLINE)
    [told] = outputs(model)
    return str(told["output"])


async def _langgraph(spec: dict[str, Any], cs: CountersignClient) -> str:
    from countersign_client.adapters.langgraph import LangGraphApprovals
    from tests.e2e.test_langgraph import (
        BUILD,
        REQUESTER_ID,
        Ledger,
        checkpointer,
        config_for,
        scripted_model,
        tool_messages,
    )

    kind, config = spec["kind"], config_for(spec["kind"])
    model = scripted_model()
    async with checkpointer(spec["saved"], sync=False) as saver:
        graph = BUILD[kind](model, Ledger(calls=FileLedger(spec["ran"])), saver)
        decision = await cs.wait(spec["approval_id"], timeout=20)
        adapter = LangGraphApprovals(cs, requester=REQUESTER_ID)
        # reads the thread's state (still paused) and claims; then both workers have read it
        # before either writes: the race only the claim can settle (once one worker has
        # resumed, the other finds the interrupt answered and is refused before any claim)
        try:
            command = await adapter.resume_command(graph, config, decision)
        except errors.AlreadyClaimed as claimed_elsewhere:  # this worker is told, not the thread
            return execution.refusal_text(claimed_elsewhere)
        finally:
            await _barrier(Path(spec["ran"]).with_suffix(".ready"), 2)
        await graph.ainvoke(command, config)
        await adapter.report_outcomes(graph, config)
    [told] = tool_messages(model.inputs[-1])
    return told


async def _barrier(path: Path, parties: int) -> None:
    """Wait until ``parties`` processes have reached this point (one line each in ``path``)."""
    _arrive(path)
    deadline = asyncio.get_running_loop().time() + 30
    while len(_text(path).splitlines()) < parties:
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("the other resumer never reached the barrier")
        await asyncio.sleep(0.02)


async def _ag_ui(spec: dict[str, Any], cs: CountersignClient) -> str:
    from countersign_client.adapters.ag_ui import AgUiApprovals
    from tests.e2e.test_ag_ui import REQUESTER_ID, THREAD, form_answer, resumed_run

    approvals = AgUiApprovals(cs, requester=REQUESTER_ID)
    # this client restarted: it reads the interrupted run's events again (same approval)
    await approvals.submit_run(json.loads(_text(spec["saved"])))
    decision = await cs.wait(spec["approval_id"], timeout=20)
    entry = await approvals.resume_entry(decision)
    run_input = approvals.resume_input(THREAD, run_id="run-2", others=[form_answer()])
    events = await resumed_run(spec["agent_url"], run_input)
    await approvals.report_run(events)
    return json.dumps(entry.payload)


RESUMERS = {
    "maf": _maf,
    "openai-agents": _openai_agents,
    "langgraph": _langgraph,
    "ag-ui": _ag_ui,
}


async def _main(spec: dict[str, Any]) -> None:
    async with CountersignClient(spec["base_url"], AGENT_TOKEN) as cs:
        told = await RESUMERS[spec["framework"]](spec, cs)
    print(json.dumps({"told": told}))


async def resume_in_two_processes(spec: dict[str, Any], where: Path) -> list[str]:
    """Start two resumer processes at once on the same pause; what each one's model was told."""
    path = _write_spec(where, spec)
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)}
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.e2e.resumer",
            str(path),
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(2)
    ]
    told = []
    for process in processes:
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, err.decode()
        told.append(json.loads(out.decode().strip().splitlines()[-1])["told"])
    return told


if __name__ == "__main__":
    asyncio.run(_main(json.loads(Path(sys.argv[1]).read_text("utf-8"))))
