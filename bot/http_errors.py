"""The one place where errors become HTTP answers of the agent webhook.

Every answer is ``{"error": {"code", "message", "fields"}}``; bad input is always a 4xx, never
a 500.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from approvals import errors

__all__ = [
    "DATABASE_RETRY_AFTER",
    "ApiError",
    "from_core",
    "from_validation",
    "json_error",
    "problem",
]


class ApiError(web.HTTPException):
    """Raised by handlers; rendered by the middleware as the JSON error body."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        fields: Iterable[dict[str, str]] = (),
        *,
        retry_after: int | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        self.status_code = status
        super().__init__(reason=None)
        # details: what a client acts on beside the code (e.g. which claim holds an execution)
        self.error_body = {"code": code, "message": message, "fields": list(fields)} | dict(
            details or {}
        )
        self.retry_after = retry_after


# How long a client waits before trying again while the database is away: PostgreSQL restarts
# and failovers take seconds, and the client's retry must not pile onto a server coming back.
DATABASE_RETRY_AFTER = 2


def json_error(error: ApiError) -> web.Response:
    headers = {}
    if error.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="countersign"'
    if error.retry_after is not None:
        headers["Retry-After"] = str(error.retry_after)
    return web.json_response({"error": error.error_body}, status=error.status, headers=headers)


def _field(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(body)"


def from_validation(exc: ValidationError) -> ApiError:
    fields = [{"field": _field(e["loc"]), "message": e["msg"]} for e in exc.errors()]
    names = ", ".join(f["field"] for f in fields)
    return ApiError(422, "invalid_request", f"invalid fields: {names}", fields)


def from_core(exc: errors.CountersignError) -> ApiError:
    """Map the core's exception tree to HTTP, exhaustively for what handlers can meet."""
    match exc:
        case errors.NotFound():
            return ApiError(404, "not_found", "no approval with that id")
        case errors.RequestConflict() | errors.TurnConflict():
            return ApiError(
                409, "conflict", str(exc), [{"field": "request_id", "message": str(exc)}]
            )
        case errors.CallbackNotAllowed():
            return ApiError(
                422,
                "callback_not_allowed",
                str(exc),
                [{"field": "callback_url", "message": str(exc)}],
            )
        case errors.InvalidArguments(problems=problems):
            names = ", ".join(dict.fromkeys(field for field, _ in problems))
            return ApiError(
                422,
                "invalid_arguments",
                f"the policy cannot evaluate these arguments: {names}",
                [{"field": field, "message": message} for field, message in problems],
            )
        case errors.DatabaseUnavailable():
            return ApiError(
                503,
                "database_unavailable",
                "the database is unreachable; send the same request again (it is idempotent)",
                retry_after=DATABASE_RETRY_AFTER,
            )
        case errors.InvalidTransition():
            return ApiError(409, "already_settled", f"the approval is already {exc.current}")
        case errors.AlreadyClaimed():
            claim = {"claim_id": exc.claim_id, "claimed_at": exc.claimed_at.isoformat()}
            return ApiError(409, "already_claimed", str(exc), details={"claim": claim})
        case errors.CalledAgain():
            details = {"called_again_as": exc.approval_id}
            return ApiError(409, "called_again", str(exc), details=details)
        case errors.NotApproved():
            return ApiError(409, "not_approved", str(exc), details={"status": exc.status})
        case errors.DecisionLapsed():
            until = exc.valid_until.isoformat()
            return ApiError(409, "decision_lapsed", str(exc), details={"valid_until": until})
        case errors.NotTheseArguments():
            fields = [problem("arguments_sha256", str(exc))]
            details = {"arguments_sha256": exc.approved_sha256}
            return ApiError(409, "not_these_arguments", str(exc), fields, details=details)
        case errors.NotClaimed():
            fields = [problem("idempotency_key", str(exc))]
            return ApiError(409, "not_claimed", str(exc), fields)
        case errors.OutcomeAlreadyReported():
            return ApiError(409, "outcome_already_reported", str(exc))
        case _:
            return ApiError(400, "bad_request", str(exc))


def problem(field: str, message: str) -> dict[str, Any]:
    return {"field": field, "message": message}
