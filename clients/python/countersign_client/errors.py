"""The client's exception tree.

CountersignClientError
├── ApiError                a 4xx/5xx answer: .status, .code, .message, .fields
│   ├── BadRequest          400 malformed JSON
│   ├── Unauthorized        401 wrong or missing agent token
│   ├── NotFound            404 unknown approval (or another agent's)
│   ├── Conflict            409 same ids with other content / already settled
│   ├── PayloadTooLarge     413
│   ├── UnsupportedMediaType 415
│   └── InvalidRequest      422 schema errors, each field named in .fields
├── SignatureError          a callback whose Countersign-Signature does not verify
│   └── DuplicateDelivery   a valid callback already seen (same Idempotency-Key): ack, skip
└── BindingMismatch         a decision that is not for the request pending in this session
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ApiError",
    "BadRequest",
    "BindingMismatch",
    "Conflict",
    "CountersignClientError",
    "DuplicateDelivery",
    "InvalidRequest",
    "NotFound",
    "PayloadTooLarge",
    "SignatureError",
    "Unauthorized",
    "UnsupportedMediaType",
    "from_response",
]


class CountersignClientError(Exception):
    """Root of everything this client raises on purpose."""


class ApiError(CountersignClientError):
    def __init__(self, status: int, code: str, message: str, fields: list[dict[str, Any]]) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.fields = fields


class BadRequest(ApiError): ...


class Unauthorized(ApiError): ...


class NotFound(ApiError): ...


class Conflict(ApiError): ...


class PayloadTooLarge(ApiError): ...


class UnsupportedMediaType(ApiError): ...


class InvalidRequest(ApiError): ...


class SignatureError(CountersignClientError): ...


class DuplicateDelivery(SignatureError):
    """Valid, but this Idempotency-Key was delivered before: answer 2xx and do nothing."""


class BindingMismatch(CountersignClientError):
    """An echoed field of the decision differs from the request still pending."""

    def __init__(self, field: str, expected: object, got: object) -> None:
        super().__init__(
            f"decision refused: {field} is {got!r}, the pending request has {expected!r}"
        )
        self.field = field
        self.expected = expected
        self.got = got


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    422: InvalidRequest,
}


def from_response(status: int, body: Any) -> ApiError:
    error = body.get("error", {}) if isinstance(body, dict) else {}
    cls = _BY_STATUS.get(status, ApiError)
    return cls(
        status,
        str(error.get("code", "error")),
        str(error.get("message", body if isinstance(body, str) else "")),
        list(error.get("fields", [])),
    )
