"""The audit's hash chain, the pure part: how events and seals are hashed, and verification.

No I/O: :mod:`approvals.audit_store` reads the rows, the sealer and ``countersign audit verify``
call in here. Everything hashed is canonical JSON (RFC 8785, :func:`approvals.hashing.
canonical_json`) and every hash is SHA-256, written as 64 lowercase hex digits:

- an **event**'s ``sha256`` is the hash of its body ``{"kind", "approval_id", "at", "data",
  "key"}``: its export line without ``sha256`` and ``seal``. ``key`` is its kind's primary key
  (an attempt's, timer's, turn's or delivery's id; the approval id for ``created``,
  ``settlement``, ``execution`` and ``outcome``), so one event has one name;
- a **seal** lists its events in order as ``{"kind", "key", "at", "sha256"}`` (``events``);
  ``events_sha256`` is the hash of that list, and ``hash`` the hash of the seal's header
  ``{"seq", "from_xid", "to_xid", "sealed_at", "count", "events_sha256", "prev_hash"}``, where
  ``prev_hash`` is the previous seal's ``hash`` (:data:`GENESIS`, 64 zeros, for seal 1).

A seal covers the events written by transactions ``from_xid <= xid < to_xid`` (seal 1 also those
from before the chain existed, as if written by transaction 0); seal n + 1 starts where seal n
ends. A backlog is sealed in seals of at most :data:`SEAL_EVENTS` events, so one transaction's
events (those from before the chain are all "transaction 0") may be split between two seals: the
events are in the chain's :func:`order` (transaction id, kind, key), and a seal that ends inside a
transaction's events names in ``to_event`` (``"kind key"``) the first one it does not hold; the
next seal names it as its ``from_event``. Both fields are hashed only when present, so a seal
without them is the seal it always was. The export writes these very objects, so the chain can be
checked offline (docs/audit.md, the offline check).

What a chain kept in the same database cannot show on its own: its last seals deleted together
with their events, or the whole chain rewritten by someone who can write every table. Both change
the chain's head, which the sealer logs after every pass and verify prints: compare it with a
head kept elsewhere (``countersign audit verify --head SEQ:HASH``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import JsonValue, TypeAdapter

from approvals import hashing
from approvals.models import AuditEvent, AuditKind, Frozen

__all__ = [
    "DEFAULT_SLACK",
    "GENESIS",
    "NUMERIC_KEYS",
    "SEAL_EVENTS",
    "START",
    "ChainEvent",
    "Order",
    "Problem",
    "Seal",
    "SealBuilder",
    "SealEntry",
    "Verification",
    "Verifier",
    "boundary",
    "build_seal",
    "event_name",
    "json_time",
    "kind_range",
    "order",
    "position",
]

GENESIS = "0" * 64
"""The ``prev_hash`` of seal 1."""

DEFAULT_SLACK = timedelta(minutes=5)
"""How much older than the seal before its own an event may be, by its ``at``, and still count
as written in time (a transaction that ran a while, clocks a little apart). An event written
into the database after its range was sealed gets a new transaction id and is sealed later as
if new: its ``at``, far older than the seals around it, gives it away."""

SEAL_EVENTS = 10_000
"""The most events one seal holds. A backlog (the history from before the chain, sealed by the
first pass after the upgrade; or one left while no sealer ran) is sealed as several consecutive
seals in one pass, each read, built, hashed and written before the next is read, so the sealer's
memory follows this number, not the backlog: a 90 000-event first seal peaked at about 100 MB
RSS in 10 seals, against 340 MB in one. Much smaller would only add seals (a million-event
backlog is 100 of them at this size, each one row verify reads in well under a second); routine
seals, every few seconds, hold far fewer anyway. verify reads a page of this many events."""

NUMERIC_KEYS = frozenset({"attempt", "delivery", "edit", "grant", "passkey", "timer", "turn"})
"""The kinds whose key is a numeric id (ordered as a number); the others' is an approval id
(ordered by its characters' code points, PostgreSQL's ``COLLATE "C"``)."""

Order = tuple[int, str, int, str]
"""Where an event falls in the chain: its transaction id (0 for rows from before the chain), its
kind, and its key (a numeric key in the first slot, a text key in the second)."""

START: Order = (0, "", 0, "")
"""The start of the chain: before every event."""

_TIME: TypeAdapter[datetime] = TypeAdapter(datetime)
# keep the first problems found, count the rest: a table rewritten wholesale must not
# exhaust memory with a million reports of it
MAX_PROBLEMS = 1000


def json_time(at: datetime) -> str:
    """``at`` in UTC as the export writes it (pydantic's JSON form: ISO 8601, ``Z``)."""
    text = _TIME.dump_python(at.astimezone(UTC), mode="json")
    assert isinstance(text, str)
    return text


def _sha256(value: Any) -> str:
    return hashing.sha256_hex(hashing.canonical_json(value))


def order(xid: int, event: str | None = None) -> Order:
    """The chain's order of event ``event`` (``"kind key"``, as :func:`event_name` writes it)
    of transaction ``xid``; of the start of that transaction's events if ``event`` is None.
    Raises ``ValueError`` for an event that is not ``"kind key"`` (a numeric key for the
    kinds of :data:`NUMERIC_KEYS`)."""
    if event is None:
        return (xid, "", 0, "")
    kind, _, key = event.partition(" ")
    if not kind or not key:
        raise ValueError(f"not an event name (kind key): {event!r}")
    return position(xid, kind, key)


def position(xid: int, kind: str, key: str) -> Order:
    """The chain's order of the event ``kind`` ``key`` of transaction ``xid`` (0: from before
    the chain). Raises ``ValueError`` for a key of :data:`NUMERIC_KEYS` that is not a number."""
    if kind in NUMERIC_KEYS:
        return (xid, kind, int(key), "")
    return (xid, kind, 0, key)


def boundary(cut: Order, last: Order) -> tuple[int, str | None]:
    """Where a seal whose last event is at ``last`` ends, when the next event is at ``cut``:
    (``to_xid``, ``to_event``), with no event when the cut falls between two transactions."""
    xid, kind, number, text = cut
    if xid > last[0]:
        return xid, None
    return xid, event_name(kind, str(number) if kind in NUMERIC_KEYS else text)


_KEY_FLOOR: dict[bool, int | str] = {True: -(2**63), False: ""}  # below every key (bigint, text)


def kind_range(kind: str, lo: Order, hi: Order) -> tuple[int, int | str, int, int | str] | None:
    """The events of ``kind`` at ``lo <= order < hi`` as bounds on (transaction id, key) for
    its table: ``(xid, key) >= (from_xid, from_key) AND (xid, key) < (to_xid, to_key)``, an
    index range; None when the range holds no event of that kind."""
    start, end = _kind_bound(kind, lo), _kind_bound(kind, hi)
    if start >= end:  # keys of one kind are of one type: both ints, or both text
        return None
    return (*start, *end)


def _kind_bound(kind: str, at: Order) -> tuple[int, int | str]:
    """The least (xid, key) of an event of ``kind`` at or after ``at``."""
    xid, at_kind, number, text = at
    numeric = kind in NUMERIC_KEYS
    if at_kind == kind:
        return xid, number if numeric else text
    if at_kind < kind:  # "" (a transaction's start) too
        return xid, _KEY_FLOOR[numeric]
    return xid + 1, _KEY_FLOOR[numeric]


class ChainEvent(Frozen):
    """One audit event as the chain sees it: the export's event and its key, and the id of the
    transaction that wrote it (``None``: written before the chain existed, sealed by seal 1)."""

    kind: AuditKind
    key: str
    approval_id: str | None
    at: datetime
    data: dict[str, JsonValue]
    xid: int | None

    @property
    def ref(self) -> tuple[str, str]:
        return self.kind, self.key

    @property
    def order(self) -> Order:
        """Where it falls in the chain (:func:`order`)."""
        return position(self.xid or 0, self.kind, self.key)

    def body(self) -> dict[str, Any]:
        """What is hashed: the export line of this event without ``sha256`` and ``seal``."""
        return {
            "kind": self.kind,
            "approval_id": self.approval_id,
            "at": json_time(self.at),
            "data": self.data,
            "key": self.key,
        }

    def audit_event(self) -> AuditEvent:
        return AuditEvent(kind=self.kind, approval_id=self.approval_id, at=self.at, data=self.data)

    @property
    def sha256(self) -> str:
        return _sha256(self.body())

    def entry(self) -> SealEntry:
        return SealEntry(kind=self.kind, key=self.key, at=self.at, sha256=self.sha256)


class SealEntry(Frozen):
    """One event as its seal lists it."""

    kind: str
    key: str
    at: datetime
    sha256: str

    @property
    def ref(self) -> tuple[str, str]:
        return self.kind, self.key

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "at": json_time(self.at), "sha256": self.sha256}


class Seal(Frozen):
    """One seal of the chain (a row of ``audit_seals``). It holds the events from
    (``from_xid``, ``from_event``) on, up to but not including (``to_xid``, ``to_event``), in the
    chain's :func:`order`; an event set only where the seal starts or ends inside one
    transaction's events."""

    seq: int
    from_xid: int
    to_xid: int
    sealed_at: datetime
    count: int
    events_sha256: str
    prev_hash: str
    hash: str
    events: tuple[SealEntry, ...]
    from_event: str | None = None
    to_event: str | None = None

    @property
    def start(self) -> Order:
        return order(self.from_xid, self.from_event)

    @property
    def end(self) -> Order:
        return order(self.to_xid, self.to_event)

    def header(self) -> dict[str, Any]:
        """The fields ``hash`` is the hash of (``from_event`` and ``to_event`` when set)."""
        header = {
            "seq": self.seq,
            "from_xid": self.from_xid,
            "to_xid": self.to_xid,
            "sealed_at": json_time(self.sealed_at),
            "count": self.count,
            "events_sha256": self.events_sha256,
            "prev_hash": self.prev_hash,
        }
        if self.from_event is not None:
            header["from_event"] = self.from_event
        if self.to_event is not None:
            header["to_event"] = self.to_event
        return header

    def events_json(self) -> list[dict[str, Any]]:
        return [e.as_json() for e in self.events]

    def line(self) -> dict[str, Any]:
        """The seal's export line: an audit line of kind ``seal`` (no approval), its fields as
        its data."""
        data = self.header() | {"hash": self.hash, "events": self.events_json()}
        return {"kind": "seal", "approval_id": None, "at": data["sealed_at"], "data": data}


def build_seal(
    *,
    seq: int,
    prev_hash: str,
    from_xid: int,
    to_xid: int,
    sealed_at: datetime,
    events: Iterable[ChainEvent],
    from_event: str | None = None,
    to_event: str | None = None,
) -> Seal:
    """Seal ``events`` (those of the range, in any order: they are listed by time, kind, key)."""
    builder = SealBuilder()
    builder.add(events)
    return builder.seal(
        seq=seq,
        prev_hash=prev_hash,
        from_xid=from_xid,
        to_xid=to_xid,
        sealed_at=sealed_at,
        from_event=from_event,
        to_event=to_event,
    )


class SealBuilder:
    """:func:`build_seal` a few events at a time: :meth:`add` hashes each event and writes its
    entry's canonical JSON (nearly all of a seal's work), :meth:`seal` puts them in order and
    hashes the list. The same seal, for a caller that must not hold its thread for thousands of
    events at once (the sealer, between two turns of the event loop). After :meth:`seal`,
    :attr:`events_json` is its list of events as stored (:meth:`Seal.events_json`, not
    written a second time)."""

    def __init__(self) -> None:
        self._listed: list[tuple[SealEntry, dict[str, Any], bytes]] = []
        self.events_json: list[dict[str, Any]] = []

    def add(self, events: Iterable[ChainEvent]) -> None:
        for event in events:
            entry = event.entry()
            listed = entry.as_json()
            self._listed.append((entry, listed, hashing.canonical_json(listed)))

    def seal(
        self,
        *,
        seq: int,
        prev_hash: str,
        from_xid: int,
        to_xid: int,
        sealed_at: datetime,
        from_event: str | None = None,
        to_event: str | None = None,
    ) -> Seal:
        listed = sorted(self._listed, key=lambda p: (p[0].at, p[0].kind, _key_order(p[0].key)))
        self.events_json = [as_json for _, as_json, _ in listed]
        # RFC 8785 writes an array as its elements' canonical forms, comma-separated, in
        # brackets: the list's canonical JSON without writing the list again
        events_json = b"[" + b",".join(written for _, _, written in listed) + b"]"
        unhashed = Seal(
            seq=seq,
            from_xid=from_xid,
            to_xid=to_xid,
            sealed_at=sealed_at,
            count=len(listed),
            events_sha256=hashing.sha256_hex(events_json),
            prev_hash=prev_hash,
            hash=GENESIS,
            events=tuple(entry for entry, _, _ in listed),
            from_event=from_event,
            to_event=to_event,
        )
        return unhashed.model_copy(update={"hash": _sha256(unhashed.header())})


def _key_order(key: str) -> tuple[int, str]:
    # numeric ids in numeric order (attempt 9 before attempt 10), anything else after, by text
    return (int(key), "") if key.isdigit() else (1 << 62, key)


def event_name(kind: str, key: str) -> str:
    """How a problem names an event: ``attempt 17``, ``settlement apr_…``."""
    return f"{kind} {key}"


ProblemKind = Literal["edited", "deleted", "inserted", "seal"]


@dataclass(frozen=True)
class Problem:
    """Something that does not match: an event edited, deleted or inserted, or a seal."""

    kind: ProblemKind
    subject: str  # "attempt 17", "seal 4"
    detail: str
    seq: int | None = None  # the seal it was found in (None: after the last seal)

    def __str__(self) -> str:
        where = f"seal {self.seq}" if self.seq is not None else "after the last seal"
        if self.kind == "seal":
            return f"{self.subject}: {self.detail}"
        return f"{self.subject} {self.kind} ({where}): {self.detail}"


@dataclass
class Verification:
    """What verify found: counts, the chain's head, and the problems in the order found (the
    first is the earliest in the chain)."""

    seals: int = 0
    sealed: int = 0
    unsealed: int = 0
    head: tuple[int, str] | None = None
    problems: list[Problem] = field(default_factory=list)
    more_problems: int = 0  # beyond MAX_PROBLEMS, counted only

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        head = f"head seal {self.head[0]} {self.head[1]}" if self.head else "no seal yet"
        counts = (
            f"{self.seals} seals, {self.sealed} events sealed, {self.unsealed} not sealed yet; "
            f"{head}"
        )
        if self.ok:
            return f"audit verified: {counts}"
        total = len(self.problems) + self.more_problems
        return f"audit verify FAILED: {self.problems[0]} ({total} problems; {counts})"


class Verifier:
    """Checks the chain seal by seal, as the audit store reads it (a page of seals at a time, and
    their events a page at a time), then the events after the last seal.

    For each seal, in order: it follows the previous one (no seal number missing, its range
    starts where the previous ended, ``prev_hash`` is the previous ``hash``); its header hashes
    to ``hash`` and its list to ``events_sha256``; and the events now in its range are exactly
    the ones it lists, each still hashing to what it lists (else: ``deleted``, ``inserted``,
    ``edited``). An event whose ``at`` is older than the seals before its own by more than
    ``slack`` was written after those seals, and so was an unsealed event older than the last
    seal by more than ``slack``: both are reported ``inserted``. The seals "before its own" are
    those of the sealer's previous pass: the seals of one pass (a backlog sealed as several)
    are stamped with the same ``sealed_at`` and written together, so an event of the second
    is not late for the first.

    A seal is fed with :meth:`open`, :meth:`event` for each event in its range (any number of
    pages of them) and :meth:`close` (:meth:`seal` does all three); memory is one seal's list,
    not the chain's."""

    def __init__(self, *, slack: timedelta = DEFAULT_SLACK, head: tuple[int, str] | None = None):
        self._slack = slack
        self._expected_head = head
        self._head_seen = head is None
        self._previous: Seal | None = None
        self._before: Seal | None = None  # the last seal of the pass before the current one
        self._open: _Open | None = None
        self.result = Verification()

    @property
    def covered_to(self) -> Order:
        """Where the next seal's events start: the last seal's end (:data:`START` before
        any)."""
        return self._previous.end if self._previous is not None else START

    def _problem(self, problem: Problem) -> None:
        if len(self.result.problems) < MAX_PROBLEMS:
            self.result.problems.append(problem)
        else:
            self.result.more_problems += 1

    def seal(self, seal: Seal, events: Iterable[ChainEvent], damage: str | None = None) -> None:
        """The next seal, with every event now stored from :attr:`covered_to` up to its end
        (those in a gap before its start are in no seal). ``damage``: why its stored event list
        could not be read (it is read as listing nothing)."""
        self.open(seal, damage)
        for event in events:
            self.event(event)
        self.close()

    def open(self, seal: Seal, damage: str | None = None) -> None:
        """Start checking the next seal (see :meth:`seal`)."""
        assert self._open is None, "close the seal before opening the next"
        self._link(seal)
        if damage is not None:
            self._problem(Problem("seal", f"seal {seal.seq}", f"edited: {damage}"))
        else:
            self._integrity(seal)
        self._open = _Open(seal, {e.ref: e for e in seal.events})

    def event(self, event: ChainEvent) -> None:
        """An event now stored in the open seal's range (or in the gap before it)."""
        current = self._open
        assert current is not None, "open a seal first"
        seal = current.seal
        if event.order < seal.start:
            xid = event.xid or 0
            current.held(
                Problem(
                    "inserted",
                    event_name(*event.ref),
                    f"its transaction {xid} is in no seal (before seal {seal.seq}'s range "
                    f"{seal.from_xid}..{seal.to_xid})",
                    seal.seq,
                ),
                first=True,
            )
            return
        entry = current.listed.get(event.ref)
        if entry is None:
            current.held(
                Problem(
                    "inserted",
                    event_name(*event.ref),
                    f"in seal {seal.seq}'s range but not listed by it",
                    seal.seq,
                )
            )
            return
        current.seen.add(event.ref)
        if event.sha256 != entry.sha256:
            current.edited[event.ref] = event.sha256

    def close(self) -> None:
        """The open seal's events are all in: what it lists and is gone or changed, what is
        there and it does not list, and its events written late."""
        current = self._open
        assert current is not None, "open a seal first"
        self._open = None
        seal = current.seal
        for problem in current.before:
            self._problem(problem)
        for entry in seal.events:
            name = event_name(*entry.ref)
            if entry.ref not in current.seen:
                self._problem(
                    Problem("deleted", name, f"sealed at {json_time(entry.at)}, now gone", seal.seq)
                )
            elif (now := current.edited.get(entry.ref)) is not None:
                self._problem(
                    Problem("edited", name, f"sealed as sha256 {entry.sha256}, now {now}", seal.seq)
                )
        for problem in current.after:
            self._problem(problem)
        self.result.more_problems += current.dropped
        previous = self._previous
        if previous is not None and seal.sealed_at != previous.sealed_at:
            self._before = previous  # a new pass of the sealer: checked against the last one
        if self._before is not None:
            self._late(seal.events, self._before, seal.seq)
        self._previous = seal
        self.result.seals += 1
        self.result.sealed += len(seal.events)
        self.result.head = (seal.seq, seal.hash)
        if not self._head_seen and self._expected_head == (seal.seq, seal.hash):
            self._head_seen = True

    def _link(self, seal: Seal) -> None:
        previous = self._previous
        expected_seq = previous.seq + 1 if previous is not None else 1
        subject = f"seal {seal.seq}"
        if seal.seq != expected_seq:
            missing = (
                f"seal {expected_seq}"
                if seal.seq == expected_seq + 1
                else f"seals {expected_seq} to {seal.seq - 1}"
            )
            self._problem(
                Problem("seal", missing, f"missing (deleted): the chain jumps to {subject}")
            )
        if seal.start != self.covered_to:
            self._problem(
                Problem(
                    "seal",
                    subject,
                    f"its range starts at {_where(seal.from_xid, seal.from_event)}, where the "
                    f"chain ends at {_where(*self._covered_mark())}",
                )
            )
        prev_hash = previous.hash if previous is not None else GENESIS
        if seal.prev_hash != prev_hash:
            before = f"seal {previous.seq}" if previous is not None else "the chain's start"
            self._problem(
                Problem(
                    "seal",
                    subject,
                    f"prev_hash {seal.prev_hash} is not {before}'s hash {prev_hash} "
                    f"(a seal edited or replaced)",
                )
            )

    def _covered_mark(self) -> tuple[int, str | None]:
        previous = self._previous
        return (previous.to_xid, previous.to_event) if previous is not None else (0, None)

    def _integrity(self, seal: Seal) -> None:
        subject = f"seal {seal.seq}"
        if _sha256(seal.events_json()) != seal.events_sha256 or seal.count != len(seal.events):
            self._problem(
                Problem("seal", subject, "edited: its event list no longer hashes to events_sha256")
            )
        if _sha256(seal.header()) != seal.hash:
            self._problem(Problem("seal", subject, "edited: its fields no longer hash to its hash"))

    def _late(
        self, entries: Iterable[SealEntry | ChainEvent], before: Seal, seq: int | None
    ) -> None:
        oldest = before.sealed_at - self._slack
        for entry in entries:
            if entry.at < oldest:
                self._problem(
                    Problem(
                        "inserted",
                        event_name(entry.kind, entry.key),
                        f"at {json_time(entry.at)}, older than seal {before.seq} (sealed "
                        f"{json_time(before.sealed_at)}) by more than {self._slack}: written "
                        "after that seal",
                        seq,
                    )
                )

    def after(self, events: Iterable[ChainEvent]) -> None:
        """Events after the last seal (written since, not sealed yet), a page at a time."""
        assert self._open is None, "close the last seal first"
        events = list(events)
        if self._previous is not None:
            self._late(events, self._previous, None)
        self.result.unsealed += len(events)

    def finish(self) -> Verification:
        """Every page is in: the result (with the head kept elsewhere, if given, looked for)."""
        if not self._head_seen and self._expected_head is not None:
            seq, digest = self._expected_head
            self._problem(
                Problem(
                    "seal",
                    f"seal {seq}",
                    f"is not the head kept elsewhere ({digest}): the chain was rewritten or "
                    "cut short",
                )
            )
            self._head_seen = True  # reported once
        return self.result

    def unsealed(self, events: Sequence[ChainEvent]) -> Verification:
        """The events after the last seal (written since, not sealed yet); then the result."""
        self.after(events)
        return self.finish()


def _where(xid: int, event: str | None) -> str:
    return str(xid) if event is None else f"{xid} ({event})"


class _Open:
    """What :class:`Verifier` keeps of the seal being checked: its list by name, the listed
    events seen and those seen changed, and the problems held to report in the order a whole
    seal reports them (in a gap first; then deleted and edited, in list order; then not listed),
    at most :data:`MAX_PROBLEMS` of them, the rest counted."""

    def __init__(self, seal: Seal, listed: dict[tuple[str, str], SealEntry]) -> None:
        self.seal = seal
        self.listed = listed
        self.seen: set[tuple[str, str]] = set()
        self.edited: dict[tuple[str, str], str] = {}
        self.before: list[Problem] = []
        self.after: list[Problem] = []
        self.dropped = 0

    def held(self, problem: Problem, *, first: bool = False) -> None:
        if len(self.before) + len(self.after) >= MAX_PROBLEMS:
            self.dropped += 1
        else:
            (self.before if first else self.after).append(problem)
