"""The audit's hash chain, the pure part: how events and seals are hashed, and verification.

No I/O: :mod:`approvals.repository` reads the rows, the sealer and ``countersign audit verify``
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
from before the chain existed); seal n + 1 starts where seal n ends. The export writes these very
objects, so the chain can be checked offline (README, "A tamper-evident audit").

What a chain kept in the same database cannot show on its own: its last seals deleted together
with their events, or the whole chain rewritten by someone who can write every table. Both change
the chain's head, which the sealer logs on every seal and verify prints: compare it with a head
kept elsewhere (``countersign audit verify --head SEQ:HASH``).
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
    "ChainEvent",
    "Problem",
    "Seal",
    "SealEntry",
    "Verification",
    "Verifier",
    "build_seal",
    "event_name",
    "json_time",
]

GENESIS = "0" * 64
"""The ``prev_hash`` of seal 1."""

DEFAULT_SLACK = timedelta(minutes=5)
"""How much older than the seal before its own an event may be, by its ``at``, and still count
as written in time (a transaction that ran a while, clocks a little apart). An event written
into the database after its range was sealed gets a new transaction id and is sealed later as
if new: its ``at``, far older than the seals around it, gives it away."""

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
    """One seal of the chain (a row of ``audit_seals``)."""

    seq: int
    from_xid: int
    to_xid: int
    sealed_at: datetime
    count: int
    events_sha256: str
    prev_hash: str
    hash: str
    events: tuple[SealEntry, ...]

    def header(self) -> dict[str, Any]:
        """The fields ``hash`` is the hash of."""
        return {
            "seq": self.seq,
            "from_xid": self.from_xid,
            "to_xid": self.to_xid,
            "sealed_at": json_time(self.sealed_at),
            "count": self.count,
            "events_sha256": self.events_sha256,
            "prev_hash": self.prev_hash,
        }

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
) -> Seal:
    """Seal ``events`` (those of the range, in any order: they are listed by time, kind, key)."""
    entries = tuple(
        e.entry() for e in sorted(events, key=lambda e: (e.at, e.kind, _key_order(e.key)))
    )
    listed = [e.as_json() for e in entries]
    header = {
        "seq": seq,
        "from_xid": from_xid,
        "to_xid": to_xid,
        "sealed_at": json_time(sealed_at),
        "count": len(entries),
        "events_sha256": _sha256(listed),
        "prev_hash": prev_hash,
    }
    return Seal(
        seq=seq,
        from_xid=from_xid,
        to_xid=to_xid,
        sealed_at=sealed_at,
        count=len(entries),
        events_sha256=header["events_sha256"],
        prev_hash=prev_hash,
        hash=_sha256(header),
        events=entries,
    )


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
    """Checks the chain seal by seal, as the repository reads it (a page at a time), then the
    events after the last seal.

    For each seal, in order: it follows the previous one (no seal number missing, its range
    starts where the previous ended, ``prev_hash`` is the previous ``hash``); its header hashes
    to ``hash`` and its list to ``events_sha256``; and the events now in its range are exactly
    the ones it lists, each still hashing to what it lists (else: ``deleted``, ``inserted``,
    ``edited``). An event whose ``at`` is older than the seal before its own by more than
    ``slack`` was written after that seal, and so was an unsealed event older than the last seal
    by more than ``slack``: both are reported ``inserted``."""

    def __init__(self, *, slack: timedelta = DEFAULT_SLACK, head: tuple[int, str] | None = None):
        self._slack = slack
        self._expected_head = head
        self._head_seen = head is None
        self._previous: Seal | None = None
        self.result = Verification()

    @property
    def covered_to(self) -> int:
        """Where the next seal's events start: the last seal's ``to_xid`` (0 before any)."""
        return self._previous.to_xid if self._previous is not None else 0

    def _problem(self, problem: Problem) -> None:
        if len(self.result.problems) < MAX_PROBLEMS:
            self.result.problems.append(problem)
        else:
            self.result.more_problems += 1

    def seal(self, seal: Seal, events: Sequence[ChainEvent], damage: str | None = None) -> None:
        """The next seal, with every event now stored from :attr:`covered_to` up to its
        ``to_xid`` (those in a gap before its ``from_xid`` are in no seal). ``damage``: why
        its stored event list could not be read (it is read as listing nothing)."""
        self._link(seal)
        if damage is not None:
            self._problem(Problem("seal", f"seal {seal.seq}", f"edited: {damage}"))
        else:
            self._integrity(seal)
        listed = {e.ref: e for e in seal.events}
        present: dict[tuple[str, str], ChainEvent] = {}
        for event in events:
            xid = event.xid or 0
            if xid < seal.from_xid:
                self._problem(
                    Problem(
                        "inserted",
                        event_name(*event.ref),
                        f"its transaction {xid} is in no seal (before seal {seal.seq}'s range "
                        f"{seal.from_xid}..{seal.to_xid})",
                        seal.seq,
                    )
                )
                continue
            present[event.ref] = event
        for entry in seal.events:
            now = present.get(entry.ref)
            name = event_name(*entry.ref)
            if now is None:
                self._problem(
                    Problem("deleted", name, f"sealed at {json_time(entry.at)}, now gone", seal.seq)
                )
            elif now.sha256 != entry.sha256:
                self._problem(
                    Problem(
                        "edited",
                        name,
                        f"sealed as sha256 {entry.sha256}, now {now.sha256}",
                        seal.seq,
                    )
                )
        for ref in present:
            if ref not in listed:
                self._problem(
                    Problem(
                        "inserted",
                        event_name(*ref),
                        f"in seal {seal.seq}'s range but not listed by it",
                        seal.seq,
                    )
                )
        previous = self._previous
        if previous is not None:
            self._late(seal.events, previous, seal.seq)
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
        if seal.from_xid != self.covered_to:
            self._problem(
                Problem(
                    "seal",
                    subject,
                    f"its range starts at {seal.from_xid}, where the chain ends at "
                    f"{self.covered_to}",
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

    def unsealed(self, events: Sequence[ChainEvent]) -> Verification:
        """The events after the last seal (written since, not sealed yet); then the result."""
        if self._previous is not None:
            self._late(events, self._previous, None)
        self.result.unsealed += len(events)
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
        return self.result
