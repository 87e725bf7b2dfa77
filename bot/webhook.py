"""The agent webhook, wire contract v1. Handlers only translate: parse, call the service, render."""

from __future__ import annotations

import hmac
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from approvals import errors, hashing, metrics, models, resource
from approvals.service import ApprovalService, ApproverDirectory
from approvals.turn_service import TurnService
from bot import http_errors, slack_app
from bot.config import AgentCredentials
from bot.http_errors import ApiError

__all__ = ["API_PREFIX", "BODY_LIMITS", "MAX_BODY", "add_routes", "body_limit", "error_middleware"]

log = logging.getLogger(__name__)

API_PREFIX = "/v1/"
MAX_BODY = 64 * 1024  # the wire contract's limit on an agent's request body
MAX_WAIT = 60.0
SERVICE = web.AppKey("service", ApprovalService)
TURNS = web.AppKey("turns", TurnService)
DIRECTORY: web.AppKey[ApproverDirectory] = web.AppKey("directory")
AGENTS: web.AppKey[Callable[[], Sequence[AgentCredentials]]] = web.AppKey("agents")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error of the agent API as the JSON error body; a bug is a logged 500, never a leak."""
    try:
        return await handler(request)
    except ApiError as exc:
        return http_errors.json_error(exc)
    except errors.CountersignError as exc:
        return http_errors.json_error(http_errors.from_core(exc))
    except web.HTTPRequestEntityTooLarge:
        if not request.path.startswith(API_PREFIX):
            raise
        return http_errors.json_error(
            ApiError(413, "too_large", f"the body is over {MAX_BODY} bytes")
        )
    except web.HTTPException as exc:
        if not request.path.startswith(API_PREFIX):
            raise
        code = exc.reason.lower().replace(" ", "_") if exc.reason else "error"
        return http_errors.json_error(ApiError(exc.status, code, exc.reason or "error"))
    except Exception:
        log.exception("unhandled error", extra={"action": "http", "path": request.path})
        return http_errors.json_error(ApiError(500, "internal", "internal error (logged)"))


# Body limits by path prefix, on aiohttp's own check (``client_max_size``, per request): the
# agent API's contract is small bodies; Slack's payloads echo whole surfaces (see
# bot.slack_app.MAX_PAYLOAD). Every other path keeps aiohttp's default of 1 MiB.
BODY_LIMITS = ((API_PREFIX, MAX_BODY), ("/slack/", slack_app.MAX_PAYLOAD))


@web.middleware
async def body_limit(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Read at most the path's limit (:data:`BODY_LIMITS`): over it, reading the body raises
    ``HTTPRequestEntityTooLarge`` (chunked bodies too), which :func:`error_middleware` answers
    as ``too_large`` on the agent API."""
    for prefix, limit in BODY_LIMITS:
        if request.path.startswith(prefix):
            return await handler(request.clone(client_max_size=limit))
    return await handler(request)


def _agent(request: web.Request) -> str:
    """The agent the bearer token belongs to (constant-time over every agent's token)."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise ApiError(401, "unauthorized", "Authorization: Bearer <agent token> is required")
    found = None
    for agent in request.app[AGENTS]():
        # no early exit: the time taken does not tell which agent's token was close
        if hmac.compare_digest(agent.token.encode(), token.strip().encode()):
            found = agent.name
    if found is None:
        raise ApiError(401, "unauthorized", "unknown agent token")
    return found


async def _json_body(request: web.Request, *, required: bool = True) -> Any:
    """The request's JSON, restricted to I-JSON (RFC 7493) so that it can be hashed and stored
    exactly: 400 for what is not JSON or has a key twice, 422 naming the field for a number no
    IEEE-754 double holds or a string no UTF-8 text holds."""
    raw = await request.read()  # over MAX_BODY: refused by aiohttp (see body_limit)
    if not raw and not required:
        return {}
    if request.content_type != "application/json":
        raise ApiError(415, "unsupported_media_type", "Content-Type must be application/json")
    unrepresentable: list[_Unrepresentable] = []

    def number(parse: Callable[[str], Any]) -> Callable[[str], Any]:
        def parsed(literal: str) -> Any:
            value = parse(literal)
            if isinstance(value, _Unrepresentable):
                unrepresentable.append(value)
            return value

        return parsed

    try:
        text = raw.decode("utf-8")  # strict: a surrogate encoded in UTF-8 is refused here
        body = json.loads(
            text,
            parse_constant=_no_constants,
            parse_int=number(_integer),
            parse_float=number(_double),
            object_pairs_hook=_object,
        )
    except (ValueError, RecursionError) as exc:
        # ValueError covers bad UTF-8, bad JSON, NaN/Infinity and duplicate keys;
        # RecursionError, nesting too deep to be a tool call
        detail = str(exc) if isinstance(exc, ValueError) else "nested too deeply"
        raise ApiError(400, "malformed_json", f"the body is not valid JSON: {detail}") from None
    # The walk that names each bad field runs only when there can be one: a NUL or a lone
    # surrogate can only come from a \u escape (raw control characters are not JSON, and the
    # strict UTF-8 decoding above refuses encoded surrogates), and the number hooks said
    # whether they met a number I-JSON cannot carry. Most bodies skip it: in Python, it cost
    # more than the parse itself (38 µs against 26 µs for a typical submission).
    if unrepresentable or "\\u" in text:
        problems = list(_not_i_json(body))
        if problems:
            raise ApiError(422, "invalid_request", _summary(problems), problems)
    return body


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused when a key comes twice: parsers disagree on which one wins, so
    what a reviewer sees could differ from what the agent runs."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key {key!r} appears twice in one object")
        found[key] = value
    return found


@dataclass(frozen=True)
class _Unrepresentable:
    """A number I-JSON cannot carry, left in the parsed body to be named by its path."""

    why: str


_MAX_DIGITS = len(str(hashing.MAX_SAFE_INTEGER))


def _integer(literal: str) -> int | _Unrepresentable:
    # the digit count first: int() of thousands of digits is slow, and refused past 4300
    digits = literal.lstrip("-")
    if len(digits) > _MAX_DIGITS or int(digits) > hashing.MAX_SAFE_INTEGER:
        return _Unrepresentable(
            f"an integer beyond ±{hashing.MAX_SAFE_INTEGER} (2^53 − 1) is not exact in JSON"
        )
    return int(literal)


def _double(literal: str) -> float | _Unrepresentable:
    value = float(literal)
    if math.isinf(value):
        return _Unrepresentable("a number beyond the range of an IEEE-754 double")
    mantissa = literal.lower().partition("e")[0]
    if value == 0 and any(d in mantissa for d in "123456789"):
        return _Unrepresentable("a number too small for an IEEE-754 double (it would be 0)")
    return value


_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")  # one C scan, not a Python step per character


def _bad_text(text: str) -> bool:
    return _BAD_TEXT.search(text) is not None


def _not_i_json(value: Any, path: str = "") -> Iterator[dict[str, str]]:
    """Fields that cannot be hashed or stored exactly, named by their path: NUL (PostgreSQL
    text cannot hold it), lone surrogates (UTF-8 cannot), numbers no double holds."""
    here = path or "(body)"
    if isinstance(value, _Unrepresentable):
        yield http_errors.problem(here, value.why)
    elif isinstance(value, str):
        if _bad_text(value):
            yield http_errors.problem(here, "contains NUL or a lone surrogate")
    elif isinstance(value, dict):
        for key, item in value.items():
            if _bad_text(key):
                yield http_errors.problem(here, "a key contains NUL or a lone surrogate")
            else:
                yield from _not_i_json(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _not_i_json(item, f"{path}.{index}" if path else str(index))


def _summary(problems: list[dict[str, str]]) -> str:
    return "cannot be hashed and stored exactly: " + ", ".join(p["field"] for p in problems)


def _approval_id(request: web.Request) -> str:
    approval_id = request.match_info["approval_id"]
    if not models.APPROVAL_ID.fullmatch(approval_id):
        raise ApiError(404, "not_found", "no approval with that id")
    return approval_id


def _validate(model: type[BaseModel], body: Any) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise http_errors.from_validation(exc) from None


def _render(approval: models.Approval, status: int = 200) -> web.Response:
    # rendered by the resource module, which embeds the arguments as the bytes that were hashed
    return web.Response(
        body=resource.render(approval),
        status=status,
        content_type="application/json",
        charset="utf-8",
    )


def _not_reserved(body: models.ApprovalRequest) -> models.ApprovalRequest:
    """Request ids with the turn prefix belong to guard escalations (created inside, not through
    this route): an agent could otherwise pre-empt a turn's approval with content of its own."""
    if body.request_id.startswith(models.TURN_REQUEST_PREFIX):
        message = f"request ids starting with {models.TURN_REQUEST_PREFIX!r} are reserved"
        raise ApiError(
            422, "invalid_request", message, [http_errors.problem("request_id", message)]
        )
    return body


async def create_approval(request: web.Request) -> web.Response:
    agent = _agent(request)
    body = _not_reserved(_validate(models.ApprovalRequest, await _json_body(request)))
    approval, created = await request.app[SERVICE].submit(agent, body)
    if created:
        metrics.APPROVALS_CREATED.labels(agent).inc()
    return _render(approval, 201 if created else 200)


def _wait_seconds(request: web.Request) -> float:
    raw = request.query.get("wait")
    if raw is None:
        return 0.0
    try:
        wait = float(raw)
    except ValueError:
        wait = -1.0
    if not 0 <= wait <= MAX_WAIT:
        message = f"wait must be a number of seconds from 0 to {MAX_WAIT:g}"
        raise ApiError(422, "invalid_request", message, [http_errors.problem("wait", message)])
    return wait


async def get_approval(request: web.Request) -> web.Response:
    agent = _agent(request)
    wait = _wait_seconds(request)
    service = request.app[SERVICE]
    approval_id = _approval_id(request)
    if wait > 0:
        return _render(await service.wait(approval_id, agent=agent, timeout=wait))
    return _render(await service.get(approval_id, agent=agent))


class CancelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    reason: str | None = Field(None, max_length=2000)


async def cancel_approval(request: web.Request) -> web.Response:
    agent = _agent(request)
    body = _validate(CancelRequest, await _json_body(request, required=False))
    service = request.app[SERVICE]
    approval_id = _approval_id(request)
    return _render(await service.cancel(approval_id, agent=agent, reason=body.reason))


async def claim_execution(request: web.Request) -> web.Response:
    agent = _agent(request)
    body = _validate(models.ExecutionClaim, await _json_body(request))
    approval = await request.app[SERVICE].claim_execution(
        _approval_id(request), agent=agent, idempotency_key=body.idempotency_key
    )
    return _render(approval)


async def report_outcome(request: web.Request) -> web.Response:
    agent = _agent(request)
    body = _validate(models.OutcomeReport, await _json_body(request))
    approval = await request.app[SERVICE].report_outcome(
        _approval_id(request), agent=agent, report=body
    )
    return _render(approval)


async def approval_events(request: web.Request) -> web.Response:
    agent = _agent(request)
    approval, attempts, timers = await request.app[SERVICE].events(
        _approval_id(request), agent=agent
    )
    return web.json_response(resource.events(approval, attempts, timers))


async def create_turn(request: web.Request) -> web.Response:
    agent = _agent(request)
    body = _validate(models.TurnRequest, await _json_body(request))
    answer = await request.app[TURNS].decide(agent, body, request.app[DIRECTORY])
    return web.json_response(resource.turn(answer.record, answer.approval))


async def list_turns(request: web.Request) -> web.Response:
    agent = _agent(request)
    session_id = request.query.get("session_id", "").strip()
    # the same rule as a body's session_id: 1 to 200 characters that can be stored
    if not session_id or len(session_id) > 200 or _bad_text(session_id):
        message = "session_id is required: 1 to 200 characters, no NUL"
        raise ApiError(
            422, "invalid_request", message, [http_errors.problem("session_id", message)]
        )
    records = await request.app[TURNS].history(agent, session_id)
    return web.json_response(
        {"session_id": session_id, "turns": [resource.turn(r) for r in records]}
    )


def add_routes(
    app: web.Application,
    service: ApprovalService,
    turns: TurnService,
    directory: ApproverDirectory,
    agents: Callable[[], Sequence[AgentCredentials]],
) -> None:
    app[SERVICE] = service
    app[TURNS] = turns
    app[DIRECTORY] = directory
    app[AGENTS] = agents  # read per request: a policy reload can add or remove agents
    app.router.add_post("/v1/turns", create_turn)
    app.router.add_get("/v1/turns", list_turns)
    app.router.add_post("/v1/approvals", create_approval)
    app.router.add_get("/v1/approvals/{approval_id}", get_approval)
    app.router.add_post("/v1/approvals/{approval_id}/cancel", cancel_approval)
    app.router.add_post("/v1/approvals/{approval_id}/execution", claim_execution)
    app.router.add_post("/v1/approvals/{approval_id}/outcome", report_outcome)
    app.router.add_get("/v1/approvals/{approval_id}/events", approval_events)
