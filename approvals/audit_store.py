"""The audit's hash chain in the database: sealing, verifying and exporting (migration 0017).

:class:`AuditStore` runs the audit chain's queries of ``sql/queries.sql`` through the same
:class:`~approvals.db.Database` as the :class:`~approvals.repository.Repository`, which builds it
over its own (``repository.audit``): one store per concern over one database and one pool, as
procrastinate keeps one manager per concern over one connector. The chain's rules (the order of
events, what a seal hashes, what verification checks) are pure, in :mod:`approvals.audit_chain`;
here each kind of event is read from its own table by its index, its rows become chain events
(here and nowhere else), and seals are written.

Sealing takes a lock of its own (a transaction-scoped advisory lock): intake and clicks never
wait for it; of the replicas' sealers one seals at a time and the others skip their turn.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from approvals import audit_chain, db, models

__all__ = ["AuditStore"]


class AuditStore:
    """The audit's hash chain: sealed, verified and exported over one database."""

    def __init__(self, database: db.Database) -> None:
        self._db = database

    async def seal(
        self,
        now: datetime,
        *,
        wait: bool = False,
        chunk: int = audit_chain.SEAL_EVENTS,
        on_seal: Callable[[audit_chain.Seal], None] | None = None,
    ) -> audit_chain.Seal | None:
        """Seal every audit event written by a transaction that has finished and is not sealed
        yet, stamped ``now``; returns the last seal written (the chain's new head), or ``None``
        when there was nothing to seal or another sealer is at it (``wait``: wait for it, then
        seal what is left). Off the hot path: intake and clicks take no lock of it.

        A backlog of more than ``chunk`` events is sealed as several consecutive seals of at
        most ``chunk`` events, each read, built and written before the next (memory follows
        ``chunk``, not the backlog), all in this one transaction: a pass is written whole or not
        at all, so its seals, stamped alike, are one pass for verify's lateness check.
        ``on_seal`` is called with each seal as it is written (the pass commits after the
        last)."""
        if chunk < 1:
            raise ValueError(f"a seal holds at least one event, not {chunk}")
        try:
            async with self._db.transaction() as conn:
                if not await conn.fetchval("audit_seal_lock_wait" if wait else "audit_seal_lock"):
                    return None  # another replica is sealing: its seals cover what this would
                return await _seal_pass(conn, now, chunk, on_seal)
        except _SealTaken:
            return None

    async def verify(
        self,
        *,
        slack: timedelta = audit_chain.DEFAULT_SLACK,
        head: tuple[int, str] | None = None,
        page: int = audit_chain.SEAL_EVENTS,
    ) -> audit_chain.Verification:
        """Recompute the chain from the events stored now (one snapshot): see
        :class:`~approvals.audit_chain.Verifier` for what is checked. ``head``: a seal number and
        hash kept elsewhere, which must still be in the chain.

        Bounded by ``page``, not by the chain: seals are read a few at a time (as many as list
        about ``page`` events between them, at least one), and their events and those after the
        last seal ``page`` at a time, in the chain's order."""
        verifier = audit_chain.Verifier(slack=slack, head=head)
        async with self._db.snapshot() as conn:
            after = 0
            while sizes := await conn.fetch("audit_seal_sizes", after, _SIZES_PAGE):
                taken, listed = 0, 0
                for row in sizes:
                    if taken and listed + row["count"] > page:
                        break
                    taken, listed = taken + 1, listed + row["count"]
                rows = await conn.fetch("audit_seals_after", after, taken)
                after = rows[-1]["seq"]
                seals = [_seal(r) for r in rows]
                await _verify_seals(conn, verifier, seals, page)
            lo, end = verifier.covered_to, audit_chain.order(_NO_XID)
            while lo < end:
                events, lo = await _chain_page(conn, lo, end, page)
                verifier.after(events)
        return verifier.finish()

    async def export(self, since: datetime) -> tuple[list[_Held], list[audit_chain.Seal]]:
        """Every audit event at or after ``since`` (of every kind the chain holds), oldest
        first, each with the seal that holds it (``None``: not sealed yet), and the seals that
        hold them or were sealed since (the chain from the first of those on); one snapshot.
        Each kind is read by its time's index."""
        async with self._db.snapshot() as conn:
            events = []
            for query, kind in _EXPORT_QUERIES:
                events += [_chain_event(kind, r) for r in await conn.fetch(query, since)]
            lowest = min((e.xid or 0 for e in events), default=_NO_XID)
            rows = await conn.fetch("audit_seals_for_export", lowest, since)
        seals = [seal for seal, _ in map(_seal, rows)]
        ends = [seal.end for seal in seals]
        held = []
        for event in sorted(events, key=lambda e: (e.at, e.kind, e.key)):
            at = event.order
            i = bisect.bisect_right(ends, at)
            seal = seals[i] if i < len(seals) and seals[i].start <= at else None
            held.append((event, seal))
        return held, seals


# -- sealing ------------------------------------------------------------------------------------


async def _seal_pass(
    conn: db.Connection,
    now: datetime,
    chunk: int,
    on_seal: Callable[[audit_chain.Seal], None] | None,
) -> audit_chain.Seal | None:
    """One pass of :meth:`AuditStore.seal`, holding the sealers' lock in its transaction: the
    seals from where the chain's last seal ends up to the horizon, ``chunk`` events at most
    each; the last one written (``None``: nothing to seal)."""
    last = await conn.fetchrow("audit_last_seal")
    horizon = int(await conn.fetchval("audit_seal_horizon"))
    seq, prev_hash = (last["seq"], last["hash"]) if last else (0, audit_chain.GENESIS)
    from_xid, from_event = 0, None
    if last is not None:  # the chain goes on where its last seal ends
        from_xid, from_event = int(last["to_xid"]), last["to_event"]
    end = audit_chain.order(horizon)
    head = None
    while (start := audit_chain.order(from_xid, from_event)) < end:
        rows, cut = await _chain_rows(conn, start, end, chunk)
        if not rows:
            break  # no empty seals: the next one starts here still
        to_xid, to_event = (horizon, None) if cut == end else audit_chain.boundary(cut, rows[-1][0])
        builder = await _hashed(rows)
        head = builder.seal(
            seq=seq + 1,
            prev_hash=prev_hash,
            from_xid=from_xid,
            from_event=from_event,
            to_xid=to_xid,
            to_event=to_event,
            sealed_at=now,
        )
        del rows  # this seal's events: what the pass holds is one seal's worth
        await _insert_seal(conn, head, builder.events_json)
        if on_seal is not None:
            on_seal(head)
        seq, prev_hash = head.seq, head.hash
        from_xid, from_event = to_xid, to_event
    return head


# events hashed between two turns of the event loop (a few milliseconds of work)
ENTRIES_PER_TURN = 100


async def _hashed(
    rows: list[tuple[audit_chain.Order, models.AuditKind, db.Row]],
) -> audit_chain.SealBuilder:
    """The rows' events hashed for their seal. Hashing an event is ~30 µs of Python, and a busy
    few seconds leave thousands to seal: in one go that held the event loop 100 ms and more,
    which every click, long-poll and timer in flight waited out (the growth bench's slowest
    clicks fell on the seals). So the loop gets a turn between slices. A worker thread was
    measured and was worse: holding the GIL, it made each of the loop's I/O waits cost up to
    its 5 ms switch interval."""
    builder = audit_chain.SealBuilder()
    for start in range(0, len(rows), ENTRIES_PER_TURN):
        if start:
            await asyncio.sleep(0)
        builder.add(
            _chain_event(kind, row) for _, kind, row in rows[start : start + ENTRIES_PER_TURN]
        )
    return builder


async def _insert_seal(
    conn: db.Connection, seal: audit_chain.Seal, events_json: list[dict[str, Any]]
) -> None:
    inserted = await conn.fetchval(
        "insert_audit_seal",
        seal.seq,
        seal.from_xid,
        seal.to_xid,
        seal.sealed_at,
        seal.count,
        seal.events_sha256,
        seal.prev_hash,
        seal.hash,
        events_json,
        seal.from_event,
        seal.to_event,
    )
    if inserted is None:
        raise _SealTaken  # roll back the pass: another sealer wrote this seq


# -- an event's data, as the audit has always shaped each kind --------------------------------

# The columns each kind of event says as its data, for the kinds without a shape of their own
_OTHER_COLUMNS: dict[models.AuditKind, tuple[str, ...]] = {
    "created": (
        "agent", "session_id", "request_id", "tool_name", "call_id", "arguments_sha256",
        "requester", "rule", "required_role", "policy_version", "expires_at",
    ),
    "edit": (
        "edit_no", "requested_sha256", "arguments_sha256", "patch", "edited_by", "note", "rule",
        "required_role", "required_approvals", "policy_version",
    ),
    "execution": ("claim_id",),
    "grant": ("grant_id", "event", "data"),
    "outcome": ("claim_id", "outcome", "detail"),
    "passkey": ("slack_user_id", "event", "data"),
    "turn": (
        "agent", "session_id", "request_id", "tool_name", "call_id", "verdict", "rule",
        "reason_code", "inputs_sha256", "policy_version",
    ),
}  # fmt: skip


def _other_event(
    kind: models.AuditKind, columns: tuple[str, ...], row: db.Row
) -> models.AuditEvent:
    """An event of a kind of :data:`_OTHER_COLUMNS`, its columns as its data (times as JSON writes
    them)."""
    data = {}
    for name in columns:
        value = row[name]
        data[name] = _json_time(value) if isinstance(value, datetime) else value
    if kind == "created" and row["edit_of"] is not None:
        # a call again of an approval with edits names it; absent otherwise, so that the events
        # sealed before edits existed hash as they were sealed
        data["edit_of"] = row["edit_of"]
    if kind == "created" and row["decided_by_policy"] is not None:
        data["decided_by_policy"] = row["decided_by_policy"]  # absent otherwise, as edit_of
    return models.AuditEvent(kind=kind, approval_id=row["approval_id"], at=row["at"], data=data)


def _audit_event(row: db.Row) -> models.AuditEvent:
    return models.AuditEvent(
        kind=row["kind"], approval_id=row["approval_id"], at=row["at"], data=_audit_data(row)
    )


def _audit_data(row: db.Row) -> dict[str, Any]:
    """What an audit line says about its event. The keys are in the order PostgreSQL's jsonb
    kept them when it built these objects (shorter keys first), so an export reads as before."""
    match row["kind"]:
        case "attempt":
            return {
                "name": row["name"],
                "email": row["email"],
                "action": row["action"],
                "detail": row["detail"],
                "outcome": row["outcome"],
                "slack_user_id": row["slack_user_id"],
            }
        case "settlement":
            return {
                "reason": row["reason"],
                "status": row["status"],
                "decided_by": row["decided_by"],
                "policy_version": row["policy_version"],
            }
        case "timer":
            return {
                "step": row["step"],
                "due_at": _json_time(row["due_at"]),
                "outcome": models.timer_outcome(row["timer_kind"]),
            }
    raise ValueError(f"no audit event of kind {row['kind']!r}")


def _json_time(at: datetime) -> str:
    """``at`` as PostgreSQL writes a timestamptz into JSON in a UTC session: ISO 8601 with the
    offset, the fraction of a second without trailing zeros."""
    text = at.astimezone(UTC).isoformat()
    if at.microsecond:
        seconds, offset = text[:-6], text[-6:]
        text = seconds.rstrip("0") + offset
    return text


# -- the audit chain's events: each kind's query, shaped as the export shapes it ---------------

# In the chain's order of kinds (audit_chain.order): a page read kind by kind then stops early.
_CHAIN_QUERIES: tuple[tuple[str, models.AuditKind], ...] = (
    ("audit_events_attempts", "attempt"),
    ("audit_events_created", "created"),
    ("audit_events_deliveries", "delivery"),
    ("audit_events_edits", "edit"),
    ("audit_events_claims", "execution"),
    ("audit_events_grants", "grant"),
    ("audit_events_outcomes", "outcome"),
    ("audit_events_passkeys", "passkey"),
    ("audit_events_settlements", "settlement"),
    ("audit_events_timers", "timer"),
    ("audit_events_turns", "turn"),
)
_EXPORT_QUERIES: tuple[tuple[str, models.AuditKind], ...] = tuple(
    (query.replace("audit_events_", "audit_export_"), kind) for query, kind in _CHAIN_QUERIES
)
# an audit event with the seal that holds it (None: not sealed yet)
_Held = tuple[audit_chain.ChainEvent, audit_chain.Seal | None]
_NO_XID = 2**63 - 1  # above every transaction id: "no event", for a lower bound
_SIZES_PAGE = 1000  # seal sizes read at a time by verify (a number each: small)


class _SealTaken(Exception):
    """Another sealer wrote the seal number this pass was writing (rolls the pass back)."""


async def _chain_page(
    conn: db.Connection, lo: audit_chain.Order, hi: audit_chain.Order, limit: int
) -> tuple[list[audit_chain.ChainEvent], audit_chain.Order]:
    """The first ``limit`` audit events at ``lo <= order < hi`` in the chain's order, and where
    the next page starts (``hi`` when this page holds every event up to it)."""
    rows, cut = await _chain_rows(conn, lo, hi, limit)
    return [_chain_event(kind, row) for _, kind, row in rows], cut


async def _chain_rows(
    conn: db.Connection, lo: audit_chain.Order, hi: audit_chain.Order, limit: int
) -> tuple[list[tuple[audit_chain.Order, models.AuditKind, db.Row]], audit_chain.Order]:
    """:func:`_chain_page`'s rows, each with its order and kind, not yet chain events.

    Each kind's table is read in index order, ``limit`` + 1 rows at most, each bounded by what
    the kinds before it filled: what is kept is always every event of the kinds read so far
    below ``cut``, at most ``limit`` of them, so a page holds at most twice ``limit`` rows."""
    kept: list[tuple[audit_chain.Order, models.AuditKind, db.Row]] = []
    cut = hi
    for query, kind in _CHAIN_QUERIES:
        bounds = audit_chain.kind_range(kind, lo, cut)
        if bounds is None:
            continue
        rows = await conn.fetch(query, *bounds, limit + 1)
        if not rows:
            continue
        found = [(_row_order(kind, r), kind, r) for r in rows]
        if len(found) > limit:  # more of this kind after these: the page ends before them
            cut = found[limit][0]
            del found[limit:]
        merged = sorted([k for k in kept if k[0] < cut] + found, key=lambda k: k[0])
        if len(merged) > limit:
            cut = merged[limit][0]
            del merged[limit:]
        kept = merged
    return kept, cut


def _row_order(kind: models.AuditKind, row: db.Row) -> audit_chain.Order:
    xid = row["xid"]
    return audit_chain.position(0 if xid is None else int(xid), kind, row["key"])


async def _verify_seals(
    conn: db.Connection,
    verifier: audit_chain.Verifier,
    seals: list[tuple[audit_chain.Seal, str | None]],
    page: int,
) -> None:
    """Feed ``seals`` (consecutive, in order) to ``verifier`` with the events of their ranges,
    read ``page`` at a time from where the chain checked so far ends."""
    lo = verifier.covered_to
    hi = max(seal.end for seal, _ in seals)
    i = 0
    verifier.open(*seals[0])
    while lo < hi:
        events, lo = await _chain_page(conn, lo, hi, page)
        for event in events:
            at = event.order
            while i + 1 < len(seals) and at >= seals[i][0].end:
                verifier.close()
                i += 1
                verifier.open(*seals[i])
            verifier.event(event)
    while True:  # the seals after the last event, if any
        verifier.close()
        i += 1
        if i == len(seals):
            return
        verifier.open(*seals[i])


def _chain_event(kind: models.AuditKind, row: db.Row) -> audit_chain.ChainEvent:
    event = _chain_data(kind, row)
    xid = row["xid"]
    return audit_chain.ChainEvent(
        kind=kind,
        key=row["key"],
        approval_id=event.approval_id,
        at=event.at,
        data=event.data,
        xid=None if xid is None else int(xid),
    )


class _Kinded:
    """A row of one kind's query, read as a row that names its kind (:func:`_audit_event`)."""

    def __init__(self, kind: str, row: db.Row) -> None:
        self._kind = kind
        self._row = row

    def __getitem__(self, column: str) -> Any:
        return self._kind if column == "kind" else self._row[column]


def _chain_data(kind: models.AuditKind, row: db.Row) -> models.AuditEvent:
    """The event as the export has always shaped its kind (a delivery: what was delivered, and
    in how many attempts)."""
    match kind:
        case "attempt" | "settlement" | "timer":
            return _audit_event(_Kinded(kind, row))
        case "delivery":
            data: dict[str, Any] = {"delivered": row["delivered"], "attempts": row["attempts"]}
            return models.AuditEvent(
                kind=kind, approval_id=row["approval_id"], at=row["at"], data=data
            )
    return _other_event(kind, _OTHER_COLUMNS[kind], row)


def _seal(row: db.Row) -> tuple[audit_chain.Seal, str | None]:
    """A row of ``audit_seals``, and what is wrong with it if it does not read: its event list
    (then the seal is read with none: every event of its range shows as not listed), or where
    its range starts or ends inside a transaction (then it is read as at that transaction's
    start: its hash no longer matches)."""
    fields = {
        "seq": row["seq"],
        "from_xid": int(row["from_xid"]),
        "to_xid": int(row["to_xid"]),
        "sealed_at": row["sealed_at"],
        "count": row["count"],
        "events_sha256": row["events_sha256"],
        "prev_hash": row["prev_hash"],
        "hash": row["hash"],
    }
    damage = None
    for name in ("from_event", "to_event"):
        event = fields[name] = row[name]
        try:
            audit_chain.order(0, event)
        except ValueError as exc:
            fields[name], damage = None, f"its {name} does not read: {exc}"
    try:
        entries = tuple(audit_chain.SealEntry.model_validate(e) for e in row["events"])
    except (TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        return audit_chain.Seal(**fields, events=()), f"its event list does not read: {exc}"
    return audit_chain.Seal(**fields, events=entries), damage
