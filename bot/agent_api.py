"""The agent-facing HTTP API, v1: routes, the bearer-token check, and the middlewares that
bound bodies and answer every error as JSON. Handlers only translate: read the request
(:mod:`bot.wire`), call the service, render the resource.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

from approvals import errors, metrics, models, resource
from approvals.service import ApprovalService, ApproverDirectory
from approvals.turn_service import TurnService
from bot import http_errors, slack_app, wire
from bot.config import AgentCredentials
from bot.http_errors import ApiError

__all__ = ["API_PREFIX", "BODY_LIMITS", "add_routes", "body_limit", "error_middleware"]

log = logging.getLogger(__name__)

API_PREFIX = "/v1/"
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
            ApiError(413, "too_large", f"the body is over {wire.MAX_BODY} bytes")
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
BODY_LIMITS = ((API_PREFIX, wire.MAX_BODY), ("/slack/", slack_app.MAX_PAYLOAD))


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


def _render(approval: models.Approval, status: int = 200) -> web.Response:
    # rendered by the resource module, which embeds the arguments as the bytes that were hashed
    return web.Response(
        body=resource.render(approval),
        status=status,
        content_type="application/json",
        charset="utf-8",
    )


async def create_approval(request: web.Request) -> web.Response:
    agent = _agent(request)
    body = wire.not_reserved(wire.validate(models.ApprovalRequest, await wire.read_json(request)))
    approval, created = await request.app[SERVICE].submit(
        agent, body, directory=request.app[DIRECTORY]
    )
    if created:
        metrics.APPROVALS_CREATED.labels(agent).inc()
    return _render(approval, 201 if created else 200)


async def get_approval(request: web.Request) -> web.Response:
    agent = _agent(request)
    wait = wire.wait_seconds(request)
    service = request.app[SERVICE]
    approval_id = wire.approval_id(request)
    if wait > 0:
        return _render(await service.wait(approval_id, agent=agent, timeout=wait))
    return _render(await service.get(approval_id, agent=agent))


async def cancel_approval(request: web.Request) -> web.Response:
    agent = _agent(request)
    body = wire.validate(wire.CancelRequest, await wire.read_json(request, required=False))
    service = request.app[SERVICE]
    approval_id = wire.approval_id(request)
    return _render(await service.cancel(approval_id, agent=agent, reason=body.reason))


async def claim_execution(request: web.Request) -> web.Response:
    agent = _agent(request)
    body = wire.validate(models.ExecutionClaim, await wire.read_json(request))
    approval = await request.app[SERVICE].claim_execution(
        wire.approval_id(request),
        agent=agent,
        idempotency_key=body.idempotency_key,
        arguments_sha256=body.arguments_sha256,
    )
    return _render(approval)


async def report_outcome(request: web.Request) -> web.Response:
    agent = _agent(request)
    body = wire.validate(models.OutcomeReport, await wire.read_json(request))
    approval = await request.app[SERVICE].report_outcome(
        wire.approval_id(request), agent=agent, report=body
    )
    return _render(approval)


async def approval_events(request: web.Request) -> web.Response:
    agent = _agent(request)
    approval, attempts, timers = await request.app[SERVICE].events(
        wire.approval_id(request), agent=agent
    )
    return web.json_response(resource.events(approval, attempts, timers))


async def list_grants(request: web.Request) -> web.Response:
    """The calling agent's live standing grants (read only: grants are made and revoked by
    people, in Slack or at the command line)."""
    agent = _agent(request)
    found = await request.app[SERVICE].list_grants(agent=agent, live=True)
    return web.json_response({"grants": [resource.grant(g) for g in found]})


async def create_turn(request: web.Request) -> web.Response:
    agent = _agent(request)
    body = wire.validate(models.TurnRequest, await wire.read_json(request))
    answer = await request.app[TURNS].decide(agent, body, request.app[DIRECTORY])
    return web.json_response(resource.turn(answer.record, answer.approval))


async def list_turns(request: web.Request) -> web.Response:
    agent = _agent(request)
    session_id = wire.session_id(request)
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
    """Mount the agent API on ``app``; ``agents`` is read per request (see below)."""
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
    app.router.add_get("/v1/grants", list_grants)
