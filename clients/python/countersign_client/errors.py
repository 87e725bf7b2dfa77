"""The client's exception tree.

CountersignClientError
├── ApiError                a 4xx/5xx answer: .status, .code, .message, .fields
│   ├── BadRequest          400 malformed JSON
│   ├── Unauthorized        401 wrong or missing agent token
│   ├── NotFound            404 unknown approval (or another agent's)
│   ├── Conflict            409 same ids with other content / already settled
│   │   ├── AlreadyClaimed          another caller holds the one execution: .claim_id, .claimed_at
│   │   ├── NotApproved             only an approved call may be claimed: .approval_status
│   │   ├── DecisionLapsed          approved, but past .valid_until: not executed; ask again
│   │   ├── NotTheseArguments       not the arguments approved to run: .arguments_sha256
│   │   ├── CalledAgain             its edit runs as the call again .called_again_as
│   │   ├── NotClaimed              an outcome report without a claim under that key
│   │   └── OutcomeAlreadyReported  another outcome is stored for the claim already
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
    "AlreadyClaimed",
    "ApiError",
    "BadRequest",
    "BindingMismatch",
    "CalledAgain",
    "Conflict",
    "CountersignClientError",
    "DecisionLapsed",
    "DuplicateDelivery",
    "InvalidRequest",
    "NotApproved",
    "NotClaimed",
    "NotFound",
    "NotTheseArguments",
    "OutcomeAlreadyReported",
    "PayloadTooLarge",
    "SignatureError",
    "Unauthorized",
    "UnsupportedMediaType",
    "from_response",
]


class CountersignClientError(Exception):
    """Root of everything this client raises on purpose."""


class ApiError(CountersignClientError):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        fields: list[dict[str, Any]],
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.fields = fields
        # the error object's other members (e.g. "claim", "valid_until"), as sent
        self.details = details or {}


class BadRequest(ApiError): ...


class Unauthorized(ApiError): ...


class NotFound(ApiError): ...


class Conflict(ApiError): ...


class AlreadyClaimed(Conflict):
    """Another idempotency key claimed the one execution first: do not run the call here."""

    @property
    def claim_id(self) -> str:
        claim = self.details.get("claim")
        return str(claim.get("claim_id", "")) if isinstance(claim, dict) else ""

    @property
    def claimed_at(self) -> str:
        """ISO-8601, as the server sent it ("" when it sent none)."""
        claim = self.details.get("claim")
        return str(claim.get("claimed_at", "")) if isinstance(claim, dict) else ""


class NotApproved(Conflict):
    """The approval is pending, denied, expired or cancelled: the call must not run."""

    @property
    def approval_status(self) -> str:
        return str(self.details.get("status", ""))


class DecisionLapsed(Conflict):
    """Approved, but not claimed by ``valid_until``: not executed; submit it again."""

    @property
    def valid_until(self) -> str:
        """ISO-8601, as the server sent it ("" when it sent none)."""
        return str(self.details.get("valid_until", ""))


class NotTheseArguments(Conflict):
    """The claim named other arguments than the approval lets run (after an edit, only the
    edited ones; a claim must name their hash)."""

    @property
    def arguments_sha256(self) -> str:
        """The hash of the arguments that may run ("" when the server sent none)."""
        return str(self.details.get("arguments_sha256", ""))


class CalledAgain(Conflict):
    """Approved with edits, and the model called again with exactly the edited arguments: that
    call (another approval) runs them; this one must not run."""

    @property
    def called_again_as(self) -> str:
        """The call again's approval id ("" when the server sent none)."""
        return str(self.details.get("called_again_as", ""))


class NotClaimed(Conflict):
    """An outcome report under a key that holds no claim (only the claimer reports)."""


class OutcomeAlreadyReported(Conflict):
    """The claim already has another outcome; the first one stands."""


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


_CONFLICT_BY_CODE: dict[str, type[Conflict]] = {
    "already_claimed": AlreadyClaimed,
    "not_approved": NotApproved,
    "decision_lapsed": DecisionLapsed,
    "not_these_arguments": NotTheseArguments,
    "called_again": CalledAgain,
    "not_claimed": NotClaimed,
    "outcome_already_reported": OutcomeAlreadyReported,
}
_KNOWN = frozenset({"code", "message", "fields"})


def from_response(status: int, body: Any) -> ApiError:
    """The typed error for an answer: by status, and for a 409 by its ``code``."""
    raw = body.get("error", {}) if isinstance(body, dict) else {}
    error: dict[str, Any] = raw if isinstance(raw, dict) else {}
    code = str(error.get("code", "error"))
    cls = _BY_STATUS.get(status, ApiError)
    if status == 409:
        cls = _CONFLICT_BY_CODE.get(code, Conflict)
    fields = error.get("fields", [])
    return cls(
        status,
        code,
        str(error.get("message", body if isinstance(body, str) else "")),
        list(fields) if isinstance(fields, list) else [],
        {k: v for k, v in error.items() if k not in _KNOWN},
    )
