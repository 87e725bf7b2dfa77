"""The approval lifecycle as a table: every status x every decision kind, expiry wins, terminal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from approvals import errors, hashing, models, states

S = models.Status
KINDS = ("approve", "deny", "expire", "cancel")

CREATED = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
EXPIRES = CREATED + timedelta(hours=1)
BEFORE = EXPIRES - timedelta(seconds=1)
ARGUMENTS: dict[str, Any] = {"amount": 500, "to": "DE89 3704"}
NOT_EXECUTED = "not executed"


def make_approval(status: S = S.PENDING, **changes: Any) -> models.Approval:
    base = models.Approval(
        approval_id="apr_" + "0" * 24,
        status=S.PENDING,
        agent="sales-bot",
        request_id="af-call-7",
        session_id="thread-1",
        tool=models.ToolCall(name="transfer_money", call_id="call_1", arguments=ARGUMENTS),
        arguments_sha256=hashing.arguments_sha256(ARGUMENTS),
        requester=models.Requester(slack_user_id="U0REQ", email="rita@example.com"),
        required=models.Required(role="finance"),
        rule="rules[0] tool=transfer_*",
        created_at=CREATED,
        expires_at=EXPIRES,
        policy_version="pol_0123456789abcdef",
        fingerprint="f" * 64,
    )
    return base.evolve(status=status, **changes)


def decider(at: datetime = BEFORE, name: str | None = "Alma") -> models.Decider:
    return models.Decider(slack_user_id="U0ALMA", name=name, email="alma@example.com", at=at)


def decision(kind: str, at: datetime) -> states.Decision:
    """A decision of ``kind`` made at ``at``."""
    if kind == "approve":
        return states.Approve(by=decider(at))
    if kind == "deny":
        return states.Deny(by=decider(at), reason="wrong account")
    if kind == "expire":
        return states.Expire(at=at)
    if kind == "cancel":
        return states.Cancel(at=at, reason="user changed their mind")
    raise AssertionError(kind)


def legal_time(kind: str) -> datetime:
    """A moment at which ``kind`` is allowed from pending: expire only once due, others before."""
    return EXPIRES if kind == "expire" else BEFORE


# The lifecycle written out independently of states.TRANSITIONS.
EXPECTED: dict[S, dict[str, S | None]] = {
    S.PENDING: {
        "approve": S.APPROVED,
        "deny": S.DENIED,
        "expire": S.EXPIRED,
        "cancel": S.CANCELLED,
    },
    **{status: dict.fromkeys(KINDS) for status in S if status is not S.PENDING},
}


@pytest.mark.parametrize("status", list(S))
@pytest.mark.parametrize("kind", KINDS)
def test_transition_table(status: S, kind: str) -> None:
    approval = make_approval(status)
    now = legal_time(kind)
    target = EXPECTED[status][kind]
    if target is None:
        with pytest.raises(errors.InvalidTransition) as exc:
            states.settle(approval, decision(kind, now), now)
        assert exc.value.current == status.value
        assert exc.value.attempted == kind
    else:
        settled = states.settle(approval, decision(kind, now), now)
        assert settled.status is target
        assert settled.settled


def test_terminal_statuses_are_every_settled_status() -> None:
    assert frozenset({S.APPROVED, S.DENIED, S.EXPIRED, S.CANCELLED}) == states.TERMINAL
    assert S.PENDING not in states.TERMINAL


@pytest.mark.parametrize("first", KINDS)
@pytest.mark.parametrize("second", KINDS)
def test_settling_twice_raises(first: str, second: str) -> None:
    once = states.settle(make_approval(), decision(first, legal_time(first)), legal_time(first))
    later = EXPIRES + timedelta(minutes=5)
    with pytest.raises(errors.InvalidTransition):
        states.settle(once, decision(second, later), later)
    # the first settlement is what stays
    assert once.status is EXPECTED[S.PENDING][first]


@pytest.mark.parametrize("kind", ["approve", "deny"])
@pytest.mark.parametrize(
    "now",
    [EXPIRES, EXPIRES + timedelta(microseconds=1), EXPIRES + timedelta(days=3)],
    ids=["at-expires_at", "1us-after", "days-after"],
)
def test_click_at_or_after_expiry_is_refused(kind: str, now: datetime) -> None:
    """Expiry wins: a late approve can never become an approval."""
    approval = make_approval()
    with pytest.raises(errors.InvalidTransition) as exc:
        states.settle(approval, decision(kind, now), now)
    assert exc.value.current == "expired"
    # and the approval can still be expired normally afterwards
    expired = states.settle(approval, states.Expire(at=now), now)
    assert expired.status is S.EXPIRED
    assert expired.decided_by == ()


@pytest.mark.parametrize("kind", ["approve", "deny"])
def test_click_just_before_expiry_counts(kind: str) -> None:
    now = EXPIRES - timedelta(microseconds=1)
    settled = states.settle(make_approval(), decision(kind, now), now)
    assert settled.status is EXPECTED[S.PENDING][kind]


@pytest.mark.parametrize(
    "at",
    [CREATED, BEFORE, EXPIRES - timedelta(microseconds=1)],
    ids=["at-creation", "1s-before", "1us-before"],
)
def test_expire_before_expires_at_raises(at: datetime) -> None:
    approval = make_approval()
    with pytest.raises(errors.InvalidTransition):
        states.settle(approval, states.Expire(at=at), at)
    assert approval.status is S.PENDING


def test_expire_at_expires_at_is_allowed() -> None:
    expired = states.settle(make_approval(), states.Expire(at=EXPIRES), EXPIRES)
    assert expired.status is S.EXPIRED
    assert expired.decided_at == EXPIRES


def test_is_expired() -> None:
    pending = make_approval()
    assert not states.is_expired(pending, BEFORE)
    assert states.is_expired(pending, EXPIRES)
    assert states.is_expired(pending, EXPIRES + timedelta(hours=1))
    # a settled approval is never "expired" by the clock: it already has its outcome
    for status in (S.APPROVED, S.DENIED, S.CANCELLED, S.EXPIRED):
        assert not states.is_expired(make_approval(status), EXPIRES + timedelta(hours=1))


def test_approve_sets_decider_and_time_and_no_reason() -> None:
    by = decider()
    settled = states.settle(make_approval(), states.Approve(by=by), BEFORE)
    assert settled.status is S.APPROVED
    assert settled.decided_by == (by,)
    assert settled.decided_at == BEFORE
    assert settled.reason is None


def test_deny_reason_names_decider_reason_and_not_executed() -> None:
    by = decider()
    settled = states.settle(make_approval(), states.Deny(by=by, reason="wrong IBAN"), BEFORE)
    assert settled.status is S.DENIED
    assert settled.decided_by == (by,)
    assert settled.decided_at == BEFORE
    assert settled.reason is not None
    assert "Alma" in settled.reason
    assert "wrong IBAN" in settled.reason
    assert NOT_EXECUTED in settled.reason


def test_deny_without_reason_or_name_falls_back_to_slack_id() -> None:
    settled = states.settle(make_approval(), states.Deny(by=decider(name=None)), BEFORE)
    assert settled.reason is not None
    assert "U0ALMA" in settled.reason
    assert NOT_EXECUTED in settled.reason


def test_expire_reason_says_not_executed_and_nobody_decided() -> None:
    now = EXPIRES + timedelta(seconds=5)
    expired = states.settle(make_approval(), states.Expire(at=now), now)
    assert expired.decided_by == ()
    assert expired.decided_at == now
    assert expired.reason is not None
    assert NOT_EXECUTED in expired.reason
    assert "Expired" in expired.reason


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        (None, f"Cancelled by the agent. {states.NOT_EXECUTED}"),
        ("superseded", f"Cancelled by the agent: superseded. {states.NOT_EXECUTED}"),
    ],
)
def test_cancel_reason(reason: str | None, expected: str) -> None:
    cancelled = states.settle(make_approval(), states.Cancel(at=BEFORE, reason=reason), BEFORE)
    assert cancelled.status is S.CANCELLED
    assert cancelled.decided_by == ()
    assert cancelled.decided_at == BEFORE
    assert cancelled.reason == expected


def test_cancel_after_expires_at_is_not_an_approval() -> None:
    """The agent may withdraw a request that is due to expire; either way it is not approved."""
    now = EXPIRES + timedelta(minutes=1)
    cancelled = states.settle(make_approval(), states.Cancel(at=now), now)
    assert cancelled.status is S.CANCELLED


@pytest.mark.parametrize("kind", KINDS)
def test_input_approval_is_unchanged(kind: str) -> None:
    approval = make_approval()
    snapshot = approval.model_dump()
    now = legal_time(kind)
    settled = states.settle(approval, decision(kind, now), now)
    assert settled is not approval
    assert approval.model_dump() == snapshot
    assert approval.status is S.PENDING
    assert approval.decided_at is None
    assert approval.decided_by == ()
    # everything but the settlement fields is carried over
    keep = {"status", "decided_by", "decided_at", "reason"}
    assert {k: v for k, v in settled.model_dump().items() if k not in keep} == {
        k: v for k, v in snapshot.items() if k not in keep
    }


def test_approval_is_frozen() -> None:
    approval = make_approval()
    with pytest.raises(ValidationError):
        approval.status = S.APPROVED  # type: ignore[misc]
    assert approval.status is S.PENDING


def test_decisions_parse_by_kind() -> None:
    """The discriminated union: a stored decision comes back as the right class."""
    adapter: TypeAdapter[states.Decision] = TypeAdapter(states.Decision)
    parsed = adapter.validate_python({"kind": "expire", "at": EXPIRES.isoformat()})
    assert isinstance(parsed, states.Expire)
    assert parsed.at == EXPIRES
    with pytest.raises(ValidationError):
        adapter.validate_python({"kind": "approve_all", "at": EXPIRES.isoformat()})
