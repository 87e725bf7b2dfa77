"""The audit chain's pure part: the hashes are exactly what the offline recipe (docs/audit.md)
recomputes with the standard library, and verification names each kind of mismatch."""

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
    """The offline recipe's hash: json.dumps sorted and compact, UTF-8."""
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


def test_a_seal_built_a_few_events_at_a_time_is_the_seal_built_at_once() -> None:
    """The sealer hashes a seal's events in slices (a turn of the event loop between them):
    whatever the slices, the seal is :func:`build_seal`'s, and its events' hash is that of
    their list written whole (RFC 8785)."""
    events = [
        event(str(n), 5, T0 + timedelta(seconds=n % 3), kind=kind, note='é\u2028"')
        for n in range(12)
        for kind in ("attempt", "settlement")
    ]
    whole = audit_chain.build_seal(
        seq=1, prev_hash="0" * 64, from_xid=0, to_xid=7, sealed_at=T0, events=events
    )
    builder = audit_chain.SealBuilder()
    for start in range(0, len(events), 5):
        builder.add(reversed(events[start : start + 5]))
    sliced = builder.seal(seq=1, prev_hash="0" * 64, from_xid=0, to_xid=7, sealed_at=T0)
    assert sliced == whole
    assert sliced.events_sha256 == stdlib_sha256(sliced.events_json())
    assert [e.key for e in sliced.events[:3]] == ["0", "3", "6"]  # by time, kind, number


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
    """The offline recipe (docs/audit.md) checks an export with the standard library alone: for
    what audit lines hold (strings, integers, booleans, null; no floating-point numbers) its
    bytes are RFC 8785's."""
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


# -- the chain's order, and seals that start or end inside a transaction's events ---------------


def test_the_chain_order_is_transaction_then_kind_then_key() -> None:
    order = audit_chain.order
    places = [
        audit_chain.START,
        order(0, "created apr_b"),
        order(5),  # transaction 5's start: before its events
        order(5, "attempt 9"),
        order(5, "attempt 10"),  # numeric keys as numbers
        order(5, "created apr_A"),  # text keys by code point (C collation)
        order(5, "created apr_a"),
        order(5, "turn 1"),
        order(6),
    ]
    assert sorted(places) == places
    assert event("10", 5).order == order(5, "attempt 10")
    assert event("apr_a", None, kind="created").order == order(0, "created apr_a")
    for bad in ("attempt", "attempt x", " 1", "attempt "):
        with pytest.raises(ValueError, match=r"not an event name|invalid literal for int"):
            order(5, bad)


def test_a_range_of_the_chain_as_bounds_on_each_kinds_index() -> None:
    order, kind_range, floor = audit_chain.order, audit_chain.kind_range, -(2**63)
    # from inside transaction 5's attempts to transaction 9's start
    lo, hi = order(5, "attempt 9"), order(9)
    assert kind_range("attempt", lo, hi) == (5, 9, 9, floor)
    assert kind_range("created", lo, hi) == (5, "", 9, "")  # all of 5's, all of 6 to 8's
    # up to inside transaction 9's created events: all its attempts, some created, no turn
    hi = order(9, "created apr_m")
    assert kind_range("attempt", lo, hi) == (5, 9, 10, floor)
    assert kind_range("created", lo, hi) == (5, "", 9, "apr_m")
    assert kind_range("turn", lo, hi) == (5, floor, 9, floor)
    # inside one transaction, between two kinds: the kinds after the cut have nothing there
    lo, hi = order(5, "created apr_x"), order(5, "settlement apr_y")
    assert kind_range("turn", lo, hi) is None
    assert kind_range("attempt", lo, hi) is None
    assert kind_range("outcome", lo, hi) == (5, "", 6, "")  # all of 5's, between the two


def test_where_a_seal_ends_when_the_next_event_is_cut_off() -> None:
    order = audit_chain.order
    # between two transactions: no event named
    assert audit_chain.boundary(order(7, "attempt 3"), order(5, "turn 1")) == (7, None)
    # inside one: the first event the seal does not hold
    assert audit_chain.boundary(order(5, "created apr_x"), order(5, "attempt 2")) == (
        5,
        "created apr_x",
    )
    assert audit_chain.boundary(order(5, "turn 12"), order(5, "turn 11")) == (5, "turn 12")


def split(events: list[ChainEvent], cut: int, cut_event: str, sealed: list[datetime]) -> list[Seal]:
    """Two seals over ``events`` (transactions up to 8), the first ending at ``cut_event`` of
    transaction ``cut``."""
    first = build_seal(
        seq=1,
        prev_hash=audit_chain.GENESIS,
        from_xid=0,
        to_xid=cut,
        to_event=cut_event,
        sealed_at=sealed[0],
        events=[e for e in events if e.order < audit_chain.order(cut, cut_event)],
    )
    second = build_seal(
        seq=2,
        prev_hash=first.hash,
        from_xid=cut,
        from_event=cut_event,
        to_xid=9,
        sealed_at=sealed[1],
        events=[e for e in events if e.order >= audit_chain.order(cut, cut_event)],
    )
    return [first, second]


def test_a_transaction_split_between_two_seals_verifies() -> None:
    """The events of transaction 3 (two attempts, an approval created) sealed as two seals cut
    between the attempts: each seal's header hashes its cut (the offline recipe's way), verify
    checks each event against the seal whose range holds it."""
    a1, a2 = event("1", 3), event("2", 3)
    created = event("apr_1", 3, kind="created")
    later = event("5", 6, kind="turn")
    events = [a1, a2, created, later]
    seals = split(events, 3, "attempt 2", [T0, T0])
    assert (seals[0].count, seals[1].count) == (1, 3)
    assert seals[0].header()["to_event"] == "attempt 2"
    assert "from_event" not in seals[0].header()
    assert seals[1].header()["from_event"] == "attempt 2"
    for seal in seals:
        assert seal.hash == stdlib_sha256(seal.header())
        line = seal.line()["data"]
        fields = {k: v for k, v in line.items() if k not in ("hash", "events")}
        assert stdlib_sha256(fields) == seal.hash  # what the offline recipe recomputes
    by_seal = {0: [a1], 1: [a2, created, later]}
    result = verify(seals, by_seal)
    assert result.ok, result.problems
    assert (result.seals, result.sealed) == (2, 4)
    # the second attempt shown in the first seal's range (a cut moved): both seals say so
    result = verify(seals, {0: [a1, a2], 1: [created, later]})
    assert [(p.kind, p.subject, p.seq) for p in result.problems] == [
        ("inserted", "attempt 2", 1),
        ("deleted", "attempt 2", 2),
    ]
    # a seal whose start is not where the one before ends
    moved = split(events, 3, "attempt 2", [T0, T0])[1].model_copy(
        update={"from_event": "attempt 1"}
    )
    result = verify([seals[0], moved], by_seal)
    assert str(result.problems[0]) == (
        "seal 2: its range starts at 3 (attempt 1), where the chain ends at 3 (attempt 2)"
    )


def test_the_seals_of_one_pass_are_not_late_for_each_other() -> None:
    """A backlog sealed in one pass: its seals share their time, and the old events of the
    second are not "written after" the first. A seal of a later pass still is checked against
    the pass before it."""
    old = [event(str(i), 3, at=T0 - timedelta(days=30)) for i in (1, 2, 3)]
    one_pass = split(old, 3, "attempt 2", [T0, T0])
    assert verify(one_pass, {0: old[:1], 1: old[1:]}).ok
    two_passes = split(old, 3, "attempt 2", [T0, T0 + timedelta(seconds=5)])
    result = verify(two_passes, {0: old[:1], 1: old[1:]})
    assert [(p.kind, p.subject, p.seq) for p in result.problems] == [
        ("inserted", "attempt 2", 2),
        ("inserted", "attempt 3", 2),
    ]
    # a third seal, a pass later, whose event is older than the one-pass seals
    forged = event("9", 10, at=T0 - timedelta(hours=1))
    third = build_seal(
        seq=3,
        prev_hash=one_pass[1].hash,
        from_xid=9,
        to_xid=12,
        sealed_at=T0 + timedelta(seconds=5),
        events=[forged],
    )
    result = verify([*one_pass, third], {0: old[:1], 1: old[1:], 2: [forged]})
    [problem] = result.problems
    assert (problem.kind, problem.subject, problem.seq) == ("inserted", "attempt 9", 3)


def test_a_seal_fed_a_page_at_a_time_reports_as_a_whole() -> None:
    """verify reads a seal's events in pages: fed one at a time, the problems are those of the
    whole seal, in the same order (in a gap; deleted and edited in list order; not listed)."""
    one, two, three = event("1", 5), event("2", 5), event("3", 6)
    [seal] = chain((4, 9, [one, two, three], T0))
    stored = [event("0", 3), event("7", 5), event("2", 5, outcome="self"), three]
    whole = Verifier()
    whole.seal(seal, stored)
    paged = Verifier()
    paged.open(seal)
    for e in stored:
        paged.event(e)
    paged.close()
    assert whole.unsealed([]).problems == paged.unsealed([]).problems
    assert [(p.kind, p.subject) for p in paged.result.problems] == [
        ("seal", "seal 1"),  # starts at 4, not 0
        ("inserted", "attempt 0"),  # in no seal's range
        ("deleted", "attempt 1"),
        ("edited", "attempt 2"),
        ("inserted", "attempt 7"),
    ]
