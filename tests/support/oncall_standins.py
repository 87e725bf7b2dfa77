"""Stand-ins for the paging services on loopback HTTP: PagerDuty's Events API v2 and
Opsgenie's Alert API, shaped like the real ones (their statuses, bodies and error shapes), with
the state a test asserts on (open incidents and alerts), every request recorded, and failures to
order: answer a status N times, with or without ``Retry-After``.

PagerDuty: ``POST /v2/enqueue`` → 202 ``{"status": "success", "message": "Event processed",
"dedup_key": …}``; 400 ``{"status": "invalid event", "message": "Event object is invalid",
"errors": […]}``; 429 when throttled. Opsgenie: ``POST /v2/alerts`` and ``POST
/v2/alerts/{identifier}/close?identifierType=alias`` with ``Authorization: GenieKey <key>`` →
202 ``{"result": "Request will be processed", "took": …, "requestId": …}``; 401, 422 (with an
``errors`` map) and 429 with ``{"message": …, "took": …, "requestId": …}``.

Opsgenie processes what it accepted asynchronously, in no promised order: a close of an alias
that has no open alert (not created yet, or closed already) is answered 202 all the same and
changes nothing. ``held`` models that: requests of the actions it names ("create", "close") are
answered 202 but applied only when the test calls ``process()``, so a close can be processed
before the create it followed.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.support import waiting

__all__ = ["Failure", "OpsgenieStandIn", "PagerDutyStandIn", "Request"]

PD_SEVERITIES = {"critical", "error", "warning", "info"}
PD_ACTIONS = {"trigger", "acknowledge", "resolve"}
OG_PRIORITIES = {"P1", "P2", "P3", "P4", "P5"}
OG_RESPONDER_TYPES = {"team", "user", "escalation", "schedule"}


@dataclass(frozen=True)
class Request:
    """One request as the stand-in received it, and the status it answered."""

    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any  # the parsed JSON (None when it was not JSON)
    raw: bytes
    answered: int
    at: float  # time.monotonic() when it arrived


@dataclass(frozen=True)
class Failure:
    status: int
    retry_after: str | None = None


@dataclass
class _StandIn:
    port: int = 0
    requests: list[Request] = field(default_factory=list)
    # answered in turn before anything is processed (then requests are handled normally)
    failures: list[Failure] = field(default_factory=list)
    # awaited when a request has arrived, before it is answered (something happens meanwhile)
    on_request: Callable[[], Awaitable[None]] | None = None
    _runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail(self, times: int, status: int = 500, retry_after: str | None = None) -> None:
        """Answer the next ``times`` requests with ``status`` (nothing processed)."""
        self.failures += [Failure(status, retry_after)] * times

    def _routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        app = web.Application()
        self._routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True).start()
        if self.port == 0:
            self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        """Down: connections are refused until ``start`` (same port)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def wait_for(self, check: Any, timeout: float = 10.0, what: str = "a request") -> None:
        await waiting.until(check, timeout=timeout, what=what)

    async def _record(
        self, request: web.Request, handle: Any
    ) -> web.Response:  # the common path: fail on order, else handle, and record either way
        raw = await request.read()
        if self.on_request is not None:
            await self.on_request()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        if self.failures:
            failure = self.failures.pop(0)
            response = self._failure(failure)
        else:
            response = handle(request, body)
        self.requests.append(
            Request(
                path=request.path,
                query=dict(request.query),
                headers=dict(request.headers),
                body=body,
                raw=raw,
                answered=response.status,
                at=time.monotonic(),
            )
        )
        return response

    def _failure(self, failure: Failure) -> web.Response:
        raise NotImplementedError


@dataclass
class PagerDutyStandIn(_StandIn):
    """Events API v2. ``routing_keys``: the integrations that exist (32 characters each)."""

    routing_keys: set[str] = field(default_factory=set)
    # open incidents by dedup_key (a trigger opens one, or adds to the open one; resolve closes)
    incidents: dict[str, dict[str, Any]] = field(default_factory=dict)
    resolved: dict[str, dict[str, Any]] = field(default_factory=dict)

    def _routes(self, app: web.Application) -> None:
        async def enqueue(request: web.Request) -> web.Response:
            return await self._record(request, self._enqueue)

        app.router.add_post("/v2/enqueue", enqueue)

    def events(self, action: str | None = None, dedup_key: str | None = None) -> list[Any]:
        """The events it accepted (202), in order."""
        return [
            r.body
            for r in self.requests
            if r.answered == 202
            and (action is None or r.body.get("event_action") == action)
            and (dedup_key is None or r.body.get("dedup_key") == dedup_key)
        ]

    def _failure(self, failure: Failure) -> web.Response:
        headers = {"Retry-After": failure.retry_after} if failure.retry_after else None
        if failure.status == 429:
            body = {
                "status": "throttle event",
                "message": "Requests for this service are arriving too quickly. Please retry "
                "later.",
            }
        else:
            body = {"status": "error", "message": "internal error"}
        return web.json_response(body, status=failure.status, headers=headers)

    def _enqueue(self, request: web.Request, body: Any) -> web.Response:
        problems = self._problems(body)
        if problems:
            return web.json_response(
                {
                    "status": "invalid event",
                    "message": "Event object is invalid",
                    "errors": problems,
                },
                status=400,
            )
        action = body["event_action"]
        key = body.get("dedup_key") or uuid.uuid4().hex
        if action == "trigger":
            incident = self.incidents.setdefault(key, {"events": 0, "payload": body["payload"]})
            incident["events"] += 1
        elif action == "resolve" and key in self.incidents:
            self.resolved[key] = self.incidents.pop(key)
        return web.json_response(
            {"status": "success", "message": "Event processed", "dedup_key": key}, status=202
        )

    def _problems(self, body: Any) -> list[str]:
        if not isinstance(body, dict):
            return ["Event object is not JSON"]
        key = body.get("routing_key")
        if not isinstance(key, str) or len(key) != 32:
            return ["Length of 'routing_key' is incorrect (should be 32 characters)"]
        if key not in self.routing_keys:
            return ["Invalid routing key"]
        action = body.get("event_action")
        if action not in PD_ACTIONS:
            return ["'event_action' is invalid (must be one of: trigger, acknowledge, resolve)"]
        if action != "trigger":
            return [] if body.get("dedup_key") else ["'dedup_key' is missing or blank"]
        payload = body.get("payload")
        if not isinstance(payload, dict):
            return ["'payload' is missing or blank"]
        problems = []
        summary = payload.get("summary")
        if not isinstance(summary, str) or not summary:
            problems.append("'payload.summary' is missing or blank")
        elif len(summary) > 1024:
            problems.append("'payload.summary' is too long (maximum is 1024 characters)")
        if not payload.get("source"):
            problems.append("'payload.source' is missing or blank")
        if payload.get("severity") not in PD_SEVERITIES:
            problems.append("'payload.severity' is invalid (must be one of: critical, error, ...)")
        if len(str(body.get("dedup_key", ""))) > 255:
            problems.append("'dedup_key' is too long (maximum is 255 characters)")
        return problems


def _took() -> float:
    return 0.005


@dataclass
class OpsgenieStandIn(_StandIn):
    """Alert API. ``api_keys``: the API integrations' keys that authenticate."""

    api_keys: set[str] = field(default_factory=set)
    # alerts by alias: {"status": "open" | "closed", "count": n, "body": the create request,
    # "close": the close request that closed it}
    alerts: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the actions ("create", "close") accepted but applied only by process(), in its order
    held: set[str] = field(default_factory=set)
    waiting: list[tuple[str, str, Any]] = field(default_factory=list)  # (action, alias, body)
    # what each accepted request did once processed: (action, alias, outcome)
    processed: list[tuple[str, str, str]] = field(default_factory=list)

    def _routes(self, app: web.Application) -> None:
        async def create(request: web.Request) -> web.Response:
            return await self._record(request, self._create)

        async def close(request: web.Request) -> web.Response:
            return await self._record(request, self._close)

        app.router.add_post("/v2/alerts", create)
        app.router.add_post("/v2/alerts/{identifier}/close", close)

    @property
    def open_alerts(self) -> set[str]:
        return {alias for alias, a in self.alerts.items() if a["status"] == "open"}

    def process(self) -> None:
        """Apply the held requests, in the order they arrived (after those applied already)."""
        waiting, self.waiting = self.waiting, []
        for action, alias, body in waiting:
            self._apply(action, alias, body)

    def accepted(self, path_suffix: str = "") -> list[Request]:
        return [r for r in self.requests if r.answered == 202 and r.path.endswith(path_suffix)]

    @staticmethod
    def _answer(status: int, message: str, **more: Any) -> web.Response:
        body = {"message": message, **more, "took": _took(), "requestId": str(uuid.uuid4())}
        return web.json_response(body, status=status)

    def _failure(self, failure: Failure) -> web.Response:
        headers = {"Retry-After": failure.retry_after} if failure.retry_after else None
        message = (
            "You are making too many requests! To avoid errors, we recommend you limit requests."
            if failure.status == 429
            else "Internal Server Error"
        )
        body = {"message": message, "took": _took(), "requestId": str(uuid.uuid4())}
        return web.json_response(body, status=failure.status, headers=headers)

    def _authenticated(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        scheme, _, key = header.partition(" ")
        return scheme == "GenieKey" and key in self.api_keys

    def _accepted(self) -> web.Response:
        return web.json_response(
            {
                "result": "Request will be processed",
                "took": _took(),
                "requestId": str(uuid.uuid4()),
            },
            status=202,
        )

    def _create(self, request: web.Request, body: Any) -> web.Response:
        if not self._authenticated(request):
            return self._answer(401, "Could not authenticate")
        errors = self._problems(body)
        if errors:
            return self._answer(
                422, "Request body is not processable. Please check the errors.", errors=errors
            )
        self._accept("create", body.get("alias") or body["message"], body)
        return self._accepted()

    def _close(self, request: web.Request, body: Any) -> web.Response:
        if not self._authenticated(request):
            return self._answer(401, "Could not authenticate")
        if request.query.get("identifierType") != "alias":
            return self._answer(
                422, "Request body is not processable.", errors={"identifierType": "expected"}
            )
        # asynchronous, as the real one: an unknown alias is still 202 (its request fails later)
        self._accept("close", request.match_info["identifier"], body)
        return self._accepted()

    def _accept(self, action: str, alias: str, body: Any) -> None:
        if action in self.held:
            self.waiting.append((action, alias, body))
        else:
            self._apply(action, alias, body)

    def _apply(self, action: str, alias: str, body: Any) -> None:
        alert = self.alerts.get(alias)
        is_open = alert is not None and alert["status"] == "open"
        if action == "create":
            if alert is not None and is_open:
                alert["count"] += 1  # de-duplicated by alias while open
                outcome = "deduplicated"
            else:
                self.alerts[alias] = {"status": "open", "count": 1, "body": body}
                outcome = "created"
        elif alert is None:
            outcome = "no such alert"
        elif not is_open:
            outcome = "already closed"  # nothing changes: the first close's note stays
        else:
            alert["status"] = "closed"
            alert["close"] = body
            outcome = "closed"
        self.processed.append((action, alias, outcome))

    def _problems(self, body: Any) -> dict[str, str]:
        if not isinstance(body, dict):
            return {"body": "Request body is not JSON."}
        errors: dict[str, str] = {}
        message = body.get("message")
        if not isinstance(message, str) or not message.strip():
            errors["message"] = "Message can not be empty."
        elif len(message) > 130:
            errors["message"] = "Message can not be longer than 130 characters."
        if len(str(body.get("alias", ""))) > 512:
            errors["alias"] = "Alias can not be longer than 512 characters."
        if "priority" in body and body["priority"] not in OG_PRIORITIES:
            errors["priority"] = "Priority should be one of [P1, P2, P3, P4, P5]"
        for i, responder in enumerate(body.get("responders") or []):
            if not isinstance(responder, dict) or responder.get("type") not in OG_RESPONDER_TYPES:
                errors[f"responders[{i}]"] = "Responder type is invalid."
        details = body.get("details") or {}
        if not all(isinstance(v, str) for v in details.values()):
            errors["details"] = "Details values should be strings."
        return errors
