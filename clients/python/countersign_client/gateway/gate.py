"""A gated tool call: asked of Countersign, waited on, run at most once with exactly the approved
arguments, its outcome reported — and nothing run on anything but an explicit approval.

One call of a gated tool goes like this:

1. Its arguments are checked first: not I-JSON (a NaN, an integer no double is, a lone
   surrogate) or over ``max_argument_bytes`` is refused with the reason; nothing is submitted.
2. It is submitted (framework ``mcp``, the MCP session as ``session_id``) under a request id
   derived from the session, the tool, the arguments' hash and a generation: the same call again
   while the first waits (a client's retry) joins it — one approval, one card, one run — and a
   gateway restarted with the same session finds the approval it left pending.
3. The decision is long-polled (a Countersign restart is waited through) until the approval's
   own expiry; the waiting client gets a progress notification every ``progress_every`` seconds
   so it does not time out. A client that cancels the request (``notifications/cancelled``)
   withdraws the approval, once no retry of it still waits.
4. On an approval the execution is claimed (single use, within ``valid_until``); only then does
   the upstream see the call, with the approved arguments — a reviewer's edit's where there is
   one, said so in the result — and the outcome is reported. A deny, expiry, cancellation, a
   refused claim, an answer not bound to the call, or Countersign unreachable is a tool result
   with ``isError`` that starts "Not executed: …": fail closed, never ungated.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
import mcp_types as types
import rfc8785
from mcp import MCPError

from countersign_client import execution
from countersign_client.adapters._common import SUMMARY_LIMIT, edit_changes
from countersign_client.binding import PendingCall, arguments_sha256, check_binding, check_edit
from countersign_client.client import CountersignClient
from countersign_client.errors import ApiError, BindingMismatch, Conflict
from countersign_client.gateway.config import GatewayConfig
from countersign_client.gateway.upstreams import Route
from countersign_client.models import Approval

__all__ = ["FRAMEWORK", "Call", "Gate", "not_executed", "request_id_for"]

log = logging.getLogger(__name__)

FRAMEWORK = "mcp"
EXPIRY_GRACE = 5.0  # past expires_at the server's expiry has had its chance: withdraw it
WITHDRAW_TIMEOUT = 5.0  # a withdrawal on cancel must not hold the client's cancel for long
SUBMIT_TRIES = 3  # a dropped connection or a 5xx on submit is tried again (the same request id)
PAUSE = 0.2
MAX_GENERATIONS = 1000  # calls of the same tool with the same arguments in one session

Progress = Callable[[str], Awaitable[None]]


def request_id_for(session_id: str, tool: str, sha256: str, generation: int) -> str:
    """The request id of the ``generation``-th call of ``tool`` with these arguments in this
    session: stable, so a retry and a restarted gateway ask about the same approval."""
    digest = hashlib.sha256(
        json.dumps([session_id, tool, sha256, generation]).encode("utf-8")
    ).hexdigest()
    return f"mcp-{digest[:40]}-{generation}"


def not_executed(reason: str) -> types.CallToolResult:
    """The tool result of a call that did not run: ``isError``, the reason first."""
    text = reason if reason.startswith("Not executed") else f"Not executed: {reason}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


@dataclass(frozen=True)
class Call:
    """One ``tools/call`` of a gated tool, as the client sent it."""

    session_id: str
    name: str  # the exposed name (with the upstream's prefix): what the policy's globs match
    arguments: dict[str, Any]
    route: Route

    @property
    def sha256(self) -> str:
        return arguments_sha256(self.arguments)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.session_id, self.name, self.sha256)


@dataclass
class _InFlight:
    """One approval being asked for, and the client requests waiting on it."""

    waiters: set[Progress] = field(default_factory=set)
    approval_id: str | None = None
    abandoned: bool = False  # every waiter cancelled: it is being withdrawn, join no more
    task: asyncio.Task[types.CallToolResult] = field(init=False)

    async def tell(self, message: str) -> None:
        for progress in list(self.waiters):
            try:
                await progress(message)
            except Exception:  # a waiter gone away must not stop the others
                log.debug("progress not sent", exc_info=True)


class Gate:
    """Asks Countersign for every gated call of one gateway process."""

    def __init__(self, config: GatewayConfig, token: str, *, timeout: float = 10.0) -> None:
        self._config = config
        self._settings = config.approvals
        self._client = CountersignClient(config.countersign.url, token, timeout=timeout)
        self._in_flight: dict[tuple[str, str, str], _InFlight] = {}
        self._generation: dict[tuple[str, str, str], int] = {}

    async def close(self) -> None:
        """Withdraw what still waits (the gateway is stopping) and close the client."""
        for in_flight in list(self._in_flight.values()):
            in_flight.task.cancel()
        await asyncio.gather(*(f.task for f in self._in_flight.values()), return_exceptions=True)
        await self._client.close()

    def refusal(self, arguments: dict[str, Any]) -> str | None:
        """Why ``arguments`` cannot be submitted, or None."""
        try:
            size = len(rfc8785.dumps(arguments))
            arguments_sha256(arguments)
        except (ValueError, TypeError, rfc8785.CanonicalizationError) as exc:
            return (
                "the arguments are not I-JSON (RFC 7493), so their hash could not bind an "
                f"approval ({exc}); nothing was submitted for approval"
            )
        limit = self._settings.max_argument_bytes
        if size > limit:
            return (
                f"the arguments are {size} bytes, over the gateway's limit of {limit}; nothing "
                "was submitted for approval"
            )
        return None

    async def call(self, call: Call, progress: Progress) -> types.CallToolResult:
        """The result of ``call``: the upstream's, or a "Not executed: …" one. Raises the
        upstream's MCPError unchanged when the upstream answered the approved call with one."""
        refused = self.refusal(call.arguments)
        if refused is not None:
            return not_executed(refused)
        in_flight = self._in_flight.get(call.key)
        if in_flight is None or in_flight.abandoned:
            in_flight = self._in_flight[call.key] = _InFlight()
            in_flight.task = asyncio.create_task(self._ask(call, in_flight))
            in_flight.task.add_done_callback(lambda _: self._done(call.key, in_flight))
        else:
            log.info("%s: a repeat of a call still waiting joins it", call.name)
        return await self._wait_on(in_flight, progress)

    def _done(self, key: tuple[str, str, str], in_flight: _InFlight) -> None:
        if self._in_flight.get(key) is in_flight:
            del self._in_flight[key]

    async def _wait_on(self, in_flight: _InFlight, progress: Progress) -> types.CallToolResult:
        """Wait for the shared answer, telling this client we are still waiting; the last waiter
        to cancel withdraws the call."""
        in_flight.waiters.add(progress)
        started = time.monotonic()
        try:
            while True:
                done, _ = await asyncio.wait(
                    {in_flight.task}, timeout=self._settings.progress_every
                )
                if done and in_flight.task.cancelled():  # every earlier waiter gave up on it
                    return not_executed("the call was withdrawn while this request joined it")
                if done:
                    return in_flight.task.result()
                waited = time.monotonic() - started
                what = in_flight.approval_id or "the approval request"
                await progress(f"Waiting for a decision in Countersign on {what} ({waited:.0f} s)")
        except asyncio.CancelledError:
            in_flight.waiters.discard(progress)
            if not in_flight.waiters and not in_flight.task.done():
                in_flight.abandoned = True
                in_flight.task.cancel()  # the client gave up: withdraw (see _ask)
            raise
        finally:
            in_flight.waiters.discard(progress)

    # -- the one approval, shared by a call and its retries ------------------------------------

    async def _ask(self, call: Call, in_flight: _InFlight) -> types.CallToolResult:
        try:
            approval, generation = await self._submit(call)
        except Exception as exc:  # unreachable, refused, garbled: fail closed
            log.warning("%s: not submitted: %s", call.name, exc)
            return not_executed(_unreachable(exc))
        in_flight.approval_id = approval.approval_id
        # the next call with the same arguments is a new question, whatever this one's fate
        self._generation[call.key] = generation + 1
        pending = PendingCall(
            approval_id=approval.approval_id,
            request_id=approval.request_id,
            session_id=call.session_id,
            call_id=approval.request_id,
            arguments=call.arguments,
        )
        try:
            _check_bound(approval, pending, call.name)
            decision = approval if approval.settled else await self._decision(approval, in_flight)
            _check_bound(decision, pending, call.name)
        except BindingMismatch as exc:
            log.error("%s: decision refused: %s", approval.approval_id, exc)
            return not_executed(f"Countersign's answer was not bound to this call ({exc})")
        except asyncio.CancelledError:
            await self._withdraw(approval.approval_id, "the MCP client cancelled the call")
            raise
        except Exception as exc:
            log.warning("%s: no decision: %s", approval.approval_id, exc)
            return not_executed(_unreachable(exc))
        if not decision.approved:
            return not_executed(_why_not(decision))
        return await self._run(call, decision, pending, in_flight)

    async def _submit(self, call: Call) -> tuple[Approval, int]:
        """The approval this call waits on and its generation: a new one, or one a retry or a
        restarted gateway left pending or approved and unclaimed; any other approval under a
        generation's id is an earlier call's, and the next generation is asked."""
        generation = self._generation.get(call.key, 0)
        route = call.route
        summary = (
            f"MCP call of {call.name} through the gateway "
            f"(upstream {route.upstream.name}, tool {route.tool.name})"
        )
        for _ in range(MAX_GENERATIONS):
            request_id = request_id_for(call.session_id, call.name, call.sha256, generation)
            try:
                approval, created = await self._with_retries(call, request_id, summary)
            except Conflict:  # this id holds other content (the file changed): not ours
                generation += 1
                continue
            if created or _still_open(approval):
                log.info(
                    "%s: %s for %s (%s)",
                    approval.approval_id,
                    "asked" if created else "asked already",
                    call.name,
                    request_id,
                )
                return approval, generation
            generation += 1
        raise RuntimeError(f"{MAX_GENERATIONS} calls of {call.name} with these arguments")

    async def _with_retries(
        self, call: Call, request_id: str, summary: str
    ) -> tuple[Approval, bool]:
        """Submit ``call`` under ``request_id``: a dropped connection or a 5xx is tried again
        (the same id: the same approval)."""
        route = call.route
        body: dict[str, Any] = {
            "request_id": request_id,
            "session_id": call.session_id,
            "tool": {"name": call.name, "call_id": request_id, "arguments": call.arguments},
            "requester": self._config.requester.model_dump(exclude_none=True),
            "summary": summary[:SUMMARY_LIMIT],
            "context": {
                "client": "mcp-gateway",
                "agent": self._settings.agent_name,
                "upstream": route.upstream.name,
                "upstream_tool": route.tool.name,
            },
            "framework": FRAMEWORK,
        }
        if self._settings.expires_in is not None:
            body["expires_in"] = self._settings.expires_in
        for number in range(SUBMIT_TRIES):
            try:
                return await self._client.submit_body(body)
            except Exception as exc:
                if not _transient(exc) or number == SUBMIT_TRIES - 1:
                    raise
                await asyncio.sleep(PAUSE * 2**number)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _decision(self, approval: Approval, in_flight: _InFlight) -> Approval:
        """The settled approval; withdrawn when nobody decides by its expiry (or ``wait``). A
        Countersign restart or a dropped long-poll is waited through until then."""
        remaining = (approval.expires_at - datetime.now(UTC)).total_seconds() + EXPIRY_GRACE
        if self._settings.wait is not None:
            remaining = min(remaining, self._settings.wait)
        deadline = time.monotonic() + max(1.0, remaining)
        await in_flight.tell(f"Asked for approval in Countersign: {approval.approval_id}")
        pause = PAUSE
        while (left := deadline - time.monotonic()) > 0:
            try:
                decision = await self._client.wait(approval.approval_id, left)
            except ApiError as exc:
                if exc.status < 500:
                    raise
                await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                pause = min(pause * 2, 5.0)
                continue
            if decision.settled:
                return decision
        return await self._withdraw(
            approval.approval_id, f"no decision within {max(1.0, remaining):.0f} s"
        )

    async def _withdraw(self, approval_id: str, reason: str) -> Approval:
        """Cancel ``approval_id`` (shielded: a cancelled call still withdraws); if it settled in
        the meantime, that decision stands."""

        async def withdraw() -> Approval:
            try:
                return await self._client.cancel(approval_id, reason)
            except Conflict:
                return await self._client.get(approval_id)

        task = asyncio.ensure_future(asyncio.wait_for(withdraw(), WITHDRAW_TIMEOUT))
        try:
            withdrawn = await asyncio.shield(task)
        except asyncio.CancelledError:
            await asyncio.wait({task}, timeout=WITHDRAW_TIMEOUT)
            raise
        log.info("%s withdrawn (%s): %s", approval_id, reason, withdrawn.status)
        return withdrawn

    # -- running it ---------------------------------------------------------------------------

    async def _run(
        self, call: Call, decision: Approval, pending: PendingCall, in_flight: _InFlight
    ) -> types.CallToolResult:
        edit = check_edit(decision)  # checked in _check_bound: a bad edit never gets here
        arguments = edit.arguments if edit is not None else call.arguments
        attempt = execution.Attempt(self._client, decision.approval_id)
        refused = await attempt.claim(
            pending, call.name, run_sha256=None if edit is None else edit.arguments_sha256
        )
        if refused is not None:
            return not_executed(refused)

        async def forward(progress: float, total: float | None, message: str | None) -> None:
            await in_flight.tell(message or f"Running {call.name}: {progress:g}")

        upstream = call.route.upstream
        try:
            result = await upstream.session.send_request(
                types.CallToolRequest(
                    params=types.CallToolRequestParams(
                        name=call.route.tool.name, arguments=arguments
                    )
                ),
                types.CallToolResult,
                progress_callback=forward,
            )
        except MCPError as exc:
            await _shielded(attempt.report("error", f"the upstream answered error {exc.code}"))
            raise
        except asyncio.CancelledError:
            await _shielded(attempt.report("error", "cancelled by the MCP client while running"))
            raise
        except Exception as exc:
            await _shielded(attempt.report("error", execution.error_detail(exc)))
            log.exception("%s: the upstream call failed", decision.approval_id)
            return not_executed(
                f"the approved call was sent to the upstream {upstream.name!r}, whose answer was "
                f"lost ({type(exc).__name__}); it may have run. An approval runs at most once: "
                "do not retry it unchanged"
            )
        if result.is_error:
            await attempt.report("error", "the upstream returned isError")
        else:
            await attempt.report("ok")
        status = "error" if result.is_error else "ok"
        log.info("%s ran once: %s", decision.approval_id, status)
        if edit is None:
            return result
        who = edit.by.name or edit.by.slack_user_id
        exact = rfc8785.dumps(edit.arguments).decode("utf-8")
        said = types.TextContent(
            type="text",
            text=(
                f"Countersign: a reviewer ({who}) approved this call only with changed arguments "
                f"({edit_changes(decision)}), and it ran with exactly these: {exact}"
            ),
        )
        return result.model_copy(update={"content": [said, *result.content]})


def _check_bound(decision: Approval, pending: PendingCall, tool: str) -> None:
    """The decision is for this call: every echoed id, the tool, the arguments and their hash,
    and an edit that hashes and patches as it says."""
    check_binding(decision, pending)
    if decision.tool.name != tool:
        raise BindingMismatch("tool.name", tool, decision.tool.name)
    echoed = arguments_sha256(decision.tool.arguments)
    if echoed != decision.arguments_sha256:
        raise BindingMismatch("tool.arguments", decision.arguments_sha256, echoed)
    check_edit(decision)


def _still_open(approval: Approval) -> bool:
    """A call a retry may take over: pending, or approved and neither claimed nor lapsed."""
    if approval.status == "pending":
        return True
    if not approval.approved or approval.execution is not None:
        return False
    return approval.valid_until is None or approval.valid_until > datetime.now(UTC)


def _why_not(decision: Approval) -> str:
    who = ", ".join(d.name or d.slack_user_id for d in decision.decided_by) or "an approver"
    fallback = {
        "denied": f"denied by {who}",
        "expired": "expired: nobody with the required authority decided in time",
        "cancelled": "cancelled before anyone decided",
    }.get(decision.status, decision.status)
    reason = (decision.reason or fallback).strip().rstrip(".")
    return (
        f"{decision.status} in Countersign ({decision.approval_id}): {reason}. "
        "Do not retry it unchanged."
    )


def _unreachable(exc: Exception) -> str:
    if isinstance(exc, ApiError):
        return f"Countersign refused the approval request ({exc})"
    return (
        f"Countersign could not be reached to approve this call ({type(exc).__name__}: {exc}). "
        "A gated call never runs without an approval; try again later"
    )


def _transient(exc: Exception) -> bool:
    if isinstance(exc, ApiError):
        return exc.status >= 500
    return isinstance(exc, aiohttp.ClientError | TimeoutError)


async def _shielded(report: Awaitable[None]) -> None:
    """Report an outcome even while the call is being cancelled."""
    task = asyncio.ensure_future(report)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait({task}, timeout=WITHDRAW_TIMEOUT)
        raise
