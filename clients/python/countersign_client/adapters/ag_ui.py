"""AG-UI: a ``RUN_FINISHED`` interrupt outcome → Countersign; the decision → a ``resume`` entry.

An AG-UI run that needs approval ends with ``RUN_FINISHED`` whose ``outcome`` is
``{"type": "interrupt", "interrupts": [...]}``; a tool approval is an interrupt with
``reason: "tool_call"`` and a ``toolCallId``. The interrupt does not repeat the tool's name or
arguments: they are in the same run's ``TOOL_CALL_START`` / ``TOOL_CALL_ARGS`` (or
``TOOL_CALL_CHUNK``, or a ``MESSAGES_SNAPSHOT``), so :class:`RunTranscript` collects the run's
events and pairs each interrupt with the call it names.

The next run on the thread carries ``RunAgentInput.resume``: one entry per open interrupt,
``{"interruptId", "status": "resolved", "payload": {"approved": …}}`` or
``{"interruptId", "status": "cancelled"}`` (expired or withdrawn: fail closed). Every entry and
the whole input are validated against the ``ag-ui-protocol`` models before they are returned,
and each entry is produced only for a decision whose echoed fields match the interrupt still
open in that thread.

An approved call runs at most once: :meth:`AgUiApprovals.resume_entry` claims its execution
before it answers ``approved: true``; when the claim is refused (another client or a duplicate
resume holds it, or the approval lapsed) the entry is ``approved: false`` with a reason saying
so, and the agent does not run the tool. Feed the resumed run's events to
:meth:`AgUiApprovals.report_run`: a ``TOOL_CALL_RESULT`` for a claimed call reports ``ok``, a
``RUN_ERROR`` reports ``error``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Unpack

from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    Event,
    MessagesSnapshotEvent,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.core import Interrupt as AgUiInterrupt
from pydantic import BaseModel, TypeAdapter

from countersign_client import execution
from countersign_client.adapters import _common
from countersign_client.adapters._common import NOT_EXECUTED, SUMMARY_LIMIT
from countersign_client.adapters._common import denial_text as denial_message
from countersign_client.client import CountersignClient
from countersign_client.models import Approval

__all__ = [
    "NOT_EXECUTED",
    "AgUiApprovals",
    "PendingToolInterrupt",
    "RunTranscript",
    "resume_payload",
]

log = logging.getLogger(__name__)

FRAMEWORK = "ag-ui"
TOOL_CALL = "tool_call"  # the spec's core reason for an interrupt bound to a tool call
_EVENT: TypeAdapter[Event] = TypeAdapter(Event)


@dataclass(frozen=True)
class PendingToolInterrupt(_common.InterruptedCall):
    """A tool call an interrupted run is waiting on, with what the run proposed to execute."""

    run_id: str
    message: str = ""


class RunTranscript:
    """One run's events as the client received them: the calls it proposed, how it ended."""

    def __init__(self, events: Iterable[BaseEvent | Mapping[str, Any]] = ()) -> None:
        self._names: dict[str, str] = {}
        self._args: dict[str, list[str]] = {}
        self._snapshot: dict[str, tuple[str, str]] = {}
        self._chunking: str | None = None
        self.finished: RunFinishedEvent | None = None
        self.results: set[str] = set()  # tool call ids the run has a TOOL_CALL_RESULT for
        self.error: RunErrorEvent | None = None
        for event in events:
            self.add(event)

    def add(self, event: BaseEvent | Mapping[str, Any]) -> None:
        """Record one event (a model, or its wire JSON as a dict: validated here)."""
        parsed = event if isinstance(event, BaseEvent) else _EVENT.validate_python(event)
        if self.finished is not None:
            raise ValueError("the run already finished; start a new transcript for the next run")
        match parsed:
            case ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name):
                self._open(call_id, name)
            case ToolCallArgsEvent(tool_call_id=call_id, delta=delta):
                self._args.setdefault(call_id, []).append(delta)
            case ToolCallChunkEvent():
                self._chunk(parsed)
            case MessagesSnapshotEvent(messages=messages):
                for message in messages:
                    if not isinstance(message, AssistantMessage):
                        continue
                    for call in message.tool_calls or ():
                        self._snapshot[call.id] = (call.function.name, call.function.arguments)
            case ToolCallResultEvent(tool_call_id=call_id):
                self.results.add(call_id)
            case RunErrorEvent():
                self.error = parsed
            case RunFinishedEvent():
                self.finished = parsed
            case _:
                pass

    def _open(self, call_id: str, name: str) -> None:
        if call_id in self._names:
            raise ValueError(f"tool call {call_id} started twice in one run")
        self._names[call_id] = name

    def _chunk(self, chunk: ToolCallChunkEvent) -> None:
        call_id = chunk.tool_call_id or self._chunking
        if call_id is None:
            raise ValueError("TOOL_CALL_CHUNK continues no open tool call")
        if call_id not in self._names:
            self._open(call_id, chunk.tool_call_name or "")
        self._chunking = call_id
        self._args.setdefault(call_id, []).append(chunk.delta or "")

    def tool_call(self, call_id: str) -> tuple[str, dict[str, Any]]:
        """The name and parsed arguments of a call this run proposed."""
        snapshot = self._snapshot.get(call_id)
        if call_id in self._names:
            name, text = self._names[call_id], "".join(self._args.get(call_id, ()))
        elif snapshot is not None:
            name, text = snapshot
        else:
            raise ValueError(f"tool call {call_id} was not proposed in this run")
        arguments = _arguments(call_id, text)
        if snapshot is not None and (snapshot[0], _arguments(call_id, snapshot[1])) != (
            name,
            arguments,
        ):
            raise ValueError(f"tool call {call_id}: the stream and the snapshot disagree")
        if not name:
            raise ValueError(f"tool call {call_id} has no tool name")
        return name, arguments

    def interrupts(self) -> list[AgUiInterrupt]:
        """Every interrupt the run ended with (none if it completed or was cancelled)."""
        if self.finished is None:
            raise ValueError("the run has not finished (no RUN_FINISHED event yet)")
        outcome = self.finished.outcome
        return list(outcome.interrupts) if isinstance(outcome, RunFinishedInterruptOutcome) else []

    def pending(self) -> list[PendingToolInterrupt]:
        """The run's tool-call interrupts, each with the call it names."""
        found: list[PendingToolInterrupt] = []
        for item in self.interrupts():
            if item.reason != TOOL_CALL:
                continue
            if not item.tool_call_id:
                raise ValueError(f"interrupt {item.id}: reason tool_call needs a toolCallId")
            name, arguments = self.tool_call(item.tool_call_id)
            assert self.finished is not None
            found.append(
                PendingToolInterrupt(
                    thread_id=self.finished.thread_id,
                    run_id=self.finished.run_id,
                    interrupt_id=item.id,
                    call_id=item.tool_call_id,
                    tool=name,
                    arguments=arguments,
                    message=item.message or "",
                )
            )
        return found


def _arguments(call_id: str, text: str) -> dict[str, Any]:
    try:
        arguments = json.loads(text or "{}")
    except ValueError:
        raise ValueError(f"tool call {call_id}: arguments are not JSON") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"tool call {call_id}: arguments are not a JSON object")
    return arguments


def resume_payload(decision: Approval, refused: str | None = None) -> dict[str, Any]:
    """The wire ``resume`` entry for a settled decision (camelCase, before validation);
    ``refused``: an approval whose claim to run was refused, answered not approved, saying why."""
    if not decision.settled:
        raise ValueError(f"approval {decision.approval_id} is still pending")
    metadata: dict[str, Any] = {
        "approval_id": decision.approval_id,
        "status": decision.status,
        "tool_call_id": decision.tool.call_id,
        "arguments_sha256": decision.arguments_sha256,
        "decided_by": [d.slack_user_id for d in decision.decided_by],
    }
    entry: dict[str, Any] = {"interruptId": decision.request_id}
    if decision.status in ("expired", "cancelled"):
        metadata["reason"] = denial_message(decision)
        entry["status"] = "cancelled"
    else:
        payload: dict[str, Any] = {"approved": decision.approved and refused is None}
        if not decision.approved:
            payload["reason"] = denial_message(decision)
        elif refused is not None:
            payload["reason"] = refused
            metadata["refused"] = refused
        entry.update(status="resolved", payload=payload)
    entry["metadata"] = {"countersign": metadata}
    return entry


def _entry(wire: dict[str, Any]) -> ResumeEntry:
    """``wire`` as a ResumeEntry, refusing anything the model would drop or reshape."""
    entry = ResumeEntry.model_validate(wire)
    if _wire(entry) != json.loads(json.dumps(wire)):
        raise ValueError(f"resume entry does not round-trip through ResumeEntry: {wire!r}")
    return entry


def _wire(model: BaseModel) -> dict[str, Any]:
    """A protocol model as it goes on the wire (camelCase, absent rather than null)."""
    return model.model_dump(mode="json", by_alias=True)


@dataclass
class _Thread:
    """The interrupts a thread's last run ended with, and the entries answering them."""

    run_id: str
    tool: dict[str, tuple[PendingToolInterrupt, str]]  # interrupt id → (call, approval id)
    others: list[str]  # interrupts that are not tool approvals: the application answers them
    order: list[str]
    answered: dict[str, ResumeEntry] = field(default_factory=dict)


class AgUiApprovals(_common.Adapter):
    """Submits a run's tool-call interrupts and turns decisions into checked resume entries."""

    framework = FRAMEWORK
    log = log

    def __init__(self, client: CountersignClient, **settings: Unpack[_common.Settings]) -> None:
        super().__init__(client, **settings)
        self._threads: dict[str, _Thread] = {}
        self._claims: dict[str, execution.Attempt] = {}  # tool call id -> claimed, unreported

    async def submit_run(
        self, run: RunTranscript | Iterable[BaseEvent | Mapping[str, Any]]
    ) -> list[tuple[PendingToolInterrupt, Approval]]:
        """Submit every tool-call interrupt the run ended with (idempotent: after a restart,
        feed the same events again and get the same approvals). The thread's earlier open
        interrupts, if any, are superseded by this run's."""
        transcript = run if isinstance(run, RunTranscript) else RunTranscript(run)
        calls = transcript.pending()
        interrupts = transcript.interrupts()
        submitted = [
            (call, await self._submit_interrupted(call, call.message[:SUMMARY_LIMIT]))
            for call in calls
        ]
        if transcript.finished is not None and interrupts:
            tool_ids = {c.interrupt_id for c in calls}
            self._threads[transcript.finished.thread_id] = _Thread(
                run_id=transcript.finished.run_id,
                tool={c.interrupt_id: (c, a.approval_id) for c, a in submitted},
                others=[i.id for i in interrupts if i.id not in tool_ids],
                order=[i.id for i in interrupts],
            )
        return submitted

    async def resume_entry(self, decision: Approval) -> ResumeEntry:
        """The checked, validated resume entry for a settled decision; an approval is claimed
        here (refused: the entry says not approved, and why).

        Raises BindingMismatch (and logs) unless the decision is for a tool-call interrupt still
        open (and not yet answered) in its thread, echoing its approval id, request id, session
        id, tool, call id and arguments hash.
        """
        thread = self._threads.get(decision.session_id)
        if thread is None:
            raise self._refuse(decision, "session_id", sorted(self._threads), decision.session_id)
        open_ids = sorted(set(thread.tool) - set(thread.answered))
        if decision.request_id not in open_ids:
            raise self._refuse(decision, "request_id", open_ids, decision.request_id)
        call, approval_id = thread.tool[decision.request_id]
        self._check_echoes(decision, call.tool, call.bound_to(approval_id))
        refused = None
        if decision.approved and decision.edit is not None:
            # approved only with a reviewer's edit: answered not approved, telling the model
            # the exact arguments to call again with (the agent would run the ones it recorded)
            refused = _common.recall_text(decision, call.tool)
        elif decision.approved:
            attempt = execution.Attempt(self._client, approval_id)
            refused = await attempt.claim(call.bound_to(approval_id), call.tool)
            if refused is None:
                self._claims[call.call_id] = attempt
        entry = _entry(resume_payload(decision, refused))
        thread.answered[call.interrupt_id] = entry
        return entry

    async def report_run(
        self, run: RunTranscript | Iterable[BaseEvent | Mapping[str, Any]]
    ) -> None:
        """Report the outcome of each claimed call from the resumed run's events: its
        ``TOOL_CALL_RESULT`` is ``ok``; a ``RUN_ERROR`` without one is ``error``. A call the run
        says nothing about is left for a later run's report. Never raises for a lost report."""
        transcript = run if isinstance(run, RunTranscript) else RunTranscript(run)
        for call_id in list(self._claims):
            if call_id in transcript.results:
                await self._claims.pop(call_id).report("ok")
            elif transcript.error is not None:
                code = transcript.error.code or "RUN_ERROR"
                await self._claims.pop(call_id).report("error", f"the run failed ({code})"[:80])

    def resume_input(
        self,
        thread_id: str,
        *,
        run_id: str,
        messages: Sequence[BaseModel | Mapping[str, Any]] = (),
        others: Sequence[ResumeEntry] = (),
        **fields: Any,
    ) -> RunAgentInput:
        """The next run's input: ``resume`` answers every interrupt the last run ended with.

        Tool approvals come from :meth:`resume_entry`; ``others`` answers the interrupts that
        are not tool approvals (and may not answer a tool approval). ``fields`` are further
        RunAgentInput fields by wire name (``state``, ``tools``, ``forwardedProps``…).
        """
        thread = self._threads.get(thread_id)
        if thread is None:
            raise ValueError(f"thread {thread_id!r} has no open interrupts")
        extra = {e.interrupt_id: e for e in others}
        if stray := sorted(set(extra) - set(thread.others)):
            raise ValueError(f"'others' may answer only non-approval interrupts, not {stray}")
        answers = {**extra, **thread.answered}
        if missing := [i for i in thread.order if i not in answers]:
            raise ValueError(f"every open interrupt needs an answer; missing {missing}")
        resume = [_wire(answers[i]) for i in thread.order]
        wire: dict[str, Any] = {
            **fields,
            "threadId": thread_id,
            "runId": run_id,
            "messages": [_wire(m) if isinstance(m, BaseModel) else dict(m) for m in messages],
            "resume": resume,
        }
        run_input = RunAgentInput.model_validate(wire)
        if [_wire(e) for e in run_input.resume or ()] != resume:
            raise ValueError("resume does not round-trip through RunAgentInput")
        del self._threads[thread_id]  # answered: nothing is open on the thread any more
        return run_input
