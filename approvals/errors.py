"""The one exception hierarchy of Countersign's core.

    CountersignError
    ├── InvalidTransition      a decision that the lifecycle does not allow (e.g. settling twice)
    ├── NotFound               no approval with that id (for that agent)
    ├── ExecutionRefused       a claim to run an approved call, or its outcome, cannot be taken
    │   ├── AlreadyClaimed     another claim holds the one execution the approval allows
    │   ├── NotApproved        only an approved call may run
    │   ├── DecisionLapsed     approved, but not claimed in time: ask again
    │   ├── NotTheseArguments  the claim is for other arguments than the ones approved to run
    │   ├── NotClaimed         no claim with that idempotency key
    │   └── OutcomeAlreadyReported  the claim has another outcome already
    ├── RequestConflict        same (agent, session_id, request_id), different content
    ├── TurnConflict           the same for a lead-facing turn (its ids are bound to a verdict)
    ├── InvalidArguments       the rules or the tool's schema cannot evaluate these arguments
    ├── CallbackNotAllowed     callback host not on the agent's allow-list
    ├── ConfigError            the configuration cannot be used (one message per problem)
    │   ├── PolicyError        the policy file is invalid
    │   └── SettingsError      the environment is invalid (a variable unset or malformed)
    ├── DatabaseUnavailable    the database cannot be reached right now (the caller tries
    │                          again)
    ├── DeliveryFailed         an outbox delivery did not succeed this time (retried later;
    │                          slowly when only a person can fix it)
    └── NotYet                 an outbox delivery must wait its turn (a rate limit): tried
                               again after ``after`` seconds, not counted as an attempt

The edges map these to HTTP codes (bot/http_errors.py) and Slack messages (bot/messages.py),
each in one place.
"""

from __future__ import annotations

from datetime import datetime

__all__ = [
    "AlreadyClaimed",
    "CallbackNotAllowed",
    "CalledAgain",
    "ConfigError",
    "CountersignError",
    "DatabaseUnavailable",
    "DecisionLapsed",
    "DeliveryFailed",
    "ExecutionRefused",
    "InvalidArguments",
    "InvalidTransition",
    "NotApproved",
    "NotClaimed",
    "NotFound",
    "NotTheseArguments",
    "NotYet",
    "OutcomeAlreadyReported",
    "PolicyError",
    "RequestConflict",
    "SettingsError",
    "TurnConflict",
]


class CountersignError(Exception):
    """Root of every error raised on purpose by Countersign."""


class InvalidTransition(CountersignError):
    """The approval lifecycle does not allow this step from the current status."""

    def __init__(self, current: str, attempted: str) -> None:
        super().__init__(f"cannot go from {current!r} by {attempted!r}")
        self.current = current
        self.attempted = attempted


class NotFound(CountersignError):
    """No approval with that id."""


class ExecutionRefused(CountersignError):
    """A claim to run an approved call, or a report of its outcome, that cannot be taken."""


class AlreadyClaimed(ExecutionRefused):
    """Another claim (another idempotency key) holds the one execution the approval allows."""

    def __init__(self, claim_id: str, claimed_at: datetime) -> None:
        super().__init__(f"already claimed at {claimed_at.isoformat()} by claim {claim_id}")
        self.claim_id = claim_id
        self.claimed_at = claimed_at


class CalledAgain(ExecutionRefused):
    """Approved with edits, and called again with the edited arguments: that call (another
    approval, ``edit_of`` this one) holds the one execution the edit allows."""

    def __init__(self, approval_id: str) -> None:
        super().__init__(
            f"this call was approved with edits and called again as {approval_id}, which runs "
            "them: this one must not run"
        )
        self.approval_id = approval_id


class NotApproved(ExecutionRefused):
    """Only an approved call may run."""

    def __init__(self, status: str) -> None:
        super().__init__(f"the approval is {status}, not approved: the call must not run")
        self.status = status


class DecisionLapsed(ExecutionRefused):
    """Approved, but not claimed within its valid_for: not executed; ask again."""

    def __init__(self, valid_until: datetime) -> None:
        super().__init__(
            f"the approval was valid until {valid_until.isoformat()}: the call was not run; "
            "submit it again for a new decision"
        )
        self.valid_until = valid_until


class NotTheseArguments(ExecutionRefused):
    """The claim names other arguments (their SHA-256) than the approval lets run: after an
    edit, only the edited ones, and a claim must name them."""

    def __init__(self, approved_sha256: str, given: str | None) -> None:
        if given is None:
            message = (
                "this call was approved with edits: claim it with the edited arguments' "
                f"arguments_sha256 ({approved_sha256}) and run those, never the requested ones"
            )
        else:
            message = (
                f"arguments_sha256 {given} is not what was approved to run ({approved_sha256})"
            )
        super().__init__(message)
        self.approved_sha256 = approved_sha256


class NotClaimed(ExecutionRefused):
    """No claim with that idempotency key: only the claimer reports an outcome."""


class OutcomeAlreadyReported(ExecutionRefused):
    """The claim has an outcome already, another than this report."""


class RequestConflict(CountersignError):
    """The ids of a submission are already bound to different content (never a silent rebind)."""

    def __init__(self, approval_id: str) -> None:
        super().__init__(
            f"session_id and request_id are already bound to approval {approval_id} "
            "with different content"
        )
        self.approval_id = approval_id


class TurnConflict(CountersignError):
    """A turn's ids are already bound to a verdict on different content (never re-decided)."""

    def __init__(self, request_id: str) -> None:
        super().__init__(
            f"session_id and request_id {request_id!r} are already bound to a turn "
            "with different content"
        )
        self.request_id = request_id


class InvalidArguments(CountersignError):
    """A field that a rule compares (or a ceiling names) is absent or of another type, or the
    arguments fail the tool's schema: refused, never routed to a laxer rule (fail closed)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{field}: {message}" for field, message in problems))
        self.problems = problems  # (field as the agent wrote it, why)


class CallbackNotAllowed(CountersignError):
    """The callback URL's host is not on the agent's allow-list (no SSRF)."""


class ConfigError(CountersignError):
    """The configuration cannot be used; ``problems`` holds one readable message per problem
    (raised as such when both the environment and the policy file have some)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class PolicyError(ConfigError):
    """The policy file is invalid: each problem names the file, line and key."""


class SettingsError(ConfigError):
    """The environment is invalid: each problem names the variable."""


class DatabaseUnavailable(CountersignError):
    """The database could not be reached (connection refused or lost, server shutting down or
    starting up). The statement most likely did not commit (a connection lost during COMMIT
    leaves it unknown), so an edge answers "try again" — 503 with ``Retry-After``, an ephemeral
    in Slack — never a 500 and never a success; submissions and clicks are idempotent, so the
    retry is safe either way."""


class DeliveryFailed(CountersignError):
    """One delivery attempt failed; the relay retries later (``retry_after`` if the far side
    said when). ``permanent``: the far side refused in a way that only a person can fix (the
    edge that knows the far side says so); retried on a slow cadence, not the backoff."""

    def __init__(
        self, message: str, *, retry_after: float | None = None, permanent: bool = False
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.permanent = permanent


class NotYet(CountersignError):
    """A delivery that may not run yet (the far side's rate leaves no room now): the relay
    runs it again after ``after`` seconds without holding one of its slots meanwhile. Not a
    failure: no attempt is counted and no backoff grows, as long as the row's lease lasts."""

    def __init__(self, after: float) -> None:
        super().__init__(f"not yet: due in {after:.3f} s")
        self.after = after
