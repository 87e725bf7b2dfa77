"""Microsoft Agent Framework (``agent-framework-core``): its pending function approval requests go
to Countersign; a decision comes back as the framework's own ``function_approval_response``, sent
in the same :class:`~agent_framework.AgentSession`.

What is pending lives in ``session.state["countersign"]["pending"]`` (serialised with the
session), keyed by approval id: the framework-minted request (``Content.id``, not the model's
``call_id``) exactly as the framework surfaced it. A decision is honoured only when every echoed
field matches that record; the response is built from the recorded request, never from the
decision, so the approver cannot change the arguments that run.

On a denial MAF gives the model a fixed ``"Error: Tool call invocation was rejected by user."``;
a chat middleware of the resuming run puts the reason and "not executed" into that very function
result, so it reaches the model where the model looks for it (and stays in the history). It needs
a client with ``ChatMiddlewareLayer`` (every MAF client has one); without it a warning is logged.

An approved call runs at most once: a function middleware of the resuming run claims the
execution right before MAF invokes the tool and reports ``ok``/``error`` after it returned. When
the claim is refused — another process or a duplicate resume ran it already, or the approval
lapsed (``valid_until``) — the tool is not invoked and its function result tells the model why.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from agent_framework import (
    Agent,
    AgentResponse,
    AgentSession,
    ChatContext,
    ChatMiddleware,
    Content,
    FunctionInvocationContext,
    FunctionMiddleware,
    Message,
)

from countersign_client import execution
from countersign_client.adapters import _common
from countersign_client.adapters._common import NOT_EXECUTED, denial_text, recall_text
from countersign_client.binding import PendingCall, arguments_sha256, check_binding, check_edit
from countersign_client.client import CountersignClient
from countersign_client.errors import BindingMismatch
from countersign_client.models import Approval

__all__ = ["NOT_EXECUTED", "STATE_KEY", "MafApprovals", "Resume", "denial_text"]

log = logging.getLogger(__name__)

STATE_KEY = "countersign"
HANDLED_ALREADY = (
    "Not executed: this approved call was already handled in this session (a resume replayed)."
)


class _ReasonInResult(ChatMiddleware):
    """Before each model call, replaces the text of the framework's rejection result of every
    call denied in the session with the denial text (once; the session's history keeps it)."""

    def __init__(self, denials: dict[str, Any]) -> None:
        self.denials = denials  # occurrence id -> {"call_id", "text"}, inside session.state

    async def process(self, context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        for message in context.messages:
            for content in message.contents:
                denial = self.denials.get(str(content.id))
                if (
                    content.type == "function_result"
                    and denial is not None
                    and denial["call_id"] == content.call_id
                ):
                    content.result = denial["text"]
                    content.items = [Content.from_text(denial["text"])]
                    del self.denials[str(content.id)]
        await call_next()


class _RunOnce(FunctionMiddleware):
    """Claims the execution of each call approved in the session right before MAF invokes it
    (refused: the tool is not invoked, its result says why), and reports the outcome after."""

    def __init__(
        self, client: CountersignClient, approved: dict[str, Any], handled: list[str]
    ) -> None:
        self.client = client
        self.approved = approved  # request id -> {"pending", "tool"}, inside session.state
        self.handled = handled  # request ids whose claim was asked, inside session.state

    async def process(
        self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]
    ) -> None:
        response = context.metadata.get("approval_response")
        if response is None:
            await call_next()  # no approval involved
            return
        request_id = str(response.id)
        record = self.approved.pop(request_id, None)
        if record is None:
            if request_id in self.handled:
                # the same approval response once more (a replayed resume): fail closed
                context.result = HANDLED_ALREADY
                return
            await call_next()  # not a call Countersign approved in this session
            return
        self.handled.append(request_id)
        pending = PendingCall(**record["pending"])
        attempt = execution.Attempt(self.client, pending.approval_id)
        refused = await attempt.claim(pending, record["tool"])
        if refused is not None:
            context.result = refused
            return
        try:
            await call_next()
        except Exception as exc:
            await attempt.report("error", execution.error_detail(exc))
            raise
        await attempt.report("ok")


@dataclass(frozen=True)
class Resume:
    """How to run the agent on: ``agent.run(messages, session=…, middleware=middleware)``."""

    messages: list[Message]
    middleware: list[ChatMiddleware | FunctionMiddleware]


class MafApprovals(_common.Adapter):
    """``submit`` an agent response's approval requests; ``resume`` the session with a decision."""

    framework = "maf"
    log = log

    async def submit(
        self, response: AgentResponse[Any], session: AgentSession, *, summary: str = ""
    ) -> list[Approval]:
        """Hand every ``function_approval_request`` in ``response.user_input_requests`` to
        Countersign and record it in ``session`` (persist the session afterwards)."""
        records = _state(session)["pending"]
        approvals = []
        for request in response.user_input_requests:
            if request.type != "function_approval_request" or request.function_call is None:
                continue
            call = request.function_call
            approval = await self._submit(
                request_id=str(request.id),
                session_id=session.session_id,
                tool=str(call.name),
                call_id=str(call.call_id),
                arguments=dict(call.parse_arguments() or {}),
                summary=summary,
            )
            # the server must have bound exactly what the framework will run
            check_binding(approval, _pending(approval.approval_id, request, session))
            records[approval.approval_id] = {"request": request.to_dict()}
            approvals.append(approval)
        return approvals

    def pending(self, session: AgentSession) -> list[str]:
        """The approval ids ``session`` still waits for (e.g. to long-poll after a restart)."""
        return list(_state(session)["pending"])

    def bind(self, decision: Approval, session: AgentSession) -> Resume:
        """Check ``decision`` against the request pending in ``session`` and consume it.

        Raises BindingMismatch (logged) when any echoed field differs; the request then stays
        pending. The response is the recorded request's own ``to_function_approval_response``.
        """
        request = self._bound(decision, lambda: _bound_request(decision, session))
        state = _state(session)
        del state["pending"][decision.approval_id]
        # approved with a reviewer's edit, MAF would run the call it recorded: it is refused,
        # and the model told what was approved instead (the server's resume says the same)
        runs = decision.approved and decision.edit is None
        if runs:
            # claimed when MAF is about to invoke it (maybe in a later run, once the batch is
            # decided); the record waits in the session until then
            state["approved"][str(request.id)] = {
                "pending": dataclasses.asdict(_pending(decision.approval_id, request, session)),
                "tool": decision.tool.name,
            }
        else:
            # MAF answers with its rejection result only once the whole batch is decided,
            # maybe in a later run: the text waits in the session until a model call shows it.
            call = cast(Content, request.function_call)
            text = (
                recall_text(decision, str(call.name))
                if decision.approved
                else denial_text(decision)
            )
            state["denials"][str(call.id)] = {"call_id": call.call_id, "text": text}
        log.info(
            "decision bound to session",
            extra={"approval_id": decision.approval_id, "status": decision.status},
        )
        response = request.to_function_approval_response(runs)
        return Resume(
            [Message("user", [response])],
            [
                _ReasonInResult(state["denials"]),
                _RunOnce(self._client, state["approved"], state["handled"]),
            ],
        )

    async def resume(
        self, agent: Agent[Any], decision: Approval, session: AgentSession
    ) -> AgentResponse[Any]:
        """Check ``decision`` against ``session`` and run ``agent`` on with it."""
        resume = self.bind(decision, session)
        result = await agent.run(resume.messages, session=session, middleware=resume.middleware)
        if _state(session)["denials"] and not result.user_input_requests:
            log.warning(  # a client without ChatMiddlewareLayer: the model saw MAF's fixed text
                "denial reason not delivered to the model",
                extra={"approval_id": decision.approval_id},
            )
        return result


def _state(session: AgentSession) -> dict[str, Any]:
    """Ours in ``session.state``: ``pending`` requests by approval id, undelivered ``denials``,
    ``approved`` calls not yet claimed (by request id), and those ``handled`` already."""
    state = cast(dict[str, Any], session.state.setdefault(STATE_KEY, {}))
    state.setdefault("pending", {})
    state.setdefault("denials", {})
    state.setdefault("approved", {})
    state.setdefault("handled", [])
    return state


def _pending(approval_id: str, request: Content, session: AgentSession) -> PendingCall:
    call = cast(Content, request.function_call)
    return PendingCall(
        approval_id=approval_id,
        request_id=str(request.id),
        session_id=session.session_id,
        call_id=str(call.call_id),
        arguments=dict(call.parse_arguments() or {}),
    )


def _bound_request(decision: Approval, session: AgentSession) -> Content:
    """The recorded request ``decision`` is for; BindingMismatch naming the first field that
    differs (check_binding's, then the tool name, the echoed arguments and ``resume``)."""
    records = _state(session)["pending"]
    if decision.approval_id not in records:
        raise BindingMismatch("approval_id", sorted(records), decision.approval_id)
    request = Content.from_dict(records[decision.approval_id]["request"])
    pending = _pending(decision.approval_id, request, session)
    check_binding(decision, pending)
    call = cast(Content, request.function_call)
    resume = decision.resume or {}
    resumed_call = resume.get("function_call") or {}
    for name, expected, got in (
        ("tool.name", call.name, decision.tool.name),
        ("tool.arguments", pending.arguments_sha256, arguments_sha256(decision.tool.arguments)),
        ("resume.id", pending.request_id, resume.get("id", pending.request_id)),
        (
            "resume.function_call.call_id",
            pending.call_id,
            resumed_call.get("call_id", pending.call_id),
        ),
        (
            "resume.approved",
            decision.approved and decision.edit is None,
            resume.get("approved", decision.approved),
        ),
    ):
        if expected != got:
            raise BindingMismatch(name, expected, got)
    check_edit(decision)
    return request
