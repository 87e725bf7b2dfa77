"""The audit chain's pure part: the hashes are exactly what the README's recipe recomputes with
the standard library, and verification names each kind of mismatch."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from approvals import audit_chain, hashing
from approvals.audit_chain import ChainEvent, Seal, Verifier, build_seal

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def stdlib_sha256(value: Any) -> str:
    """The README recipe's hash: json.dumps sorted and compact, UTF-8."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def event(
    key: str, xid: int | None, at: datetime = T0, kind: str = "attempt", **data: Any
) -> ChainEvent:
    return ChainEvent.model_validate(
        {
            "kind": kind,
            "key": key,
            "approval_id": "apr_1",
            "at": at,
            "data": {"outcome": "accepted", "detail": ""} | data,
            "xid": xid,
        }
    )


def chain(*ranges: tuple[int, int, list[ChainEvent], datetime]) -> list[Seal]:
    seals: list[Seal] = []
    for start, end, events, sealed_at in ranges:
        seals.append(
            build_seal(
                seq=len(seals) + 1,
                prev_hash=seals[-1].hash if seals else audit_chain.GENESIS,
                from_xid=start,
                to_xid=end,
                sealed_at=sealed_at,
                events=events,
            )
        )
    return seals


def verify(
    seals: list[Seal],
    events: dict[int, list[ChainEvent]],
    unsealed: list[ChainEvent] | None = None,
    **options: Any,
) -> audit_chain.Verification:
    """Feed seal i with events[i] (its range as the repository reads it), then the unsealed."""
    verifier = Verifier(**options)
    for i, seal in enumerate(seals):
        verifier.seal(seal, events.get(i, []))
    return verifier.unsealed(unsealed or [])


def test_the_hashes_are_the_documented_ones() -> None:
    one, two = event("10", 5), event("9", 6, kind="settlement")
    [seal] = chain((0, 7, [one, two], T0 + timedelta(seconds=5)))
    body = {
        "kind": "attempt",
        "approval_id": "apr_1",
        "at": "2026-01-01T00:00:00Z",
        "data": {"outcome": "accepted", "detail": ""},
        "key": "10",
    }
    assert one.body() == body
    assert (
        one.sha256
        == stdlib_sha256(body)
        == hashlib.sha256(hashing.canonical_json(body)).hexdigest()
    )
    # listed by time, then kind, then key
    assert [e.key for e in seal.events] == ["10", "9"]
    listed = [
        {"kind": "attempt", "key": "10", "at": "2026-01-01T00:00:00Z", "sha256": one.sha256},
        {"kind": "settlement", "key": "9", "at": "2026-01-01T00:00:00Z", "sha256": two.sha256},
    ]
    assert seal.events_json() == listed
    assert seal.events_sha256 == stdlib_sha256(listed)
    header = {
        "seq": 1,
        "from_xid": 0,
        "to_xid": 7,
        "sealed_at": "2026-01-01T00:00:05Z",
        "count": 2,
        "events_sha256": seal.events_sha256,
        "prev_hash": "0" * 64,
    }
    assert seal.hash == stdlib_sha256(header)
    line = seal.line()
    assert (line["kind"], line["approval_id"], line["at"]) == ("seal", None, "2026-01-01T00:00:05Z")
    assert line["data"] == header | {"hash": seal.hash, "events": listed}


@pytest.mark.parametrize(
    "text",
    [
        "Zoë — «ok»",
        "emoji 🧾 and CJK 承認",
        'quote " backslash \\ tab \t nl \n',
        "\x01\x1f\x7f",
        "\u2028",
    ],
)
def test_the_recipes_json_is_rfc_8785_for_audit_lines(text: str) -> None:
    """The README checks an export with the standard library alone: for what audit lines hold
    (strings, integers, booleans, null; no floating-point numbers) its bytes are RFC 8785's."""
    value = {"b": [text, 7, None, True], "a": {"z": text, "é": -3}, "detail": text}
    ours = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert ours.encode() == hashing.canonical_json(value)


def test_times_are_written_in_utc_whatever_their_offset() -> None:
    paris = T0.astimezone(ZoneInfo("Europe/Paris"))
    assert audit_chain.json_time(paris) == "2026-01-01T00:00:00Z"
    assert audit_chain.json_time(T0 + timedelta(microseconds=120)) == "2026-01-01T00:00:00.000120Z"
    assert event("1", 3, at=paris).sha256 == event("1", 3).sha256


def test_an_intact_chain_verifies_with_its_counts_and_head() -> None:
    first, second = event("1", 3), event("2", 8, at=T0 + timedelta(seconds=6))
    seals = chain(
        (0, 5, [first], T0 + timedelta(seconds=5)), (5, 9, [second], T0 + timedelta(seconds=10))
    )
    late = event("3", 9, at=T0 + timedelta(seconds=11))
    result = verify(seals, {0: [first], 1: [second]}, [late])
    assert result.ok
    assert (result.seals, result.sealed, result.unsealed, result.head) == (
        2,
        2,
        1,
        (2, seals[1].hash),
    )
    assert result.summary() == (
        f"audit verified: 2 seals, 2 events sealed, 1 not sealed yet; head seal 2 {seals[1].hash}"
    )
    assert verify(seals, {0: [first], 1: [second]}, head=(1, seals[0].hash)).ok


def test_an_edited_event_is_named_with_both_hashes() -> None:
    original = event("1", 3)
    [seal] = chain((0, 5, [original], T0))
    edited = event("1", 3, outcome="self")
    result = verify([seal], {0: [edited]})
    [problem] = result.problems
    assert (problem.kind, problem.subject, problem.seq) == ("edited", "attempt 1", 1)
    assert str(problem) == (
        f"attempt 1 edited (seal 1): sealed as sha256 {original.sha256}, now {edited.sha256}"
    )
    assert result.summary().startswith("audit verify FAILED: attempt 1 edited (seal 1): ")


def test_deleted_and_inserted_events_are_named() -> None:
    one, two = event("1", 3), event("2", 4)
    [seal] = chain((0, 5, [one, two], T0))
    result = verify([seal], {0: [one, event("7", 4, kind="delivery")]})
    assert [(p.kind, p.subject) for p in result.problems] == [
        ("deleted", "attempt 2"),
        ("inserted", "delivery 7"),
    ]


def test_an_event_written_after_its_seal_is_named_by_its_time() -> None:
    """A row inserted later has a new transaction id and is sealed later as if new: its time,
    older than the seal before its own by more than the slack, gives it away."""
    one = event("1", 3)
    forged = event("2", 7, at=T0 - timedelta(minutes=10))
    seals = chain(
        (0, 5, [one], T0 + timedelta(seconds=5)), (5, 9, [forged], T0 + timedelta(seconds=10))
    )
    result = verify(seals, {0: [one], 1: [forged]})
    [problem] = result.problems
    assert (problem.kind, problem.subject, problem.seq) == ("inserted", "attempt 2", 2)
    assert "written after that seal" in problem.detail
    # within the slack (a transaction that ran a while): fine
    slow = event("2", 7, at=T0 + timedelta(seconds=5) - timedelta(minutes=4))
    seals = chain(
        (0, 5, [one], T0 + timedelta(seconds=5)), (5, 9, [slow], T0 + timedelta(seconds=10))
    )
    assert verify(seals, {0: [one], 1: [slow]}).ok
    assert not verify(seals, {0: [one], 1: [slow]}, slack=timedelta(minutes=1)).ok
    # not sealed yet, and already older than the last seal
    result = verify(seals[:1], {0: [one]}, [forged])
    [problem] = result.problems
    assert (problem.kind, problem.seq) == ("inserted", None)
    assert str(problem).startswith("attempt 2 inserted (after the last seal): at ")


def test_an_event_in_no_seals_range_is_named() -> None:
    one = event("1", 3)
    [seal] = chain((4, 9, [], T0))  # a chain whose seal 1 does not start at 0
    result = verify([seal], {0: [one]})
    assert [(p.kind, p.subject) for p in result.problems[:2]] == [
        ("seal", "seal 1"),  # its range does not start where the chain does
        ("inserted", "attempt 1"),
    ]


def test_seals_edited_missing_or_out_of_line_are_named() -> None:
    one, two, three = event("1", 3), event("2", 6), event("3", 8)
    seals = chain((0, 5, [one], T0), (5, 7, [two], T0), (7, 9, [three], T0))
    events = {0: [one], 1: [two], 2: [three]}
    edited = seals[1].model_copy(update={"count": 5})
    result = verify([seals[0], edited, seals[2]], events)
    assert [str(p) for p in result.problems] == [
        "seal 2: edited: its event list no longer hashes to events_sha256",
        "seal 2: edited: its fields no longer hash to its hash",
    ]
    # seal 2 rewritten consistently (its hash recomputed): seal 3's link gives it away
    rewritten = chain((0, 5, [one], T0), (5, 7, [two], T0 + timedelta(seconds=1)))[1]
    result = verify([seals[0], rewritten, seals[2]], events)
    [problem] = result.problems
    assert problem.subject == "seal 3"
    assert "prev_hash" in problem.detail
    # seal 2 deleted: named first, and its event is in no seal
    verifier = Verifier()
    verifier.seal(seals[0], [one])
    verifier.seal(seals[2], [two, three])
    result = verifier.unsealed([])
    assert str(result.problems[0]) == "seal 2: missing (deleted): the chain jumps to seal 3"
    assert ("inserted", "attempt 2") in [(p.kind, p.subject) for p in result.problems]
    # a seal whose stored list does not even read
    verifier = Verifier()
    verifier.seal(seals[0].model_copy(update={"events": ()}), [one], "its event list does not read")
    assert str(verifier.unsealed([]).problems[0]) == (
        "seal 1: edited: its event list does not read"
    )


def test_a_head_kept_elsewhere_catches_a_chain_cut_short() -> None:
    one, two = event("1", 3), event("2", 6)
    seals = chain((0, 5, [one], T0), (5, 7, [two], T0))
    result = verify(seals[:1], {0: [one]}, [two], head=(2, seals[1].hash))
    [problem] = result.problems
    assert str(problem).startswith(f"seal 2: is not the head kept elsewhere ({seals[1].hash})")


def test_numeric_keys_are_listed_in_numeric_order() -> None:
    events = [event(k, 3) for k in ("10", "9", "100")]
    [seal] = chain((0, 5, events, T0))
    assert [e.key for e in seal.events] == ["9", "10", "100"]


def test_problems_beyond_the_cap_are_counted_not_kept() -> None:
    many = [event(str(i), 3) for i in range(audit_chain.MAX_PROBLEMS + 5)]
    [seal] = chain((0, 5, many, T0))
    result = verify([seal], {0: []})  # every event deleted
    assert len(result.problems) == audit_chain.MAX_PROBLEMS
    assert result.more_problems == 5
    assert f"({audit_chain.MAX_PROBLEMS + 5} problems;" in result.summary()
