"""Claude Code's permission-prompt tool: an MCP server on stdio that asks Countersign.

Claude Code, started with ``--permission-prompt-tool mcp__countersign__approve``, calls the tool
``approve`` of this server with ``{"tool_name": ..., "input": {...}, "tool_use_id": ...}`` whenever
a tool call needs permission, and reads the JSON in the text content of the result:
``{"behavior": "allow", "updatedInput": {...}}`` or ``{"behavior": "deny", "message": "..."}``.

The call is submitted to Countersign (framework ``claude-code``), the decision is long-polled and
its binding checked (approval, request, session and call ids, arguments hash) against the call
that was asked about. An approval answers ``allow`` with the *original* input, unchanged: nothing
the approver's side sends can alter what runs, and no "always allow" rule is ever returned.
Everything else fails closed, with the reason in the message the model reads: a denial, expiry,
cancellation, no decision in time, a refused or mismatched answer, Countersign unreachable, a
missing setting, a malformed request.

An approved call runs at most once: before answering ``allow`` the server claims the approval's
one execution. Refused — another permission prompt (another Claude Code, a second server
process) holds it, or the approval lapsed (``valid_until``) — it answers ``deny``, saying so. The
permission-prompt protocol only answers allow or deny: Claude Code runs the tool afterwards and
tells this server nothing, so no outcome is reported (the card says none was, after the rule's
``report_within``).

Configuration (environment): ``COUNTERSIGN_URL``, ``COUNTERSIGN_TOKEN``,
``COUNTERSIGN_REQUESTER_EMAIL`` and/or ``COUNTERSIGN_REQUESTER_SLACK_ID`` (optionally
``COUNTERSIGN_REQUESTER_NAME``); optional ``COUNTERSIGN_WAIT`` (seconds to wait for a decision),
``COUNTERSIGN_EXPIRES_IN`` (seconds, sent as ``expires_in``), ``COUNTERSIGN_SESSION_ID`` (else
Claude Code's ``CLAUDE_CODE_SESSION_ID``, else an id made for this process). See
docs/claude-code.md.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

from countersign_client import execution
from countersign_client.adapters._common import NOT_EXECUTED, recall_text
from countersign_client.binding import PendingCall, arguments_sha256, check_binding, check_edit
from countersign_client.client import CountersignClient
from countersign_client.errors import ApiError, BindingMismatch, Conflict
from countersign_client.models import Approval

__all__ = [
    "NOT_EXECUTED",
    "SERVER_NAME",
    "TOOL_NAME",
    "Gate",
    "Settings",
    "build_server",
    "check_bound",
    "main",
    "request_id_for",
    "verdict",
]

log = logging.getLogger("countersign.claude_code")

SERVER_NAME = "countersign"
TOOL_NAME = "approve"  # Claude Code names it mcp__<server>__approve: mcp__countersign__approve
EXPIRY_GRACE = 10.0  # seconds past expires_at to let the server's own expiry sweep answer
CANCEL_TIMEOUT = 5.0

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tool_name": {"type": "string", "description": "The tool Claude Code wants to run"},
        "input": {"type": "object", "description": "Its input, exactly as it would run"},
        "tool_use_id": {"type": "string", "description": "Claude Code's id of this tool use"},
    },
    "required": ["tool_name", "input"],
}
TOOL = types.Tool(
    name=TOOL_NAME,
    description=(
        "Claude Code's permission prompt: asks a human in Slack (Countersign) to approve or deny "
        'a tool call; answers {"behavior": "allow", "updatedInput": ...} or '
        '{"behavior": "deny", "message": ...}.'
    ),
    input_schema=INPUT_SCHEMA,
)


class ConfigurationError(Exception):
    """One or more settings are missing or invalid; ``problems`` names each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Settings:
    """What the server needs, read once from the environment at start."""

    url: str
    token: str
    requester: dict[str, str]
    session_id: str
    wait: float | None = None
    expires_in: int | None = None
    context: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Read the settings; raises ConfigurationError naming every problem at once."""
        problems: list[str] = []

        def value(name: str) -> str:
            return env.get(name, "").strip()

        url, token = value("COUNTERSIGN_URL"), value("COUNTERSIGN_TOKEN")
        for name, got in (("COUNTERSIGN_URL", url), ("COUNTERSIGN_TOKEN", token)):
            if not got:
                problems.append(f"{name}: not set")
        if url and not url.startswith(("http://", "https://")):
            problems.append("COUNTERSIGN_URL: must start with http:// or https://")
        requester = {
            key: got
            for key, name in (
                ("email", "COUNTERSIGN_REQUESTER_EMAIL"),
                ("slack_user_id", "COUNTERSIGN_REQUESTER_SLACK_ID"),
                ("name", "COUNTERSIGN_REQUESTER_NAME"),
            )
            if (got := value(name))
        }
        if not ({"email", "slack_user_id"} & requester.keys()):
            problems.append(
                "COUNTERSIGN_REQUESTER_EMAIL or COUNTERSIGN_REQUESTER_SLACK_ID: not set "
                "(who asks; they can never approve their own request)"
            )
        wait = _positive(value("COUNTERSIGN_WAIT"), "COUNTERSIGN_WAIT", problems)
        expires = _positive(value("COUNTERSIGN_EXPIRES_IN"), "COUNTERSIGN_EXPIRES_IN", problems)
        if expires is not None and not expires.is_integer():
            problems.append("COUNTERSIGN_EXPIRES_IN: must be a whole number of seconds")
        if problems:
            raise ConfigurationError(problems)
        session_id = (
            value("COUNTERSIGN_SESSION_ID")
            or value("CLAUDE_CODE_SESSION_ID")
            or f"claude-code-{uuid.uuid4().hex}"
        )
        project = value("CLAUDE_PROJECT_DIR") or os.getcwd()
        return cls(
            url=url,
            token=token,
            requester=requester,
            session_id=session_id,
            wait=wait,
            expires_in=None if expires is None else int(expires),
            context={"client": "claude-code", "project_dir": project},
        )


def _positive(raw: str, name: str, problems: list[str]) -> float | None:
    """``raw`` as a positive number, ``None`` when unset; a bad value is added to ``problems``."""
    if not raw:
        return None
    try:
        number = float(raw)
    except ValueError:
        number = 0.0
    if not 0 < number < float("inf"):
        problems.append(f"{name}: must be a positive number of seconds")
        return None
    return number


def request_id_for(session_id: str, tool_name: str, tool_input: Mapping[str, Any]) -> str:
    """A stable request id when Claude Code sends no ``tool_use_id``: the same call in the same
    session asks the same question again (and gets the same answer) instead of a second card."""
    digest = arguments_sha256({"session": session_id, "tool": tool_name, "input": tool_input})
    return f"cc-{digest[:40]}"


def allow(original_input: dict[str, Any]) -> dict[str, Any]:
    """Run it, exactly as asked: ``updatedInput`` is always the input Claude Code sent."""
    return {"behavior": "allow", "updatedInput": original_input}


def deny(reason: str, *, ask_again: bool = False) -> dict[str, Any]:
    """Do not run it; ``message`` is what the model reads, ending in NOT_EXECUTED unless the
    model should ask again (a lapsed approval: the reason says so)."""
    reason = reason.strip()
    if not ask_again and not reason.endswith(NOT_EXECUTED):
        reason = f"{reason.rstrip('. ')}. {NOT_EXECUTED}"
    return {"behavior": "deny", "message": reason}


def verdict(
    decision: Approval, pending: PendingCall, tool_name: str | None = None
) -> dict[str, Any]:
    """Claude Code's answer for ``decision``: allow only an explicit approval bound to ``pending``.

    Any echoed field that differs (``approval_id``, ``request_id``, ``session_id``, tool
    ``call_id``, ``arguments_sha256``, and the tool's name when given), or a ``resume`` that
    contradicts the status, is refused.
    """
    try:
        check_bound(decision, pending, tool_name)
    except BindingMismatch as exc:
        log.error("refused a decision for %s: %s", pending.approval_id, exc)
        return deny(f"Countersign's answer was refused as not bound to this call ({exc})")
    if decision.approved and decision.edit is not None:
        # Claude Code would run an updatedInput without the model ever learning of it: the call
        # is denied, and the model told the exact arguments a reviewer approved instead
        return deny(recall_text(decision, tool_name or decision.tool.name), ask_again=True)
    if decision.approved:
        return allow(pending.arguments)
    # the server's reason says who denied and why, or why nobody did; ours when it has none
    who = ", ".join(d.name or d.slack_user_id for d in decision.decided_by) or "an approver"
    fallback = {
        "denied": f"Denied by {who} in Countersign",
        "expired": "Expired: nobody with the required authority decided in time",
        "cancelled": "Cancelled before anyone decided",
    }.get(decision.status, "No decision in time")
    return deny(f"Countersign {decision.approval_id}: {decision.reason or fallback}")


def check_bound(decision: Approval, pending: PendingCall, tool_name: str | None = None) -> None:
    """:func:`check_binding`, plus the tool's name and ``resume``: the server's own ``resume`` is
    never used, but one that disagrees with the status or the arguments means tampering."""
    check_binding(decision, pending)
    if tool_name is not None and decision.tool.name != tool_name:
        raise BindingMismatch("tool.name", tool_name, decision.tool.name)
    resume = decision.resume
    if resume is None:
        return
    # approved with an edit, the server's resume denies too (the edit runs only as a call again)
    behavior = "allow" if decision.approved and decision.edit is None else "deny"
    if resume.get("behavior") != behavior:
        raise BindingMismatch("resume.behavior", behavior, resume.get("behavior"))
    if "updatedInput" in resume:
        # the requested input; after a reviewer's edit, the edited one (checked below)
        expected = decision.run_sha256 if decision.approved else pending.arguments_sha256
        got = arguments_sha256(resume["updatedInput"])
        if got != expected:
            raise BindingMismatch("resume.updatedInput", expected, got)
    check_edit(decision)


class Gate:
    """Turns one permission request into one Countersign approval, and its decision into an
    answer for Claude Code. Never raises for the request's sake: every failure is a deny."""

    def __init__(
        self, settings: Settings | None, problems: list[str] | None = None, *, timeout: float = 10.0
    ) -> None:
        self.settings = settings
        self.problems = problems or []
        self._timeout = timeout

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Gate:
        """A gate from the environment; with settings missing it denies every call, saying why."""
        try:
            return cls(Settings.from_env(env))
        except ConfigurationError as exc:
            for problem in exc.problems:
                log.error("configuration: %s", problem)
            return cls(None, exc.problems)

    async def decide(self, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
        """``{"behavior": "allow", ...}`` or ``{"behavior": "deny", ...}`` for one request."""
        arguments = arguments or {}
        tool_name, tool_input = arguments.get("tool_name"), arguments.get("input")
        tool_use_id = arguments.get("tool_use_id")
        if not isinstance(tool_name, str) or not tool_name.strip():
            return deny("Malformed permission request: tool_name is missing")
        if not isinstance(tool_input, dict):
            return deny("Malformed permission request: input is not an object")
        if tool_use_id is not None and (
            not isinstance(tool_use_id, str) or not tool_use_id.strip()
        ):
            return deny("Malformed permission request: tool_use_id is not a string")
        if self.settings is None:
            return deny("Countersign is not configured: " + "; ".join(self.problems))
        try:
            return await self._ask(self.settings, tool_name, tool_input, tool_use_id)
        except Conflict as exc:
            return deny(f"Countersign already holds another call under this id ({exc.message})")
        except ApiError as exc:
            return deny(f"Countersign refused the request ({exc})")
        except Exception as exc:  # unreachable, timed out, garbled: fail closed
            log.exception("permission request for %s failed", tool_name)
            return deny(f"Countersign could not be asked ({type(exc).__name__}: {exc})")

    async def _ask(
        self,
        settings: Settings,
        tool_name: str,
        tool_input: dict[str, Any],
        tool_use_id: str | None,
    ) -> dict[str, Any]:
        request_id = tool_use_id or request_id_for(settings.session_id, tool_name, tool_input)
        description = tool_input.get("description")
        summary = f"Claude Code wants to run {tool_name}"
        if isinstance(description, str) and description.strip():
            summary = f"{summary}: {description.strip()}"
        async with CountersignClient(settings.url, settings.token, timeout=self._timeout) as cs:
            submitted = await cs.submit(
                request_id=request_id,
                session_id=settings.session_id,
                tool=tool_name,
                call_id=request_id,
                arguments=tool_input,
                requester=settings.requester,
                summary=summary[:2000],
                context=dict(settings.context),
                expires_in=settings.expires_in,
                framework="claude-code",
            )
            pending = PendingCall(
                approval_id=submitted.approval_id,
                request_id=request_id,
                session_id=settings.session_id,
                call_id=request_id,
                arguments=tool_input,
            )
            log.info("asked %s for %s (%s)", submitted.approval_id, tool_name, request_id)
            try:
                check_bound(submitted, pending, tool_name)
            except BindingMismatch:
                return verdict(submitted, pending, tool_name)  # refused before waiting on it
            decision = submitted if submitted.settled else await self._wait(cs, submitted, settings)
            answer = verdict(decision, pending, tool_name)
            if answer["behavior"] == "allow":
                # a key for this prompt only: a second prompt, here or elsewhere, is refused
                refused = await execution.Attempt(cs, decision.approval_id).claim(
                    pending, tool_name
                )
                if refused is not None:
                    answer = deny(refused, ask_again=refused.startswith(execution.LAPSED))
        log.info("%s: %s -> %s", decision.approval_id, decision.status, answer["behavior"])
        return answer

    async def _wait(
        self, cs: CountersignClient, submitted: Approval, settings: Settings
    ) -> Approval:
        """The decision, or the request withdrawn when none comes in time. If Claude Code gives
        up first (the call is cancelled), the request is withdrawn too, so nobody approves a
        call that will not run."""
        remaining = (submitted.expires_at - datetime.now(UTC)).total_seconds() + EXPIRY_GRACE
        timeout = max(1.0, min(remaining, settings.wait or remaining))
        started = time.monotonic()
        try:
            decision = await cs.wait(submitted.approval_id, timeout)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_TIMEOUT):
                await self._withdraw(cs, submitted.approval_id, "Claude Code withdrew the call")
            raise
        if decision.settled:
            return decision
        waited = time.monotonic() - started
        return await self._withdraw(
            cs, submitted.approval_id, f"no decision within {waited:.0f} s (Claude Code denied it)"
        )

    async def _withdraw(self, cs: CountersignClient, approval_id: str, reason: str) -> Approval:
        """Cancel ``approval_id``; if it settled in the meantime, that decision stands."""
        try:
            return await cs.cancel(approval_id, reason)
        except Conflict:
            return await cs.get(approval_id)


def build_server(gate: Gate) -> Server[Any]:
    """The MCP server: one tool, ``approve``, answered by ``gate``."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[TOOL])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name != TOOL_NAME:
            answer = deny(f"Unknown tool {params.name!r}: this server has only {TOOL_NAME!r}")
            return _text_result(answer, is_error=True)
        return _text_result(await gate.decide(params.arguments))

    return Server(SERVER_NAME, on_list_tools=list_tools, on_call_tool=call_tool)


def _text_result(answer: dict[str, Any], *, is_error: bool = False) -> types.CallToolResult:
    text = json.dumps(answer, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], is_error=is_error
    )


async def serve(gate: Gate) -> None:
    """Serve ``gate`` on stdin/stdout until the client closes the connection."""
    server = build_server(gate)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main() -> None:
    """Run the permission-prompt server on stdio (``countersign mcp-permission``). Logs go to
    stderr: stdout belongs to the MCP protocol."""
    level = os.environ.get("LOG_LEVEL", "INFO").upper()
    logging.basicConfig(
        stream=sys.stderr,
        level=level if level in logging.getLevelNamesMapping() else "INFO",
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    anyio.run(serve, Gate.from_env(os.environ))


if __name__ == "__main__":
    main()
