"""What the framework adapters share: how a paused call goes to Countersign, how a decision is
checked against the call it must be bound to, and what the model is told when a call is not
approved."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Required, TypedDict, TypeVar

import rfc8785

from countersign_client.binding import (
    PendingCall,
    arguments_sha256,
    check_binding,
    check_edit,
)
from countersign_client.client import CountersignClient
from countersign_client.errors import BindingMismatch
from countersign_client.models import Approval

__all__ = [
    "NOT_EXECUTED",
    "SUMMARY_LIMIT",
    "Adapter",
    "InterruptedCall",
    "Settings",
    "denial_text",
    "edit_changes",
    "recall_text",
]

NOT_EXECUTED = "The tool call was not executed; do not retry it unchanged."
SUMMARY_LIMIT = 2000  # the wire contract's cap on ``summary``

_T = TypeVar("_T")


def denial_text(decision: Approval) -> str:
    """The reason for anything but an approval (denied, expired, cancelled), ending with the
    instruction not to retry unchanged (added once, if the server's reason lacks it)."""
    reason = (decision.reason or "").strip() or f"The approval request was {decision.status}."
    return reason if NOT_EXECUTED in reason else f"{reason} {NOT_EXECUTED}"


NOTE_LIMIT = 500  # characters of a reviewer's note passed on to the model


def edit_changes(decision: Approval) -> str:
    """A reviewer's changes as the model reads them: ``/amount 5000 → 500``, each value as
    JSON, and their note, quoted (human text, cut)."""
    edit = decision.edit
    if edit is None:
        return ""
    changes = []
    for op in edit.patch:
        before = _at(decision.tool.arguments, str(op.get("path", "")))
        changes.append(f"{op.get('path')} {_json(before)} → {_json(op.get('value'))}")
    text = "; ".join(changes) or "none"
    if edit.note:
        text += f". Reviewer's note: {_json(edit.note[:NOTE_LIMIT])}"
    return text


def recall_text(decision: Approval, tool: str) -> str:
    """What the model is told when its framework cannot run an approved call with the
    arguments a reviewer edited: not executed, what was changed, and the exact arguments to
    call again with (their RFC 8785 text: the bytes that hash to the edit's hash)."""
    edit = decision.edit
    assert edit is not None
    who = edit.by.name or edit.by.slack_user_id
    exact = rfc8785.dumps(edit.arguments).decode("utf-8")
    return (
        f"Not executed: a reviewer ({who}) approved this call in Countersign only with changed "
        f"arguments. Changed: {edit_changes(decision)}. To run it, call {tool} again with "
        f"exactly these arguments, nothing added, removed or changed: {exact}. Any other "
        "arguments need a new approval; do not retry the original ones."
    )


def _at(arguments: dict[str, Any], pointer: str) -> Any:
    node: Any = arguments
    for part in pointer.split("/")[1:]:
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            node = node.get(key)
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return None
    return node


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


class Settings(TypedDict, total=False):
    """The keyword arguments every adapter is built with, after the client."""

    requester: Required[Mapping[str, str | None]]
    callback_url: str | None
    expires_in: int | None
    context: dict[str, Any] | None


class Adapter:
    """The client and the submission settings of one framework's adapter: every call it hands
    to Countersign carries the same requester, callback, expiry, context and framework."""

    framework: ClassVar[str]
    log: ClassVar[logging.Logger]  # the adapter module's own: refusals are logged there

    def __init__(
        self,
        client: CountersignClient,
        *,
        requester: Mapping[str, str | None],
        callback_url: str | None = None,
        expires_in: int | None = None,
        context: dict[str, Any] | None = None,
    ) -> None:
        self._client = client
        self._requester = dict(requester)
        self._callback_url = callback_url
        self._expires_in = expires_in
        self._context = dict(context or {})

    async def _submit(
        self,
        *,
        summary: str,
        request_id: str,
        session_id: str,
        tool: str,
        call_id: str,
        arguments: dict[str, Any],
    ) -> Approval:
        """Hand one paused call to Countersign (the same ids and content: the same approval)."""
        return await self._client.submit(
            request_id=request_id,
            session_id=session_id,
            tool=tool,
            call_id=call_id,
            arguments=arguments,
            requester=self._requester,
            summary=summary,
            context=self._context,
            callback_url=self._callback_url,
            expires_in=self._expires_in,
            framework=self.framework,
        )

    async def _submit_interrupted(self, call: InterruptedCall, summary: str) -> Approval:
        """Hand a call paused by an interrupt to Countersign: the interrupt is the request, its
        thread the session."""
        return await self._submit(
            request_id=call.interrupt_id,
            session_id=call.thread_id,
            tool=call.tool,
            call_id=call.call_id,
            arguments=call.arguments,
            summary=summary,
        )

    def _refuse(
        self, decision: Approval, field_name: str, expected: object, got: object
    ) -> BindingMismatch:
        """The BindingMismatch to raise for ``decision``, logged."""
        error = BindingMismatch(field_name, expected, got)
        self.log.warning(
            "decision refused",
            extra={
                "framework": self.framework,
                "approval_id": decision.approval_id,
                "field": field_name,
                "error": str(error),
            },
        )
        return error

    def _check_echoes(self, decision: Approval, tool: str, pending: PendingCall) -> None:
        """Raises BindingMismatch (logged) unless ``decision`` is for ``tool``, echoes every
        bound field of ``pending`` and carries arguments that hash to what it says."""
        if decision.tool.name != tool:
            raise self._refuse(decision, "tool.name", tool, decision.tool.name)
        try:
            check_binding(decision, pending)
        except BindingMismatch as exc:
            raise self._refuse(decision, exc.field, exc.expected, exc.got) from None
        echoed = arguments_sha256(decision.tool.arguments)
        if echoed != decision.arguments_sha256:  # the echoed arguments are not the hashed ones
            raise self._refuse(decision, "tool.arguments", decision.arguments_sha256, echoed)
        try:
            check_edit(decision)  # an edit that does not hash or patch as it says is refused
        except BindingMismatch as exc:
            raise self._refuse(decision, exc.field, exc.expected, exc.got) from None

    def _bound(self, decision: Approval, find: Callable[[], _T]) -> _T:
        """What the settled ``decision`` is for: ``find()``, whose BindingMismatch is logged
        and raised."""
        if not decision.settled:
            raise ValueError(f"{decision.approval_id} is still pending")
        try:
            return find()
        except BindingMismatch as refused:
            self.log.warning(
                "decision refused: %s",
                refused,
                extra={"approval_id": decision.approval_id, "field": refused.field},
            )
            raise


@dataclass(frozen=True)
class InterruptedCall:
    """A tool call a thread is paused on by an interrupt (AG-UI, LangGraph): a decision for it
    must echo the interrupt as its request id and the thread as its session id."""

    interrupt_id: str
    thread_id: str
    tool: str
    call_id: str
    arguments: dict[str, Any]

    def bound_to(self, approval_id: str) -> PendingCall:
        """The binding a decision for this interrupt must echo."""
        return PendingCall(
            approval_id=approval_id,
            request_id=self.interrupt_id,
            session_id=self.thread_id,
            call_id=self.call_id,
            arguments=self.arguments,
        )
