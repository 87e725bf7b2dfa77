"""The agent API's wire format, v1: how a request's parts are read and checked before the
service sees them. Bodies are JSON restricted to I-JSON (RFC 7493), at most :data:`MAX_BODY`
bytes, so that they can be hashed and stored exactly; every refusal is an
:class:`~bot.http_errors.ApiError` naming the field (400, 415 or 422), never a 500.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from approvals import hashing, models
from bot import http_errors
from bot.http_errors import ApiError

__all__ = [
    "MAX_BODY",
    "MAX_WAIT",
    "CancelRequest",
    "approval_id",
    "bad_text",
    "not_reserved",
    "read_json",
    "session_id",
    "validate",
    "wait_seconds",
]

MAX_BODY = 64 * 1024  # the wire contract's limit on an agent's request body
MAX_WAIT = 60.0  # seconds a GET may long-poll


async def read_json(request: web.Request, *, required: bool = True) -> Any:
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


def bad_text(text: str) -> bool:
    return _BAD_TEXT.search(text) is not None


def _not_i_json(value: Any, path: str = "") -> Iterator[dict[str, str]]:
    """Fields that cannot be hashed or stored exactly, named by their path: NUL (PostgreSQL
    text cannot hold it), lone surrogates (UTF-8 cannot), numbers no double holds."""
    here = path or "(body)"
    if isinstance(value, _Unrepresentable):
        yield http_errors.problem(here, value.why)
    elif isinstance(value, str):
        if bad_text(value):
            yield http_errors.problem(here, "contains NUL or a lone surrogate")
    elif isinstance(value, dict):
        for key, item in value.items():
            if bad_text(key):
                yield http_errors.problem(here, "a key contains NUL or a lone surrogate")
            else:
                yield from _not_i_json(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _not_i_json(item, f"{path}.{index}" if path else str(index))


def _summary(problems: list[dict[str, str]]) -> str:
    return "cannot be hashed and stored exactly: " + ", ".join(p["field"] for p in problems)


def approval_id(request: web.Request) -> str:
    """The approval id in the path; one not shaped like ours is a 404, not a database read."""
    found = request.match_info["approval_id"]
    if not models.APPROVAL_ID.fullmatch(found):
        raise ApiError(404, "not_found", "no approval with that id")
    return found


def validate(model: type[BaseModel], body: Any) -> Any:
    """``body`` as ``model``; a validation error is a 422 naming each field."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise http_errors.from_validation(exc) from None


def not_reserved(body: models.ApprovalRequest) -> models.ApprovalRequest:
    """Request ids with the turn prefix belong to guard escalations (created inside, not through
    this route): an agent could otherwise pre-empt a turn's approval with content of its own."""
    if body.request_id.startswith(models.TURN_REQUEST_PREFIX):
        message = f"request ids starting with {models.TURN_REQUEST_PREFIX!r} are reserved"
        raise ApiError(
            422, "invalid_request", message, [http_errors.problem("request_id", message)]
        )
    return body


def wait_seconds(request: web.Request) -> float:
    """The ``wait`` query parameter: seconds to long-poll, 0 when absent."""
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


# The body of POST /v1/approvals/{approval_id}/cancel (optional: no body, no reason). No
# docstring: pydantic would put it in the generated OpenAPI document (docs/openapi.json).
class CancelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    reason: str | None = Field(None, max_length=2000)


def session_id(request: web.Request) -> str:
    """The ``session_id`` query parameter, by the same rule as a body's: 1 to 200 characters
    that can be stored."""
    found = request.query.get("session_id", "").strip()
    if not found or len(found) > 200 or bad_text(found):
        message = "session_id is required: 1 to 200 characters, no NUL"
        raise ApiError(
            422, "invalid_request", message, [http_errors.problem("session_id", message)]
        )
    return found
