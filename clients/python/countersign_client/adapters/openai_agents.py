"""OpenAI Agents SDK (``openai-agents``): a run's interruptions (tools with ``needs_approval``) go
to Countersign; a decision comes back as ``RunState.approve(item)`` or
``RunState.reject(item, rejection_message=…)`` on the saved state, and the run resumes from it.

A :class:`PausedRun` is the paused run as the agent keeps it: the ``RunState`` and, per approval
id, the call Countersign holds for it; the run goes on once all of them are decided. Persist it
with :meth:`PausedRun.to_json` (the RunState's own JSON inside) and rebuild it with
:meth:`PausedRun.from_json` after a restart. A decision is applied only when every echoed field
matches a call still pending both in that record and in the RunState's interruptions; the SDK then
runs the arguments it recorded, never the decision's.

An approved call runs at most once: once the whole pause is decided, :meth:`resume` claims the
execution of each approved call, then approves it in the RunState — or, when the claim is refused
(another process or a duplicate resume ran it already, or the approval lapsed), rejects it with a
message saying so, which the model reads as the tool's output. After the run it reports
``ok``/``error`` for each claimed call.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any, Literal

from agents import (
    Agent,
    RunConfig,
    RunContextWrapper,
    RunHooks,
    Runner,
    RunResult,
    RunResultStreaming,
    RunState,
    Tool,
)
from agents.items import ToolApprovalItem
from agents.run_state import ContextDeserializer, ContextSerializer

from countersign_client import execution
from countersign_client.adapters import _common
from countersign_client.adapters._common import NOT_EXECUTED, denial_text, recall_text
from countersign_client.binding import PendingCall, arguments_sha256, check_binding, check_edit
from countersign_client.errors import BindingMismatch
from countersign_client.models import Approval

__all__ = ["NOT_EXECUTED", "OpenAIAgentsApprovals", "PausedRun", "denial_text", "runs_as_recorded"]

log = logging.getLogger(__name__)


@dataclass
class PausedRun:
    """A run paused on approvals: its RunState, the pending calls and the approved calls not
    yet claimed, by approval id."""

    session_id: str
    state: RunState[Any]
    pending: dict[str, PendingCall] = field(default_factory=dict)
    approved: dict[str, PendingCall] = field(default_factory=dict)

    def to_json(self, *, context_serializer: ContextSerializer | None = None) -> str:
        """Everything needed to resume in another process, as one JSON string."""
        return json.dumps(
            {
                "session_id": self.session_id,
                "pending": [dataclasses.asdict(call) for call in self.pending.values()],
                "approved": [dataclasses.asdict(call) for call in self.approved.values()],
                "run_state": self.state.to_json(context_serializer=context_serializer),
            }
        )

    @classmethod
    async def from_json(
        cls,
        agent: Agent[Any],
        text: str,
        *,
        context_deserializer: ContextDeserializer | None = None,
    ) -> PausedRun:
        """Rebuild a paused run saved by :meth:`to_json`, for its starting ``agent``."""
        data = json.loads(text)
        state = await RunState.from_json(
            agent, data["run_state"], context_deserializer=context_deserializer
        )
        pending = [PendingCall(**call) for call in data["pending"]]
        approved = [PendingCall(**call) for call in data.get("approved", [])]
        return cls(
            data["session_id"],
            state,
            {call.approval_id: call for call in pending},
            {call.approval_id: call for call in approved},
        )


class OpenAIAgentsApprovals(_common.Adapter):
    """``submit`` a run's interruptions; ``resume`` it with a decision bound to one of them."""

    framework = "openai-agents"
    log = log

    async def submit(
        self,
        run: RunResult | RunResultStreaming | RunState[Any],
        *,
        session_id: str,
        summary: str = "",
    ) -> PausedRun:
        """Hand every interruption of ``run`` to Countersign; the paused run to persist.

        The request id is the tool call id plus a token minted for this pause: models and
        providers do reuse call ids, and a reused id must get a new decision, never an old one.
        """
        state = run if isinstance(run, RunState) else run.to_state()
        paused = PausedRun(session_id, state)
        pause = secrets.token_hex(6)
        for item in state.get_interruptions():
            call_id = str(item.call_id)
            request_id = f"{call_id}@{pause}"
            arguments = _arguments(item)
            approval = await self._submit(
                request_id=request_id,
                session_id=session_id,
                tool=str(item.name),
                call_id=call_id,
                arguments=arguments,
                summary=summary,
            )
            pending = PendingCall(approval.approval_id, request_id, session_id, call_id, arguments)
            check_binding(approval, pending)  # the server bound exactly what the SDK will run
            paused.pending[approval.approval_id] = pending
        return paused

    def bind(self, paused: PausedRun, decision: Approval) -> None:
        """Take ``decision`` for a call of ``paused``: a denial is applied at once
        (``reject(item, rejection_message=…)``), an approval waits in ``paused.approved`` for
        :meth:`resume` to claim its execution. Raises BindingMismatch (logged) when any echoed
        field differs from a call pending in ``paused``; nothing is applied then. A bound
        decision is consumed.
        """
        item = self._bound(decision, lambda: _bound_item(paused, decision))
        pending = paused.pending.pop(decision.approval_id)
        if runs_as_recorded(decision):
            paused.approved[decision.approval_id] = pending
        elif decision.approved:
            # approved only with a reviewer's edit: the SDK runs what it recorded, never other
            # arguments, so the call is refused and the model told what to call again with
            paused.state.reject(item, rejection_message=recall_text(decision, str(item.name)))
        else:
            paused.state.reject(item, rejection_message=denial_text(decision))
        log.info(
            "decision bound to run",
            extra={"approval_id": decision.approval_id, "status": decision.status},
        )

    async def resume(
        self,
        agent: Agent[Any],
        paused: PausedRun,
        decision: Approval,
        *,
        run_config: RunConfig | None = None,
    ) -> RunResult | None:
        """:meth:`bind` ``decision``; once every call of the pause is decided, claim each
        approved call, run ``agent`` on from the paused state, report each claimed call's
        outcome and return the result (``None`` while others still wait)."""
        self.bind(paused, decision)
        if paused.pending:
            return None
        claims = await self._claim(paused)
        outcomes = _Outcomes()
        try:
            result = await Runner.run(agent, paused.state, run_config=run_config, hooks=outcomes)
        except Exception as exc:
            for call_id, attempt in claims.items():
                if call_id in outcomes.results:
                    await attempt.report(*_outcome(outcomes.results[call_id]))
                else:
                    await attempt.report("error", f"run {execution.error_detail(exc)}")
            raise
        for call_id, attempt in claims.items():
            if call_id in outcomes.results:
                await attempt.report(*_outcome(outcomes.results[call_id]))
            else:
                await attempt.report("error", "not run: the SDK did not invoke the tool")
        return result

    async def _claim(self, paused: PausedRun) -> dict[str, execution.Attempt]:
        """Claim every approved call of ``paused``: approve each one claimed, reject (saying
        why) each one refused. The claimed attempts, by the SDK's call id."""
        claims: dict[str, execution.Attempt] = {}
        for approval_id, pending in list(paused.approved.items()):
            del paused.approved[approval_id]
            items = [i for i in paused.state.get_interruptions() if i.call_id == pending.call_id]
            if len(items) != 1:
                raise BindingMismatch("tool.call_id", "one pending interruption", len(items))
            [item] = items
            attempt = execution.Attempt(self._client, approval_id)
            refused = await attempt.claim(pending, str(item.name))
            if refused is None:
                paused.state.approve(item)
                claims[pending.call_id] = attempt
            else:
                paused.state.reject(item, rejection_message=refused)
        return claims


class _Outcomes(RunHooks[Any]):
    """What each local tool returned, by call id (the SDK turns a raised error into its fixed
    error text; that text is how a failure shows)."""

    def __init__(self) -> None:
        self.results: dict[str, object] = {}

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object
    ) -> None:
        call_id = getattr(context, "tool_call_id", None)
        if call_id is not None:
            self.results[str(call_id)] = result


_SDK_TOOL_ERROR = "An error occurred while running the tool"


def _outcome(result: object) -> tuple[Literal["ok", "error"], str]:
    if str(result).startswith(_SDK_TOOL_ERROR):
        return "error", "the tool raised (the SDK's error result)"
    return "ok", ""


def _arguments(item: ToolApprovalItem) -> dict[str, Any]:
    """The call's arguments as a dict (``{"raw": …}`` when the model sent no JSON object)."""
    raw = item.arguments
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {"raw": raw}
    return parsed if isinstance(parsed, dict) else {"raw": parsed}


def _bound_item(paused: PausedRun, decision: Approval) -> ToolApprovalItem:
    """The interruption ``decision`` is for; BindingMismatch naming the first field that differs
    (check_binding's, then the RunState's own record of the call, the echoes and ``resume``)."""
    pending = paused.pending.get(decision.approval_id)
    if pending is None:
        raise BindingMismatch("approval_id", sorted(paused.pending), decision.approval_id)
    check_binding(decision, pending)
    items = [i for i in paused.state.get_interruptions() if i.call_id == pending.call_id]
    if len(items) != 1:
        raise BindingMismatch("tool.call_id", "one pending interruption", len(items))
    [item] = items
    resume = decision.resume or {}
    for name, expected, got in (
        ("arguments_sha256", arguments_sha256(_arguments(item)), pending.arguments_sha256),
        ("tool.name", item.name, decision.tool.name),
        ("tool.arguments", pending.arguments_sha256, arguments_sha256(decision.tool.arguments)),
        ("resume.call_id", pending.call_id, resume.get("call_id", pending.call_id)),
        # approved with an edit, the server's resume refuses the call (the SDK would run the
        # arguments it recorded): see bind
        ("resume.approve", runs_as_recorded(decision), resume.get("approve", decision.approved)),
    ):
        if expected != got:
            raise BindingMismatch(name, expected, got)
    check_edit(decision)
    return item


def runs_as_recorded(decision: Approval) -> bool:
    """Whether ``decision`` lets the SDK run the call as it recorded it: approved, unedited."""
    return decision.approved and decision.edit is None
