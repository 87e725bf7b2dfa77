"""LangGraph: a thread's pending ``interrupt()`` → Countersign; decision → ``Command(resume=…)``.

Two ways to pause are supported, and both surface the same interrupt value (LangChain's
``ToolApprovalRequest``: ``type="tool_approval"``, ``tool_call_id``, ``name``, ``args``):

- LangChain's ``HumanInTheLoopMiddleware(interrupt_on={...}, interrupt_mode="per_call")`` —
  one interrupt per gated tool call, answered with one decision keyed by the interrupt id;
- your own node calling ``interrupt(tool_approval_request(tool_call))`` and acting on the
  decision it returns (``{"type": "approve"}`` or ``{"type": "reject", "message": …}``).

The adapter reads the pending interrupts from the thread's checkpointed state, submits each
(``framework="langgraph"``, ``request_id`` = the interrupt id, ``session_id`` = the thread id)
and turns a decision into ``Command(resume={interrupt_id: decision})`` — never a bare value —
only after it has checked, against the thread's state *at that moment*, that the interrupt is
still pending and that every echoed field of the decision matches it. The tool runs with the
arguments stored in the checkpoint, unless a reviewer edited the call in Countersign: then the
decision is the middleware's ``edit``, with exactly the edited arguments (checked against their
hash and patch), where the interrupt allows ``edit`` (``allowed_decisions=["approve", "edit",
"reject"]``); the middleware runs the call once with them and tells the model. An interrupt that
allows no ``edit`` gets a ``reject`` telling the model what was approved, to call again with.

An approved call runs at most once: ``resume_command`` claims its execution before it returns
the ``approve``. Claimed by another worker already, it raises ``errors.AlreadyClaimed`` and
resumes nothing: the checkpoint store is usually shared, and a ``reject`` written by the
duplicate could overtake the claimer's run, so the thread is left to the worker that holds the
claim (its model reads the real result). Lapsed or otherwise refused, the command carries a
``reject`` whose message says so (the model reads "approval lapsed, not executed; ask again").
:meth:`LangGraphApprovals.resume` runs the graph on and reports each claimed call's outcome (from
its ``ToolMessage``); with your own ``ainvoke``, call ``report_outcomes`` afterwards.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, Unpack

from langchain.agents.middleware.human_in_the_loop import (
    ApproveDecision,
    EditDecision,
    RejectDecision,
    ToolApprovalRequest,
)
from langchain_core.messages import BaseMessage, ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, Interrupt, StateSnapshot

from countersign_client import errors, execution
from countersign_client.adapters import _common
from countersign_client.adapters._common import NOT_EXECUTED, SUMMARY_LIMIT
from countersign_client.adapters._common import denial_text as denial_message
from countersign_client.client import CountersignClient
from countersign_client.models import Approval

__all__ = [
    "NOT_EXECUTED",
    "Decision",
    "LangGraphApprovals",
    "PendingInterrupt",
    "decision_value",
    "denial_message",
    "pending_interrupts",
    "tool_approval_request",
]

log = logging.getLogger(__name__)

FRAMEWORK = "langgraph"
# LangGraph reads a resume dict as an id map only when *every* key looks like an interrupt id;
# otherwise the whole dict silently becomes a bare resume value for "the next interrupt".
_INTERRUPT_ID = re.compile(r"^[0-9a-f]{32}$")
_OURS = frozenset({"approve", "reject"})

Decision = ApproveDecision | EditDecision | RejectDecision
"""The resume value: HumanInTheLoopMiddleware's own decision format; ``edit`` only for a call a
reviewer edited in Countersign, with exactly the arguments approved (docs/edits.md)."""


class StatefulGraph(Protocol):
    """What the adapter needs of a compiled graph (``CompiledStateGraph``, ``Pregel``)."""

    def get_state(self, config: RunnableConfig, *, subgraphs: bool = False) -> StateSnapshot: ...

    async def aget_state(
        self, config: RunnableConfig, *, subgraphs: bool = False
    ) -> StateSnapshot: ...

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any: ...

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Any: ...


@dataclass(frozen=True)
class PendingInterrupt(_common.InterruptedCall):
    """One tool call a thread is paused on, as its checkpoint holds it."""

    description: str = ""
    allowed: frozenset[str] | None = field(default=None, compare=False)


def tool_approval_request(tool_call: ToolCall, description: str = "") -> ToolApprovalRequest:
    """The interrupt value for a raw ``interrupt()`` node: the middleware's own shape."""
    call_id = tool_call.get("id")
    if not call_id:
        raise ValueError(f"tool call {tool_call['name']!r} has no id; it cannot be bound")
    return ToolApprovalRequest(
        type="tool_approval",
        tool_call_id=call_id,
        name=tool_call["name"],
        args=dict(tool_call["args"]),
        description=description,
    )


def _allowed_decisions(schema: object) -> frozenset[str] | None:
    """The decision types an interrupt's ``response_schema`` admits (None: not declared)."""
    if not isinstance(schema, Mapping):
        return None
    discriminator = schema.get("discriminator")
    if isinstance(discriminator, Mapping) and isinstance(discriminator.get("mapping"), Mapping):
        return frozenset(str(k) for k in discriminator["mapping"])
    properties = schema.get("properties")
    kind = properties.get("type") if isinstance(properties, Mapping) else None
    const = kind.get("const") if isinstance(kind, Mapping) else None
    return frozenset({const}) if isinstance(const, str) else None


def _parse(item: Interrupt, thread_id: str) -> PendingInterrupt | None:
    """A tool-approval interrupt as a PendingInterrupt; None for interrupts that aren't ours."""
    value = item.value
    if not isinstance(value, Mapping):
        return None
    if "action_requests" in value:
        raise ValueError(
            "HumanInTheLoopMiddleware in batched mode answers several calls by position; "
            "use interrupt_mode='per_call' so each call is approved and bound on its own"
        )
    if value.get("type") != "tool_approval":
        return None
    call_id, name, args = value.get("tool_call_id"), value.get("name"), value.get("args")
    if not (isinstance(call_id, str) and call_id and isinstance(name, str)):
        raise ValueError(f"interrupt {item.id}: a tool approval needs tool_call_id and name")
    if not isinstance(args, Mapping):
        raise ValueError(f"interrupt {item.id}: tool arguments must be an object")
    description = value.get("description")
    return PendingInterrupt(
        interrupt_id=item.id,
        thread_id=thread_id,
        tool=name,
        call_id=call_id,
        arguments=dict(args),
        description=description if isinstance(description, str) else "",
        allowed=_allowed_decisions(item.response_schema),
    )


def pending_interrupts(snapshot: StateSnapshot, thread_id: str) -> list[PendingInterrupt]:
    """The tool approvals the thread is paused on, in the order LangGraph lists them."""
    found: dict[str, PendingInterrupt] = {}
    for item in (*snapshot.interrupts, *(i for t in snapshot.tasks for i in t.interrupts)):
        parsed = _parse(item, thread_id)
        if parsed is not None:
            found.setdefault(parsed.interrupt_id, parsed)
    return list(found.values())


def decision_value(decision: Approval, call: PendingInterrupt | None = None) -> Decision:
    """The middleware's decision for a settled approval: approve, or reject with the reason.

    Expired and cancelled are rejections (fail closed). Approved with a reviewer's edit: the
    middleware's ``edit`` with exactly the edited arguments, where the interrupt accepts one
    (``call.allowed``: HumanInTheLoopMiddleware with ``"edit"`` allowed runs the call once with
    them, and tells the model it was replaced and with what); elsewhere a reject telling the
    model what was approved instead, to call again with (never the requested arguments).
    """
    if not decision.settled:
        raise ValueError(f"approval {decision.approval_id} is still pending")
    edit = decision.edit if decision.approved else None
    if edit is not None:
        tool = call.tool if call is not None else decision.tool.name
        if call is not None and call.allowed is not None and "edit" in call.allowed:
            return EditDecision(
                type="edit", edited_action={"name": tool, "args": dict(edit.arguments)}
            )
        return RejectDecision(type="reject", message=_common.recall_text(decision, tool))
    if decision.approved:
        return ApproveDecision(type="approve")
    return RejectDecision(type="reject", message=denial_message(decision))


def thread_id_of(config: RunnableConfig) -> str:
    """The thread a config addresses; refuses configs pinned to an older checkpoint."""
    configurable = config.get("configurable") or {}
    if configurable.get("checkpoint_id"):
        raise ValueError(
            "config names a checkpoint_id: resuming there would fork the thread from an old "
            "checkpoint; pass only the thread_id"
        )
    thread_id = configurable.get("thread_id")
    if thread_id is None or not str(thread_id).strip():
        raise ValueError("config has no configurable.thread_id")
    return str(thread_id)


async def read_state(graph: StatefulGraph, config: RunnableConfig) -> StateSnapshot:
    """The thread's latest state (a sync-only checkpointer such as SqliteSaver is read in a
    worker thread)."""
    try:
        return await graph.aget_state(config)
    except NotImplementedError:
        return await asyncio.to_thread(graph.get_state, config)


def _tool_results(messages: list[BaseMessage]) -> dict[str, ToolMessage]:
    """The last ToolMessage of each tool call id in a thread's messages."""
    return {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}


class LangGraphApprovals(_common.Adapter):
    """Submits a thread's pending tool approvals and maps decisions back, bound and checked.

    Nothing here must survive a restart: the approval id of each interrupt is remembered in
    memory and, after a restart, recovered by submitting again (idempotent on the same ids and
    content).
    """

    framework = FRAMEWORK
    log = log

    def __init__(self, client: CountersignClient, **settings: Unpack[_common.Settings]) -> None:
        super().__init__(client, **settings)
        self._approval_ids: dict[tuple[str, str], str] = {}
        # claimed, outcome not reported yet: (thread id, tool call id) -> the attempt
        self._claims: dict[tuple[str, str], execution.Attempt] = {}

    async def pending(self, graph: StatefulGraph, config: RunnableConfig) -> list[PendingInterrupt]:
        """The tool approvals the thread of ``config`` is paused on right now."""
        return pending_interrupts(await read_state(graph, config), thread_id_of(config))

    async def submit(self, call: PendingInterrupt) -> Approval:
        """Hand one pending interrupt to Countersign (same ids and content: same approval)."""
        if call.allowed is not None and not call.allowed >= _OURS:
            raise ValueError(
                f"tool {call.tool!r} does not allow both approve and reject "
                f"(allowed_decisions: {sorted(call.allowed)})"
            )
        if call.allowed is not None and call.allowed - _OURS - {"edit"}:
            log.warning(
                "interrupt also accepts %s: another client of this thread could skip the call; "
                "Countersign never sends that (set allowed_decisions to "
                "['approve', 'edit', 'reject'])",
                sorted(call.allowed - _OURS - {"edit"}),
                extra={"framework": FRAMEWORK, "tool": call.tool},
            )
        approval = await self._submit_interrupted(call, call.description[:SUMMARY_LIMIT])
        self._approval_ids[(call.thread_id, call.interrupt_id)] = approval.approval_id
        return approval

    async def submit_pending(
        self, graph: StatefulGraph, config: RunnableConfig
    ) -> list[tuple[PendingInterrupt, Approval]]:
        """Submit every tool approval the thread is paused on; each with its approval."""
        return [(call, await self.submit(call)) for call in await self.pending(graph, config)]

    async def resume_command(
        self, graph: StatefulGraph, config: RunnableConfig, *decisions: Approval
    ) -> Command[Any]:
        """``Command(resume={interrupt_id: decision, …})`` for settled decisions.

        Raises BindingMismatch (and logs) unless each decision is for an interrupt still pending
        in this very thread and echoes its approval id, request id, session id, tool, call id
        and arguments hash. Raises ValueError for a pending decision or a repeated interrupt.
        Each approval is claimed here, once: claimed by another worker already, raises
        ``errors.AlreadyClaimed``; otherwise refused (lapsed), it becomes a ``reject`` saying why.
        """
        if not decisions:
            raise ValueError("no decision to resume with")
        thread_id = thread_id_of(config)
        pending = {p.interrupt_id: p for p in await self.pending(graph, config)}
        resume: dict[str, Decision] = {}
        run_sha256: dict[str, str | None] = {}  # what each claim names: an edit's hash
        for decision in decisions:
            call = await self._check(decision, thread_id, pending)
            if call.interrupt_id in resume:
                raise ValueError(f"two decisions for interrupt {call.interrupt_id}")
            resume[call.interrupt_id] = decision_value(decision, call)
            run_sha256[call.interrupt_id] = decision.run_sha256 if decision.edit else None
        for call_key, value in list(resume.items()):
            if value["type"] not in ("approve", "edit"):
                continue
            call = pending[call_key]
            approval_id = self._approval_ids[(thread_id, call.interrupt_id)]
            attempt = execution.Attempt(self._client, approval_id)
            refused = await attempt.claim(
                call.bound_to(approval_id), call.tool, run_sha256=run_sha256[call_key]
            )
            if isinstance(attempt.refusal, errors.AlreadyClaimed):
                raise attempt.refusal  # another worker runs it: leave its thread alone
            if refused is None:
                self._claims[(thread_id, call.call_id)] = attempt
            else:
                resume[call_key] = RejectDecision(type="reject", message=refused)
        return Command(resume=resume)

    async def resume(
        self, graph: StatefulGraph, config: RunnableConfig, *decisions: Approval
    ) -> Any:
        """:meth:`resume_command`, run the graph on with it, then :meth:`report_outcomes`.
        Returns what the graph's invoke returned."""
        command = await self.resume_command(graph, config, *decisions)
        try:
            try:
                result = await graph.ainvoke(command, config)
            except NotImplementedError:  # a sync-only checkpointer: the sync API, in a thread
                result = await asyncio.to_thread(graph.invoke, command, config)
        except Exception as exc:
            await self.report_outcomes(graph, config, error=exc)
            raise
        await self.report_outcomes(graph, config)
        return result

    async def report_outcomes(
        self, graph: StatefulGraph, config: RunnableConfig, *, error: BaseException | None = None
    ) -> None:
        """Report the outcome of each call claimed on this thread, read from its
        ``ToolMessage`` (``status="error"``: error). A call with no ToolMessage yet is left for
        a later report, unless the run failed (``error``). Never raises for a lost report."""
        thread_id = thread_id_of(config)
        mine = {k: a for k, a in self._claims.items() if k[0] == thread_id}
        if not mine:
            return
        messages = (await read_state(graph, config)).values.get("messages", [])
        results = _tool_results(messages if isinstance(messages, list) else [])
        for (_, call_id), attempt in mine.items():
            message = results.get(call_id)
            if message is not None:
                if message.status == "error":
                    await attempt.report("error", "the tool's message has status error")
                else:
                    await attempt.report("ok")
            elif error is not None:
                await attempt.report("error", f"run {execution.error_detail(error)}")
            else:
                continue
            del self._claims[(thread_id, call_id)]

    async def _check(
        self, decision: Approval, thread_id: str, pending: Mapping[str, PendingInterrupt]
    ) -> PendingInterrupt:
        if decision.session_id != thread_id:
            raise self._refuse(decision, "session_id", thread_id, decision.session_id)
        call = pending.get(decision.request_id)
        if call is None:
            raise self._refuse(decision, "request_id", sorted(pending), decision.request_id)
        if not _INTERRUPT_ID.fullmatch(call.interrupt_id):
            raise ValueError(f"interrupt id {call.interrupt_id!r} is not one LangGraph can key")
        approval_id = self._approval_ids.get((thread_id, call.interrupt_id))
        if approval_id is None:  # after a restart: the server knows, idempotently
            approval_id = (await self.submit(call)).approval_id
        self._check_echoes(decision, call.tool, call.bound_to(approval_id))
        return call
