"""The repository: everything the core needs from persistence but the audit chain, over the
named queries.

Each method runs queries of ``sql/queries.sql`` through a :class:`~approvals.db.Database`
(:mod:`approvals.pg_db`: PostgreSQL) and is the one place where rows become models. The queries
only pick rows: an approval comes with its settlement, its latest callback and latest card post
(``LEFT JOIN LATERAL … ORDER BY id DESC LIMIT 1``) and its earliest fired escalation (``min()``,
read as ``escalated_at``). What those rows mean is derived here, once: the delivery status and
the card state, who decided, "a settled approval's timers lapse". Its contract tests are
``tests/integration/test_store_contract.py``.

NOTIFY tells other processes that something changed (``countersign_outbox`` wakes relays,
``countersign_settled`` wakes long-polls); it is sent inside the transaction, so it is delivered
only on commit. Callers poll as a backstop, so a lost notification only costs latency.

The audit chain (sealing, verifying, exporting) has a store of its own,
:class:`~approvals.audit_store.AuditStore`: :attr:`Repository.audit` is that store over this
repository's database (one pool, closed with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Self

import pydantic

from approvals import audit_store, db, errors, hashing, metrics, models, passkey_store, states
from approvals.coalesce import Coalescer

__all__ = ["OUTBOX_CHANNEL", "SETTLED_CHANNEL", "TIMERS_CHANNEL", "Repository"]

log = logging.getLogger(__name__)

OUTBOX_CHANNEL = "countersign_outbox"
SETTLED_CHANNEL = "countersign_settled"
# payload: the ISO time a new approval first needs the timer loop (its expiry or first timer)
TIMERS_CHANNEL = "countersign_timers"


class _RepeatedRequest(Exception):
    """Rolls back a grant's use whose approval was not created: its request ids exist."""


class _NoUseLeft(Exception):
    """Rolls back the approval a grant's use created: the grant had no use left by then."""


@dataclass(eq=False)
class _SettleWaiter:
    """A long-poll waiting on one approval: woken by its settlement's notification, or by
    this process settling it, which then gives it the approval as settled."""

    woken: asyncio.Event = field(default_factory=asyncio.Event)
    settled: models.Approval | None = None


@dataclass(frozen=True)
class _Settlement:
    """One settlement without a grant (or a quorum vote), as ``settle_one`` writes it:
    ``leases`` has, for each ``outbox`` row, the lease it is written claimed with, or None."""

    settled: models.Approval
    votes: list[dict[str, Any]]
    votes_before: tuple[str, ...]
    attempts: tuple[models.Attempt, ...]
    outbox: tuple[models.OutboxEntry, ...]
    leases: tuple[datetime | None, ...]
    now: datetime


class _TryAlone:
    """A settlement a batch did not move: its own ``settle_one`` decides (see _settle_batch)."""


TRY_ALONE = _TryAlone()


@dataclass(frozen=True)
class _CallbackTaker:
    """A relay of this process that takes the callbacks of the clicks settled here."""

    take: Callable[[list[models.OutboxItem]], None]
    lease: timedelta


class Repository:
    """The approvals, their attempts, outbox, timers and turn verdicts, over one database;
    :attr:`audit`, the audit chain's store, and :attr:`passkeys`, step-up's, over the same
    one."""

    def __init__(self, database: db.Database) -> None:
        self._db = database
        self.audit = audit_store.AuditStore(database)  # its sealing, verifying, exporting
        self.passkeys = passkey_store.PasskeyStore(database)  # step-up's links and passkeys
        self._listening = False
        self._outbox_event = asyncio.Event()
        # outbox notifications heard so far: a relay whose claim came back short claims again
        # only once this moved (new rows may exist), not after each delivery
        self.outbox_notices = 0
        # the timer loop's wake-up: set by a notification of work due before it planned to wake
        self._timers_event = asyncio.Event()
        self._timers_wake_at: datetime | None = None
        self._settle_waiters: defaultdict[str, set[_SettleWaiter]] = defaultdict(set)
        # approvals statements of this process are settling now (how many statements), and
        # those of them whose settlement was heard meanwhile
        self._settling_here: dict[str, int] = {}
        self._heard_while_settling: set[str] = set()
        self._settle_listeners: list[Callable[[str], None]] = []
        self._callback_taker: _CallbackTaker | None = None  # see take_callbacks
        # concurrent single-row reads and deliveries recorded, each group in one statement
        self._approvals_read = Coalescer(self._read_approvals)
        self._creations = Coalescer(self._create_approvals)
        self._deliveries_recorded = Coalescer(self._record_deliveries)
        self._cards_set = Coalescer(self._set_cards)
        self._settlements = Coalescer(self._settle_batch)

    @classmethod
    async def connect(
        cls, dsn: str, *, min_size: int = 2, max_size: int = 10, listen: bool = True
    ) -> Self:
        """Over PostgreSQL at ``dsn``; ``listen=False`` for one-shot commands that never wait."""
        from approvals import pg_db  # here, not above: only this path needs asyncpg

        database = await pg_db.PostgresDatabase.connect(
            dsn, min_size=min_size, max_size=max_size, listen=listen
        )
        repository = cls(database)
        await repository._listen()  # now: no notification sent after connect is missed
        return repository

    async def _listen(self) -> None:
        """Subscribe to the notifications, once: :meth:`connect` does it at once, a repository
        built over a database directly on its first wait."""
        if self._listening:
            return
        self._listening = True
        await self._db.listen(OUTBOX_CHANNEL, self._on_outbox)
        await self._db.listen(SETTLED_CHANNEL, self._on_settled)
        await self._db.listen(TIMERS_CHANNEL, self._on_timers)

    def _on_outbox(self, _payload: str) -> None:
        self.outbox_notices += 1
        self._outbox_event.set()

    @property
    def hears_outbox(self) -> bool:
        """Whether outbox notifications reach :attr:`outbox_notices` (listening began)."""
        return self._listening

    def _on_timers(self, payload: str) -> None:
        try:
            due = datetime.fromisoformat(payload)
        except ValueError:  # not ours, or a reconnect's wake-up (empty): look again anyway
            due = None
        wake_at = self._timers_wake_at
        if due is None or wake_at is None or due < wake_at:
            self._timers_event.set()

    def _on_settled(self, approval_id: str) -> None:
        if approval_id in self._settling_here:
            # settled by a statement of this process whose answer is on its way: that answer
            # wakes the long-polls here, with the approval (see _settled_here)
            self._heard_while_settling.add(approval_id)
        else:
            self._wake(approval_id, None)
        for listener in self._settle_listeners:
            listener(approval_id)

    async def _settled_here(self, one: _Settlement, claimed: list[int]) -> None:
        """A statement of this process wrote ``one`` (as soon as its answer comes, before its
        callers resume): when it settles, the long-polls here are answered with the approval
        as written, with no read; the rows it wrote claimed (``claimed``, their ids) go to the
        relay of this process."""
        approval_id = one.settled.approval_id
        if one.settled.settled and approval_id in self._settle_waiters:  # most clicks have none
            self._wake(approval_id, states.as_written(one.settled, one.outbox))
        await self._hand_over_claimed(one, claimed)

    def _not_settling_here(self, approval_id: str, *, answered: bool) -> None:
        """A statement of this process that was settling ``approval_id`` is done. Once no
        other such statement is out, a notification heard meanwhile wakes the long-polls here
        to read, unless this statement settled it (``answered``: they were answered with it;
        the notification was its own)."""
        left = self._settling_here[approval_id] - 1
        if left:
            self._settling_here[approval_id] = left
            return
        del self._settling_here[approval_id]
        if approval_id in self._heard_while_settling:
            self._heard_while_settling.discard(approval_id)
            if not answered:
                self._wake(approval_id, None)

    def _wake(self, approval_id: str, settled: models.Approval | None) -> None:
        """Wake the long-polls waiting here on ``approval_id``: with the approval when a click
        of this process settled it (``settled``, as written: no read), else to read it."""
        for waiter in self._settle_waiters.get(approval_id, ()):
            if settled is not None:  # a notification heard after it takes nothing away
                waiter.settled = settled
            waiter.woken.set()

    def take_callbacks(
        self, take: Callable[[list[models.OutboxItem]], None], lease: timedelta
    ) -> Callable[[], None]:
        """From now until what this returns is called, a click that settles through this
        repository writes its agent's callback already claimed, leased for ``lease`` (as
        :meth:`claim_callbacks` would lease it), and hands it to ``take`` once committed: the
        relay of this process delivers it at once, with no notification to wait for nor claim
        to make. (A process that dies first leaves the row leased: once the lease lapses, any
        relay's scan takes it, as it takes any row.) One taker at a time."""
        if self._callback_taker is not None:
            raise RuntimeError("callbacks are taken by another relay of this process already")
        taker = _CallbackTaker(take, lease)
        self._callback_taker = taker

        def stop() -> None:
            if self._callback_taker is taker:
                self._callback_taker = None

        return stop

    def on_settled(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener`` with the id of each approval that settles (in any process: the
        notification that wakes long-polls), from the event loop, so it must not block; returns
        what stops it."""
        self._settle_listeners.append(listener)
        return lambda: self._settle_listeners.remove(listener)

    async def close(self) -> None:
        await self._db.close()

    # -- approvals ----------------------------------------------------------------------------

    async def create_approval(
        self,
        approval: models.Approval,
        outbox: Sequence[models.OutboxEntry],
        timers: Sequence[models.TimerEntry] = (),
    ) -> tuple[models.Approval, bool]:
        """Insert ``approval``, its outbox rows and its timers in one statement (one round
        trip, atomic), committed together with the submissions made at the same time (group
        commit: see :meth:`_create_approvals`); durable when this returns.

        Idempotent on (agent, session_id, request_id): when those ids exist already, nothing is
        written and the stored approval comes back with ``False``.
        """
        a = approval
        inserted = await self._creations((a, tuple(outbox), tuple(timers)))
        if isinstance(inserted, Exception):  # refused alone: this submission's own error
            raise inserted
        if inserted:
            # exactly what was inserted: no card, no settlement, no delivery yet
            return a, True
        existing_id = await self._db.fetchval(
            "approval_id_by_request", a.agent, a.session_id, a.request_id
        )
        if existing_id is None:  # impossible: the conflict that wrote nothing was on these ids
            raise RuntimeError(f"no approval inserted nor found for request {a.request_id!r}")
        stored = await self.get_approval(existing_id)
        assert stored is not None
        return stored, False

    async def _create_approvals(self, batch: list[_Creation]) -> list[bool | Exception]:
        """Group commit: the submissions that arrived together, in one atomic pipeline (one
        round trip, one commit), then which of them inserted (the others repeated stored
        ids). When the batch is refused, each goes again alone, so that only the one at fault
        gets its error."""
        if len(batch) == 1:
            return [await self._create_alone(batch[0])]
        try:
            await self._db.executemany("create_approval", [_creation_values(c) for c in batch])
        except errors.DatabaseUnavailable:
            raise
        except Exception:
            return [await self._create_alone(c) for c in batch]
        ids = [c[0].approval_id for c in batch]
        found = {r["approval_id"] for r in await self._db.fetch("approvals_among", ids)}
        return [i in found for i in ids]

    async def _create_alone(self, creation: _Creation) -> bool | Exception:
        try:
            inserted = await self._db.fetchval("create_approval", *_creation_values(creation))
        except errors.DatabaseUnavailable:
            raise
        except Exception as exc:  # a constraint refused it: its caller raises it
            return exc
        return inserted is not None

    async def get_approval(self, approval_id: str) -> models.Approval | None:
        return await self._approvals_read(approval_id)

    async def _read_approvals(self, ids: list[str]) -> list[models.Approval | None]:
        rows = await self._db.fetch("get_approvals", ids)
        found = {r["approval_id"]: _approval(r) for r in rows}
        return [found.get(i) for i in ids]

    async def get_approvals(self, ids: Sequence[str]) -> list[models.Approval]:
        """The approvals of ``ids`` that exist, in that order, in one query (not one per id)."""
        rows = await self._db.fetch("get_approvals", list(ids))
        found = {r["approval_id"]: _approval(r) for r in rows}
        return [found[i] for i in ids if i in found]

    async def settle(
        self,
        settled: models.Approval,
        attempt: models.Attempt | None,
        outbox: Sequence[models.OutboxEntry],
        *,
        votes_before: Sequence[str] = (),
        dropped: Sequence[models.Attempt] = (),
        grant: models.Grant | None = None,
    ) -> bool:
        """Compare-and-set from pending with exactly the quorum votes ``votes_before`` (the
        voters' Slack ids, in order) to ``settled`` (a settled status with its settlement row,
        or still pending with its new votes), with the attempt, the attempts of votes
        ``dropped`` at settlement, the outbox rows and the ``grant`` its approval makes, in one
        transaction. ``False`` (and nothing written) when the approval had moved on: somebody
        else settled it or voted."""
        votes = [d.model_dump(mode="json") for d in settled.decided_by]
        if grant is None:
            return await self._settle_in_one(settled, attempt, outbox, votes, votes_before, dropped)
        async with self._db.transaction() as conn:
            moved = await conn.fetchval(
                "settle_if_pending",
                settled.approval_id,
                settled.status.value,
                votes,
                list(votes_before),
                settled.edit_no,
            )
            if moved is None:
                return False
            now = settled.decided_at or (attempt.at if attempt else None)
            assert now is not None, "a quorum vote always comes with its attempt"
            if settled.settled:
                await _insert_settlement(conn, settled, votes)
            for gone in dropped:
                await conn.execute("insert_attempt", *_attempt_values(gone))
            if attempt is not None:
                await conn.execute("insert_attempt", *_attempt_values(attempt))
            if grant is not None:
                await _insert_grant(conn, grant)
            await _insert_outbox(conn, outbox, now)
            if settled.settled:
                await conn.notify(SETTLED_CHANNEL, settled.approval_id)
        return True

    async def _settle_in_one(
        self,
        settled: models.Approval,
        attempt: models.Attempt | None,
        outbox: Sequence[models.OutboxEntry],
        votes: list[dict[str, Any]],
        votes_before: Sequence[str],
        dropped: Sequence[models.Attempt],
    ) -> bool:
        """:meth:`settle` without a grant, in one statement: a click holds a connection for
        one round trip, not the six of a transaction; and the clicks settling at the same time
        go in one statement together (group commit, see :meth:`_settle_batch`), so a burst of
        clicks does not queue for the pool."""
        now = settled.decided_at or (attempt.at if attempt else None)
        assert now is not None, "a quorum vote always comes with its attempt"
        attempts = (*dropped, *([attempt] if attempt is not None else []))
        assert all(a.approval_id == settled.approval_id for a in attempts)
        assert all(e.approval_id == settled.approval_id for e in outbox)
        taker = self._callback_taker
        leases = tuple(
            now + taker.lease
            if taker is not None
            and settled.settled
            and e.kind is models.OutboxKind.CALLBACK
            and (e.due_at is None or e.due_at <= now)
            else None
            for e in outbox
        )
        settlement = _Settlement(
            settled, votes, tuple(votes_before), attempts, tuple(outbox), leases, now
        )
        approval_id = settled.approval_id
        self._settling_here[approval_id] = self._settling_here.get(approval_id, 0) + 1
        moved = False
        try:
            outcome = await self._settlements(settlement)
            if outcome is TRY_ALONE:
                outcome = await self._settle_alone(settlement)
            moved = outcome is True
        finally:
            self._not_settling_here(approval_id, answered=moved and settled.settled)
        return moved

    async def _settle_batch(self, batch: list[_Settlement]) -> list[bool | _TryAlone]:
        """Group commit of :meth:`_settle_in_one`: the settlements that arrived together, each
        approval's first, in one ``settle_batch`` statement; which of them moved. What did not
        move there (a row another transaction held, a compare-and-set lost, a second
        settlement of the same approval, a batch refused) is tried alone by its caller, where
        ``settle_one`` waits its turn and decides, so each gets the answer and the error it
        would have got alone."""
        if len(batch) == 1:
            return [await self._settle_alone(batch[0])]
        firsts: dict[str, _Settlement] = {}
        for one in batch:
            firsts.setdefault(one.settled.approval_id, one)
        try:
            rows = await self._db.fetch("settle_batch", *_batch_values(list(firsts.values())))
        except errors.DatabaseUnavailable:
            raise
        except Exception:
            return [TRY_ALONE for _ in batch]
        claimed = {r["approval_id"]: list(r["claimed"]) for r in rows}
        outcomes: list[bool | _TryAlone] = []
        for one in batch:
            approval_id = one.settled.approval_id
            if firsts.get(approval_id) is one and approval_id in claimed:
                await self._settled_here(one, claimed[approval_id])
                outcomes.append(True)
            else:
                outcomes.append(TRY_ALONE)
        return outcomes

    async def _settle_alone(self, one: _Settlement) -> bool:
        """One settlement in its own ``settle_one`` statement; whether it moved."""
        settled, attempts, outbox = one.settled, one.attempts, one.outbox
        moved = await self._db.fetchrow(
            "settle_one",
            settled.approval_id,
            settled.status.value,
            one.votes,
            list(one.votes_before),
            settled.edit_no,
            settled.settled,
            settled.reason,
            settled.decided_at,
            settled.policy_version,
            [a.slack_user_id for a in attempts],
            [a.email for a in attempts],
            [a.name for a in attempts],
            [a.action for a in attempts],
            [a.outcome.value for a in attempts],
            [a.detail for a in attempts],
            [a.at for a in attempts],
            [e.kind.value for e in outbox],
            [json.dumps(models.work_payload(e.work)) for e in outbox],
            [e.due_at or one.now for e in outbox],
            OUTBOX_CHANNEL,
            SETTLED_CHANNEL,
            list(one.leases),
        )
        if moved is None:
            return False
        await self._settled_here(one, list(moved["claimed"]))
        return True

    async def _hand_over_claimed(self, one: _Settlement, ids: list[int]) -> None:
        """The rows ``one`` wrote claimed, ``ids`` (in the order written: one sequence, one
        statement), to the relay that asked for them."""
        written_claimed = [e for e, lease in zip(one.outbox, one.leases, strict=True) if lease]
        if not written_claimed:
            return
        items = [
            models.OutboxItem(
                id=row_id,
                approval_id=e.approval_id,
                work=e.work,
                attempts=0,
                claims=1,
                claim_no=1,
                created_at=e.due_at or one.now,
            )
            for row_id, e in zip(ids, written_claimed, strict=True)
        ]
        await self._hand_over(items)

    async def _hand_over(self, items: list[models.OutboxItem]) -> None:
        """Give rows written claimed to the relay that asked for them; one that stopped taking
        meanwhile has them handed back at once rather than when their lease lapses. Never
        raises: the settlement stands, committed (a row not handed back waits out its lease)."""
        taker = self._callback_taker
        if taker is not None:
            taker.take(items)
            return
        for item in items:
            try:
                await self.outbox_unclaim(item)
            except Exception as exc:
                extra = {"action": "outbox", "id": item.id, "error": str(exc)}
                log.warning("callback not handed back: due when its lease lapses", extra=extra)

    async def edit(
        self,
        edited: models.Approval,
        attempt: models.Attempt,
        outbox: Sequence[models.OutboxEntry],
        *,
        votes_before: Sequence[str],
        dropped: Sequence[models.Attempt] = (),
    ) -> bool:
        """Compare-and-set as :meth:`settle`, from the version before ``edited.edit`` (its
        ``number`` less one) with exactly the voters ``votes_before``, to that edit with its
        routing, its votes and status (approved, with its settlement row, when the editor's
        vote completes the quorum), the editor's attempt, the attempts of the votes it drops
        and the outbox rows, in one transaction. ``False`` (nothing written) when the approval
        had moved on."""
        edit = edited.edit
        assert edit is not None, "an edit comes with its edit"
        votes = [d.model_dump(mode="json") for d in edited.decided_by]
        required = edited.required
        async with self._db.transaction() as conn:
            moved = await conn.fetchval(
                "edit_if_pending",
                edited.approval_id,
                edited.status.value,
                votes,
                list(votes_before),
                edit.number - 1,
            )
            if moved is None:
                return False
            await conn.execute(
                "insert_edit",
                edited.approval_id,
                edit.number,
                edit.arguments_jcs,
                edit.arguments_sha256,
                list(edit.patch),
                edit.by.model_dump(mode="json"),
                edit.at,
                edit.note,
                edited.rule,
                edited.why,
                required.role,
                required.approvals,
                list(required.any_of),
                required.deny_reason,
                edited.valid_for,
                edited.report_within,
                list(edited.editable),
                edit.policy_version,
                edited.arguments_sha256,
                required.verify,
            )
            if edited.settled:
                await _insert_settlement(conn, edited, votes)
            for gone in dropped:
                await conn.execute("insert_attempt", *_attempt_values(gone))
            await conn.execute("insert_attempt", *_attempt_values(attempt))
            await _insert_outbox(conn, outbox, edit.at)
            if edited.settled:
                await conn.notify(SETTLED_CHANNEL, edited.approval_id)
        return True

    async def settle_many(
        self, settlements: Sequence[tuple[models.Approval, Sequence[models.OutboxEntry]]]
    ) -> set[str]:
        """Settle many approvals, each with its outbox rows, as :meth:`settle` settles one that
        adds no vote and no attempt (expiry): compare-and-set from pending with exactly the
        votes it carries (``decided_by``, as read) and its version (``edit_no``) to its settled
        status, its settlement row, its outbox rows, its notification; all in one statement
        (``settle_batch``, the clicks' group commit). Returns the ids that moved. One that had
        moved on (a click settled it, another replica expired it, a vote or an edit came) gets
        nothing written, and so does one whose row another transaction holds at that instant:
        skipped, not waited for, it stays pending for the next sweep."""
        batch = {a.approval_id: (a, outbox) for a, outbox in settlements}  # each once
        if not batch:
            return set()
        expiries = []
        for settled, outbox in batch.values():
            assert settled.settled, "a settlement settles"
            assert settled.decided_at is not None, "a settled approval has its decided_at"
            expiries.append(
                _Settlement(
                    settled=settled,
                    votes=[d.model_dump(mode="json") for d in settled.decided_by],
                    votes_before=tuple(d.slack_user_id for d in settled.decided_by),
                    attempts=(),  # an expiry adds no vote
                    outbox=tuple(outbox),
                    leases=(None,) * len(outbox),  # unclaimed: heard settling, then claimed
                    now=settled.decided_at,
                )
            )
        rows = await self._db.fetch("settle_batch", *_batch_values(expiries))
        return {r["approval_id"] for r in rows}

    async def record_attempt(self, attempt: models.Attempt) -> None:
        await self._db.execute("insert_attempt", *_attempt_values(attempt))

    async def attempts(self, approval_id: str) -> list[models.Attempt]:
        return [_attempt(r) for r in await self._db.fetch("list_attempts", approval_id)]

    async def set_card(self, approval_id: str, card: models.CardRef) -> None:
        """Record where the approval's card is (with the cards posted meanwhile, in one
        statement: the relay posts many at once)."""
        await self._cards_set((approval_id, card))

    async def _set_cards(self, cards: list[tuple[str, models.CardRef]]) -> list[None]:
        await self._db.execute(
            "set_cards",
            [approval_id for approval_id, _ in cards],
            [card.channel for _, card in cards],
            [card.ts for _, card in cards],
        )
        return [None] * len(cards)

    async def pending_expired(self, now: datetime, limit: int) -> list[str]:
        """Ids of pending approvals whose ``expires_at`` has passed."""
        return [r["approval_id"] for r in await self._db.fetch("pending_expired", now, limit)]

    async def list_pending(self, limit: int) -> list[models.Approval]:
        """Pending approvals, newest first."""
        rows = await self._db.fetch("pending_ids", limit)
        return await self.get_approvals([r["approval_id"] for r in rows])

    async def count_pending(self, upto: int) -> int:
        """How many approvals are pending, or ``upto`` when at least that many are."""
        return int(await self._db.fetchval("count_pending_upto", upto))

    async def list_requested_by(
        self, slack_user_id: str, email: str | None, limit: int
    ) -> list[models.Approval]:
        """Approvals whose requester is this person (Slack id or e-mail), newest first."""
        rows = await self._db.fetch("requested_by", slack_user_id, email, limit)
        return await self.get_approvals([r["approval_id"] for r in rows])

    # -- the outbox ---------------------------------------------------------------------------

    async def claim_outbox(
        self, now: datetime, lease_until: datetime, limit: int, held: Iterable[int] = ()
    ) -> list[models.OutboxItem]:
        """Lease up to ``limit`` due outbox rows (SKIP LOCKED: replicas never share a row),
        none of ``held`` (the rows the caller holds already, whatever their lease says), each
        with its work as :data:`models.Work`. A row whose work this version cannot read (a
        newer version's) is dead-lettered at once, saying why: ``redrive`` once it can."""
        rows = await self._db.fetch("claim_outbox", now, lease_until, limit, sorted(held))
        return await self._outbox_items(rows, now)

    async def claim_callbacks(
        self, approval_ids: Sequence[str], now: datetime, lease_until: datetime, held: Iterable[int]
    ) -> list[models.OutboxItem]:
        """Lease the due callbacks of ``approval_ids`` (as :meth:`claim_outbox` leases: never
        one of ``held``, never one another relay holds), found by their approvals."""
        rows = await self._db.fetch(
            "claim_callbacks", now, lease_until, list(approval_ids), sorted(held)
        )
        return await self._outbox_items(rows, now)

    async def _outbox_items(self, rows: Sequence[db.Row], now: datetime) -> list[models.OutboxItem]:
        """Claimed rows as outbox items, in id order (an unreadable one dead-lettered)."""
        items = []
        for r in rows:
            try:
                work = models.work_from_row(r["kind"], r["payload"])
            except pydantic.ValidationError as exc:
                await self._unreadable(r, now, exc)
                continue
            items.append(
                models.OutboxItem(
                    id=r["id"],
                    approval_id=r["approval_id"],
                    work=work,
                    attempts=r["attempts"],
                    claims=r["claims"],
                    claim_no=r["claim_no"],
                    created_at=r["created_at"],
                )
            )
        return sorted(items, key=lambda i: i.id)

    async def _unreadable(self, row: db.Row, now: datetime, exc: pydantic.ValidationError) -> None:
        error = f"outbox row not readable by this version: {exc.errors()[0]['msg']}"
        log.error(
            "outbox row dead-lettered: %s",
            error,
            extra={"action": "outbox", "id": row["id"], "approval_id": row["approval_id"]},
        )
        await self._db.fetch("outbox_dead", row["id"], row["claim_no"], now, error)

    async def outbox_done(self, item: models.OutboxItem, now: datetime) -> None:
        """Mark the row delivered (whichever claim delivered it; once); a card post or a
        callback is timed from its approval's submission or settlement (``now`` is the clock
        those were stamped with)."""
        row = await self._deliveries_recorded((item.id, now))
        if row is None:
            return
        match models.OutboxKind(row["kind"]):
            case models.OutboxKind.POST_CARD if row["submitted_at"] is not None:
                since, histogram = row["submitted_at"], metrics.CARD_POSTED_SECONDS
            case models.OutboxKind.CALLBACK if row["settled_at"] is not None:
                since, histogram = row["settled_at"], metrics.SETTLED_DELIVERED_SECONDS
            case _:
                return
        histogram.observe(max(0.0, (now - since).total_seconds()))

    async def _record_deliveries(self, done: list[tuple[int, datetime]]) -> list[db.Row | None]:
        rows = await self._db.fetch("outbox_done", [i for i, _ in done], [at for _, at in done])
        found = {r["id"]: r for r in rows}
        # a row recorded twice in one batch (two relays of one process) is timed once
        return [found.pop(i, None) for i, _ in done]

    # Every other outcome is fenced by the claim (``item.claim_no``): it changes nothing once
    # another relay has claimed the row since (this claim's lease lapsed) or it is done.

    async def outbox_retry(
        self, item: models.OutboxItem, next_attempt_at: datetime, error: str
    ) -> None:
        await self._db.execute("outbox_retry", item.id, item.claim_no, next_attempt_at, error)

    async def outbox_renew(self, items: Iterable[models.OutboxItem], lease_until: datetime) -> None:
        """Extend the leases of rows this relay still holds (not of rows let go or claimed by
        another relay meanwhile)."""
        held = sorted(items, key=lambda i: i.id)
        await self._db.execute(
            "outbox_renew", [i.id for i in held], [i.claim_no for i in held], lease_until
        )

    async def outbox_later(self, item: models.OutboxItem, next_attempt_at: datetime) -> None:
        """Hand a leased row back due at ``next_attempt_at`` without counting an attempt (it
        waited its turn, it did not fail)."""
        await self._db.execute("outbox_later", item.id, item.claim_no, next_attempt_at)

    async def outbox_dead(
        self,
        item: models.OutboxItem,
        now: datetime,
        error: str,
        follow_up: Sequence[models.OutboxEntry] = (),
    ) -> bool:
        """Dead-letter the row and, in the same transaction, queue ``follow_up`` (the card
        update that makes the dead letter visible) — only if it was dead-lettered: False when
        this claim no longer holds the row (its lease lapsed and it was claimed since, or done)."""
        async with self._db.transaction() as conn:
            if not await conn.fetch("outbox_dead", item.id, item.claim_no, now, error):
                return False
            await _insert_outbox(conn, follow_up, now)
        return True

    async def outbox_release(self, item: models.OutboxItem) -> None:
        """Give a leased row back at once, its claim still counted (the relay is stopping
        mid-delivery: the call may have gone out)."""
        await self._db.execute("outbox_release", item.id, item.claim_no)

    async def outbox_unclaim(self, item: models.OutboxItem) -> None:
        """Give back a row whose delivery never started, its claim undone."""
        await self._db.execute("outbox_unclaim", item.id, item.claim_no)

    async def redrive(
        self, approval_id: str, now: datetime, follow_up: Sequence[models.OutboxEntry] = ()
    ) -> int:
        """Make dead-lettered rows of ``approval_id`` due again (and queue ``follow_up`` if
        any were); returns how many."""
        async with self._db.transaction() as conn:
            rows = await conn.fetch("outbox_redrive", approval_id, now)
            if rows:
                await _insert_outbox(conn, follow_up, now)
                await conn.notify(OUTBOX_CHANNEL)
        return len(rows)

    async def queue_outbox(self, entries: Sequence[models.OutboxEntry], now: datetime) -> None:
        """Add outbox rows on their own (work that follows other work, not a state change),
        due at once or at their ``due_at``."""
        async with self._db.transaction() as conn:
            await _insert_outbox(conn, entries, now)

    async def outbox_next_due(self) -> datetime | None:
        value: datetime | None = await self._db.fetchval("outbox_next_due")
        return value

    # -- what an operator watches -------------------------------------------------------------

    async def snapshot(self, now: datetime) -> metrics.Snapshot:
        """The outbox backlog at ``now`` (rows scheduled for later not yet counted, and the age
        of each kind's oldest row), dead letters and pending approvals by rule: the gauges'
        values."""
        backlog = {
            models.OutboxKind(r["kind"]): metrics.Backlog(
                rows=r["count"],
                oldest_seconds=max(0.0, (now - r["oldest"]).total_seconds()),
            )
            for r in await self._db.fetch("outbox_backlog", now)
        }
        dead = {
            models.OutboxKind(r["kind"]): r["count"]
            for r in await self._db.fetch("outbox_dead_by_kind")
        }
        pending = {r["rule"]: r["count"] for r in await self._db.fetch("pending_by_rule")}
        return metrics.Snapshot(backlog=backlog, dead=dead, pending=pending)

    async def database_time(self) -> datetime:
        """The database server's clock now (every replica's clock is set by it)."""
        now: datetime = await self._db.fetchval("database_time")
        return now

    async def schema_version(self) -> int | None:
        """The latest migration applied (``None`` before any)."""
        version: int | None = await self._db.fetchval("schema_version")
        return version

    # -- waiting ------------------------------------------------------------------------------

    async def wait_for_outbox(self, timeout: float) -> None:
        """Return when new outbox work may exist (a notification) or after ``timeout``."""
        await self._listen()
        with contextlib.suppress(TimeoutError):
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
            # races its timeout, and a relay that ignores its cancel never stops
            async with asyncio.timeout(timeout):
                await self._outbox_event.wait()
        self._outbox_event.clear()

    async def wait_for_timers(self, until: datetime, timeout: float) -> None:
        """Return at ``until`` (``timeout`` seconds from now), or sooner when an approval or a
        timer is created (on any replica) that is due before it."""
        await self._listen()
        self._timers_wake_at = until
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._timers_event.wait()
        self._timers_event.clear()
        self._timers_wake_at = None

    async def timers_next_due(self) -> datetime | None:
        """When the timer loop has work next: the earliest unfired timer or pending expiry."""
        due: datetime | None = await self._db.fetchval("timers_next_due")
        return due

    async def wait_for_settlement(self, approval_id: str, timeout: float) -> models.Approval | None:
        """Return when ``approval_id`` may have settled (a notification) or after ``timeout``:
        the approval when a click of this process settled it meanwhile (see
        :meth:`_settled_here`), else None (read it to know)."""
        await self._listen()
        waiter = _SettleWaiter()
        self._settle_waiters[approval_id].add(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await waiter.woken.wait()
        finally:
            waiters = self._settle_waiters[approval_id]
            waiters.discard(waiter)
            if not waiters:
                del self._settle_waiters[approval_id]
        return waiter.settled

    # -- lead-facing turns --------------------------------------------------------------------

    async def get_turn(self, key: models.TurnKey) -> models.TurnRecord | None:
        """The verdict stored for these request ids, if any."""
        return await _turn_by_request(self._db, key)

    async def record_turn(self, record: models.TurnRecord) -> tuple[models.TurnRecord, bool]:
        """Store a lead-facing turn's verdict (append-only), idempotent on its :class:`TurnKey`:
        when those ids are stored already, nothing is written and the stored verdict comes back
        with ``False`` (whatever ``record`` says; the caller compares fingerprints)."""
        async with self._db.transaction() as conn:
            return await _insert_turn(conn, record)

    async def turns_for_session(self, agent: str, session_id: str) -> list[models.TurnRecord]:
        """The verdicts of one agent session, oldest first."""
        return [_turn(r) for r in await self._db.fetch("turns_for_session", agent, session_id)]

    async def decide_turn(
        self,
        key: models.TurnKey,
        counted: models.LeadWindow | None,
        decide: Callable[[int | None], models.TurnRecord | None],
    ) -> tuple[models.TurnRecord | None, bool]:
        """Count, decide and record a turn as one atomic step (no I/O but the store's own).

        With the turn's lead serialised (for ``counted``: its agent, lead key and tool), the
        stored verdict for ``key`` comes back with ``False`` if there is one; else ``decide`` is
        called with how many calls ``counted`` allowed (``None`` without a limit) and the record
        it returns is stored like :meth:`record_turn`'s. ``decide`` is pure and quick: it runs
        inside the transaction. It returns ``None`` for a verdict that needs work outside the
        transaction first (an escalation's approval); then nothing is written: ``(None, False)``.
        """
        async with self._db.transaction() as conn:
            if counted is not None:
                # held until commit: the next turn of this lead counts this one's verdict
                lock = json.dumps([counted.agent, counted.lead_key, counted.tool_name])
                await conn.execute("lock_lead", lock)
            stored = await _turn_by_request(conn, key)
            if stored is not None:
                return stored, False
            count = None
            if counted is not None:
                count = await conn.fetchval(
                    "count_allowed_turns",
                    counted.agent,
                    counted.lead_key,
                    counted.tool_name,
                    counted.since,
                )
            record = decide(count)
            if record is None:
                return None, False
            return await _insert_turn(conn, record)

    # -- the audit ----------------------------------------------------------------------------

    # -- single-use execution -----------------------------------------------------------------

    async def claim_execution(
        self,
        approval_id: str,
        claim_id: str,
        key: str,
        now: datetime,
        outcome_due: datetime | None,
    ) -> bool:
        """Claim the one execution of an approved call, within its valid_for; with it, the card
        updates now and once more at ``outcome_due`` if given (to say no outcome came, if none
        did).
        False when nothing was claimed: claimed already, not approved, or lapsed."""
        updates = [models.card_update(approval_id)]
        if outcome_due is not None:
            updates.append(
                models.card_update(approval_id, outcome_due, unless=models.SKIP_IF_REPORTED)
            )
        async with self._db.transaction() as conn:
            await conn.fetchval("claim_lock", approval_id)  # against a call again: see recall
            if await conn.fetchval("claim_execution", approval_id, claim_id, key, now) is None:
                return False
            await _insert_outbox(conn, updates, now)
        return True

    async def recall_candidate(
        self, agent: str, session_id: str, tool_name: str, arguments_sha256: str
    ) -> str | None:
        """The approval a call of ``tool_name`` with arguments hashing to ``arguments_sha256``
        would be the call again of (:meth:`call_again`): approved with an edit to exactly those
        arguments, of this agent and session, never claimed nor called again; None if none."""
        found: str | None = await self._db.fetchval(
            "recall_candidate", agent, session_id, tool_name, arguments_sha256
        )
        return found

    async def call_again(
        self,
        original: models.Approval,
        approved: models.Approval,
        outbox: Sequence[models.OutboxEntry],
    ) -> bool | None:
        """Create ``approved`` (settled approved, its ``edit_of`` naming ``original``) with its
        settlement row and ``outbox``, in one transaction, taking the place of ``original``:
        only while that one, approved with its edit, is within its valid_for, never claimed and
        never called again. Under the original's row lock, which a claim takes too
        (``claim_lock``), so that of a claim and a call again only one ever gets it.

        True when created; False when the original could no longer be taken; None when the
        request ids of ``approved`` exist already (a repeated request). Nothing is written
        unless True."""
        decided_at = approved.decided_at
        assert approved.edit_of == original.approval_id
        assert decided_at is not None
        pending = approved.evolve(status=models.Status.PENDING, decided_by=(), decided_at=None)
        async with self._db.transaction() as conn:
            await conn.fetchval("claim_lock", original.approval_id)
            if not await conn.fetchval(
                "recall_open", original.approval_id, original.run_sha256, decided_at
            ):
                return False
            creation = (pending, (), ())
            if await conn.fetchval("create_approval", *_creation_values(creation)) is None:
                return None
            await conn.execute("set_edit_of", approved.approval_id, original.approval_id)
            await _approve_created(conn, approved)
            await _insert_outbox(conn, outbox, decided_at)
            await conn.notify(SETTLED_CHANNEL, approved.approval_id)
        return True

    async def create_decided(
        self, approved: models.Approval, outbox: Sequence[models.OutboxEntry]
    ) -> bool:
        """Create ``approved`` (settled by the policy: a rule that decides by itself) with its
        settlement row and ``outbox``, in one transaction. False (nothing written) when its
        request ids exist already."""
        decided_at = approved.decided_at
        assert decided_at is not None
        pending = approved.evolve(status=models.Status.PENDING, decided_at=None)
        async with self._db.transaction() as conn:
            if await conn.fetchval("create_approval", *_creation_values((pending, (), ()))) is None:
                return False
            await _approve_created(conn, approved)
            await _insert_outbox(conn, outbox, decided_at)
            await conn.notify(SETTLED_CHANNEL, approved.approval_id)
        return True

    # -- standing grants (docs/grants.md) ------------------------------------------------------

    async def live_grants(
        self, agent: str, tool_name: str, session_id: str, now: datetime
    ) -> list[models.Grant]:
        """The grants a call of ``tool_name`` by ``agent`` in ``session_id`` could use at
        ``now`` by agent, scope, uses, expiry and revocation (newest first)."""
        rows = await self._db.fetch("live_grants", agent, tool_name, session_id, now)
        return [_grant(r) for r in rows]

    async def use_grant(
        self,
        grant: models.Grant,
        approved: models.Approval,
        outbox: Callable[[models.Approval], Sequence[models.OutboxEntry]],
    ) -> bool | None:
        """Create ``approved`` (settled approved by ``grant``'s granter) with its settlement row,
        the use's audit event and the rows ``outbox`` makes for it (given it with its use), in
        one transaction with one use of ``grant``,
        counted by compare-and-set: only while the grant is unrevoked, unexpired and has a use
        left (concurrent uses wait on its row and re-check). True when created; False when the
        grant had no use left (nothing written); None when the request ids of ``approved`` exist
        already (a repeated request: nothing written, no use taken)."""
        decided_at = approved.decided_at
        assert decided_at is not None
        pending = approved.evolve(
            status=models.Status.PENDING, decided_by=(), decided_at=None, grant=None
        )
        try:
            async with self._db.transaction() as conn:
                if (
                    await conn.fetchval("create_approval", *_creation_values((pending, (), ())))
                    is None
                ):
                    raise _RepeatedRequest
                await _approve_created(conn, approved)
                # the use last: the grant's row stays locked (every concurrent use of it waits)
                # only from here to the commit; none left rolls the approval back with it
                use = await conn.fetchval("use_grant", grant.grant_id, decided_at)
                if use is None:
                    raise _NoUseLeft
                await conn.execute(
                    "set_grant_use", approved.approval_id, grant.grant_id, use, grant.max_uses
                )
                await conn.execute(
                    "insert_grant_event",
                    grant.grant_id,
                    approved.approval_id,
                    "used",
                    {
                        "use": use,
                        "of": grant.max_uses,
                        "arguments_sha256": approved.arguments_sha256,
                    },
                    decided_at,
                )
                used = approved.evolve(
                    grant=models.GrantUse(id=grant.grant_id, use=use, of=grant.max_uses)
                )
                await _insert_outbox(conn, outbox(used), decided_at)
                await conn.notify(SETTLED_CHANNEL, approved.approval_id)
        except _RepeatedRequest:
            return None
        except _NoUseLeft:
            return False
        return True

    async def get_grant(self, grant_id: str) -> models.Grant | None:
        rows = await self._db.fetch("get_grants", [grant_id])
        return _grant(rows[0]) if rows else None

    async def grants_of(self, approval_id: str) -> list[models.Grant]:
        """The grants made on approving ``approval_id`` (one, unless none)."""
        return [_grant(r) for r in await self._db.fetch("grants_of_approval", approval_id)]

    async def list_grants(
        self, *, agent: str | None = None, live_at: datetime | None = None, limit: int = 200
    ) -> list[models.Grant]:
        """Grants newest first, of ``agent`` (None: every agent), only those live at
        ``live_at`` when it is given."""
        rows = await self._db.fetch("list_grants", agent, live_at is not None, live_at, limit)
        return [_grant(r) for r in rows]

    async def revoke_grant(
        self,
        grant_id: str,
        by: str,
        now: datetime,
        outbox: Callable[[str], Sequence[models.OutboxEntry]],
    ) -> bool:
        """Revoke the grant (once: False when it was revoked already or does not exist), with
        its audit event and the outbox rows ``outbox`` makes for the approval it was granted on,
        in one transaction."""
        async with self._db.transaction() as conn:
            approval_id = await conn.fetchval("revoke_grant", grant_id, now, by)
            if approval_id is None:
                return False
            await conn.execute(
                "insert_grant_event", grant_id, approval_id, "revoked", {"by": by}, now
            )
            await _insert_outbox(conn, outbox(approval_id), now)
        return True

    async def report_outcome(
        self, approval_id: str, key: str, outcome: models.ExecutionOutcome
    ) -> bool:
        """Store the outcome of the claim made with ``key``, once (and update the card); False
        when there is no such claim or it has an outcome already."""
        async with self._db.transaction() as conn:
            stored = await conn.fetchval(
                "report_outcome",
                approval_id,
                key,
                outcome.status,
                outcome.detail,
                outcome.reported_at,
            )
            if stored is None:
                return False
            await _insert_outbox(conn, [models.card_update(approval_id)], outcome.reported_at)
        return True

    # -- timers -------------------------------------------------------------------------------

    async def schedule_timer(self, timer: models.TimerEntry) -> None:
        """Add a timer (ignored if that approval already has one of that kind and step)."""
        async with self._db.transaction() as conn:
            await _insert_timers(conn, [timer])
            await conn.notify(TIMERS_CHANNEL, timer.due_at.isoformat())

    async def fire_due_timers(
        self,
        now: datetime,
        limit: int,
        lapses: Callable[[models.TimerEntry], bool] | None = None,
    ) -> list[models.TimerEntry]:
        """Mark due timers fired and, for approvals still pending, queue their outbox rows
        (one transaction); returns the timers that acted. A timer that ``lapses`` (the caller's
        judgement: an escalation the policy in force sends nowhere) is fired and does nothing,
        as a settled approval's does."""
        async with self._db.transaction() as conn:
            rows = await conn.fetch("claim_due_timers", now, limit)
            if not rows:
                return []
            among = [r["approval_id"] for r in rows]
            # an approval past expiry is as good as expired, whichever loop runs first
            pending = {r["approval_id"] for r in await conn.fetch("pending_among", among, now)}
            fired = [
                _timer(r, r["approval_id"], _page(r["page"]))
                for r in rows
                if r["approval_id"] in pending  # a settled approval's timers just lapse
            ]
            if lapses is not None:
                fired = [t for t in fired if not lapses(t)]
            await _insert_outbox(conn, models.timer_outbox(fired), now)
        return fired

    async def fired_timers(self, approval_id: str) -> list[tuple[models.TimerEntry, datetime]]:
        """The reminders and escalations that fired for this approval, with when."""
        rows = await self._db.fetch("fired_timers", approval_id)
        return [(_timer(r, approval_id), r["fired_at"]) for r in rows]


# -- writing ------------------------------------------------------------------------------------


def _approval_values(a: models.Approval) -> tuple[Any, ...]:
    """The approval's columns among the parameters of ``create_approval``, in its order."""
    return (
        a.approval_id,
        a.agent,
        a.session_id,
        a.request_id,
        a.tool.name,
        a.tool.call_id,
        a.tool.arguments,
        a.arguments_sha256,
        a.requester.model_dump(mode="json", exclude_none=True),
        a.summary,
        a.context,
        a.callback_url,
        a.framework,
        a.required.role,
        a.required.approvals,
        a.rule,
        a.created_at,
        a.expires_at,
        a.policy_version,
        a.fingerprint,
        [o.model_dump(mode="json", exclude_none=True) for o in a.outsiders],
        a.why,
        a.required.deny_reason,
        list(a.required.any_of),
        a.arguments_jcs,
        list(a.argument_schemas),
        a.valid_for,
        a.report_within,
        a.review_channel,
        list(a.editable),
    )


async def _insert_settlement(
    conn: db.Connection, settled: models.Approval, votes: list[dict[str, Any]]
) -> None:
    await conn.execute(
        "insert_settlement",
        settled.approval_id,
        settled.status.value,
        votes,
        settled.reason,
        settled.decided_at,
        settled.policy_version,
    )


async def _approve_created(conn: db.Connection, approved: models.Approval) -> None:
    """Settle an approval created pending in this transaction as ``approved`` says (a call
    again, a standing grant's use): its votes and its settlement row."""
    votes = [d.model_dump(mode="json") for d in approved.decided_by]
    await conn.fetchval(
        "settle_if_pending", approved.approval_id, approved.status.value, votes, [], 0
    )
    await _insert_settlement(conn, approved, votes)


async def _insert_grant(conn: db.Connection, grant: models.Grant) -> None:
    """The grant's row and its audit event (``granted``)."""
    constraints = _constraint_values(grant.constraints)
    granted_by = grant.granted_by.model_dump(mode="json")
    await conn.execute(
        "insert_grant",
        grant.grant_id,
        grant.approval_id,
        grant.agent,
        grant.scope,
        grant.session_id,
        grant.tool_name,
        grant.rule,
        grant.requirement_sha256,
        grant.required.model_dump(mode="json"),
        constraints,
        grant.max_uses,
        granted_by,
        grant.created_at,
        grant.expires_at,
        grant.policy_version,
    )
    event = {
        "scope": grant.scope,
        "session_id": grant.session_id if grant.scope == "session" else None,
        "tool_name": grant.tool_name,
        "constraints": constraints,
        "max_uses": grant.max_uses,
        "expires_at": grant.expires_at.isoformat(),
        "granted_by": granted_by,
        "rule": grant.rule,
        "policy_version": grant.policy_version,
    }
    await conn.execute(
        "insert_grant_event", grant.grant_id, grant.approval_id, "granted", event, grant.created_at
    )


def _constraint_values(constraints: dict[str, models.GrantConstraint]) -> dict[str, Any]:
    """Each constraint with its value as RFC 8785 text: a jsonb number would come back in
    another form (1e20 as an integer past what RFC 8785 can write), the text as it was hashed."""
    return {
        name: {
            "kind": c.kind,
            "jcs": None if c.kind == "any" else hashing.canonical_json(c.value).decode("utf-8"),
        }
        for name, c in constraints.items()
    }


def _grant(row: db.Row) -> models.Grant:
    return models.Grant(
        grant_id=row["grant_id"],
        approval_id=row["approval_id"],
        agent=row["agent"],
        scope=row["scope"],
        session_id=row["session_id"],
        tool_name=row["tool_name"],
        rule=row["rule"],
        requirement_sha256=row["requirement_sha256"],
        required=models.Required.model_validate(row["required"]),
        constraints={
            name: models.GrantConstraint(
                kind=stored["kind"],
                value=None if stored["jcs"] is None else hashing.parse_canonical(stored["jcs"]),
            )
            for name, stored in row["constraints"].items()
        },
        max_uses=row["max_uses"],
        uses=row["uses"],
        granted_by=models.Decider.model_validate(row["granted_by"]),
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        revoked_at=row["revoked_at"],
        revoked_by=row["revoked_by"],
        policy_version=row["policy_version"],
    )


def _attempt_values(a: models.Attempt) -> tuple[Any, ...]:
    """The attempt's columns, in ``insert_attempt``'s order: the approval, who, what, when."""
    who = (a.slack_user_id, a.email, a.name)
    return (a.approval_id, *who, a.action, a.outcome.value, a.detail, a.at)


async def _insert_outbox(
    conn: db.Connection, entries: Sequence[models.OutboxEntry], now: datetime
) -> None:
    if not entries:
        return
    # a row due later is created then: its retry budget and its age (the backlog's) count from
    # when it is due
    await conn.executemany(
        "insert_outbox",
        [
            (e.approval_id, e.kind.value, models.work_payload(e.work), e.due_at or now)
            for e in entries
        ],
    )
    await conn.notify(OUTBOX_CHANNEL)


# A submission to write: the approval, its outbox rows, its timers.
_Creation = tuple[models.Approval, tuple[models.OutboxEntry, ...], tuple[models.TimerEntry, ...]]


def _batch_values(batch: list[_Settlement]) -> tuple[Any, ...]:
    """``settle_batch``'s parameters: per settlement, then its attempts and outbox rows
    flattened, each with its approval's id."""
    attempts = [(one.settled.approval_id, a) for one in batch for a in one.attempts]
    rows = [
        (one.settled.approval_id, e, one.now, lease)
        for one in batch
        for e, lease in zip(one.outbox, one.leases, strict=True)
    ]
    return (
        [one.settled.approval_id for one in batch],
        [one.settled.status.value for one in batch],
        [json.dumps(one.votes) for one in batch],
        [json.dumps(list(one.votes_before)) for one in batch],
        [one.settled.edit_no for one in batch],
        [one.settled.settled for one in batch],
        [one.settled.reason for one in batch],
        [one.settled.decided_at for one in batch],
        [one.settled.policy_version for one in batch],
        [approval_id for approval_id, _ in attempts],
        [a.slack_user_id for _, a in attempts],
        [a.email for _, a in attempts],
        [a.name for _, a in attempts],
        [a.action for _, a in attempts],
        [a.outcome.value for _, a in attempts],
        [a.detail for _, a in attempts],
        [a.at for _, a in attempts],
        [approval_id for approval_id, _, _, _ in rows],
        [e.kind.value for _, e, _, _ in rows],
        [json.dumps(models.work_payload(e.work)) for _, e, _, _ in rows],
        [e.due_at or now for _, e, now, _ in rows],
        [lease for _, _, _, lease in rows],
        OUTBOX_CHANNEL,
        SETTLED_CHANNEL,
    )


def _creation_values(creation: _Creation) -> tuple[Any, ...]:
    """The parameters of ``create_approval``, in its order."""
    a, outbox, timers = creation
    return (
        *_approval_values(a),
        *_outbox_columns(outbox, a.created_at),
        *_timer_columns(timers),
        OUTBOX_CHANNEL,
        TIMERS_CHANNEL,
        min([a.expires_at, *(t.due_at for t in timers)]).isoformat(),
        a.grants.model_dump(mode="json") if a.grants is not None else None,
        a.decided_by_policy,
        a.required.verify,
    )


def _outbox_columns(
    entries: Sequence[models.OutboxEntry], now: datetime
) -> tuple[list[str], list[str], list[str], list[datetime]]:
    """``entries`` as the parallel arrays of ``create_approval`` (approval ids, kinds, JSON
    payloads, due)."""
    return (
        [e.approval_id for e in entries],
        [e.kind.value for e in entries],
        [json.dumps(models.work_payload(e.work)) for e in entries],
        [e.due_at or now for e in entries],
    )


def _timer_columns(
    timers: Sequence[models.TimerEntry],
) -> tuple[list[str], list[str], list[int], list[datetime], list[str | None]]:
    """``timers`` as the parallel arrays of ``create_approval`` (approval ids, kinds, steps,
    due, pages)."""
    return (
        [t.approval_id for t in timers],
        [t.kind for t in timers],
        [t.step for t in timers],
        [t.due_at for t in timers],
        [None if t.page is None else t.page.model_dump_json() for t in timers],
    )


async def _insert_timers(conn: db.Connection, timers: Sequence[models.TimerEntry]) -> None:
    plain = [(t.approval_id, t.kind, t.step, t.due_at) for t in timers if t.page is None]
    paging = [
        (t.approval_id, t.kind, t.step, t.due_at, t.page.model_dump(mode="json"))
        for t in timers
        if t.page is not None
    ]
    if plain:
        await conn.executemany("insert_timer", plain)
    if paging:  # an escalation that pages keeps what it pages
        await conn.executemany("insert_paging_timer", paging)


async def _insert_turn(
    conn: db.Connection, record: models.TurnRecord
) -> tuple[models.TurnRecord, bool]:
    r = record
    inserted = await conn.fetchval(
        "insert_turn",
        r.agent,
        r.session_id,
        r.request_id,
        r.channel,
        r.lead_id,
        r.tool_name,
        r.call_id,
        r.inputs_sha256,
        r.policy_version,
        r.verdict,
        r.rule,
        r.reason_code,
        r.message,
        list(r.evaluated),
        r.approval_id,
        r.at,
        r.lead_key,
    )
    if inserted is not None:
        return record, True
    # another writer stored these ids first (it committed: ON CONFLICT waited for it)
    stored = await _turn_by_request(conn, record.key)
    assert stored is not None
    return stored, False


async def _turn_by_request(conn: db.Connection, key: models.TurnKey) -> models.TurnRecord | None:
    row = await conn.fetchrow("turn_by_request", key.agent, key.session_id, key.request_id)
    return _turn(row) if row is not None else None


# -- reading: rows become models here and nowhere else ------------------------------------------


def _approval(row: db.Row) -> models.Approval:
    arguments_jcs, arguments = _arguments(row)
    approval = models.Approval(
        approval_id=row["approval_id"],
        status=models.Status(row["status"]),
        agent=row["agent"],
        request_id=row["request_id"],
        session_id=row["session_id"],
        tool=models.ToolCall(name=row["tool_name"], call_id=row["call_id"], arguments=arguments),
        arguments_sha256=row["arguments_sha256"],
        arguments_jcs=arguments_jcs,
        requester=models.Requester.model_validate(row["requester"]),
        summary=row["summary"],
        context=row["context"],
        callback_url=row["callback_url"],
        framework=row["framework"],
        required=models.Required(
            role=row["required_role"],
            approvals=row["required_approvals"],
            deny_reason=row["deny_reason_required"],
            any_of=tuple(row["required_any_of"]),
            verify=row["verify"],
        ),
        rule=row["rule"],
        why=row["rule_why"],
        decided_by=_deciders(row),
        reason=row["reason"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        decided_at=row["decided_at"],
        policy_version=row["policy_version"],
        fingerprint=row["fingerprint"],
        card=(
            models.CardRef(channel=row["card_channel"], ts=row["card_ts"])
            if row["card_channel"]
            else None
        ),
        card_state=_card_state(row),
        delivery=_delivery(row),
        outsiders=tuple(models.Outsider.model_validate(o) for o in row["outsiders"]),
        escalated_at=row["escalated_at"],
        pages=tuple(row["pages"]),
        paged=tuple(row["paged"]),
        argument_schemas=tuple(row["argument_schemas"]),
        valid_for=row["valid_for"],
        report_within=row["report_within"],
        review_channel=row["review_channel"],
        execution=_execution(row),
        editable=tuple(row["editable"]),
        edit_of=row["edit_of"],
        called_again_as=row["called_again_as"],
        grants=(
            models.GrantLimits.model_validate(row["grant_limits"])
            if row["grant_limits"] is not None
            else None
        ),
        grant=(
            models.GrantUse(id=row["grant_id"], use=row["grant_use"], of=row["grant_of"])
            if row["grant_id"] is not None
            else None
        ),
        decided_by_policy=row["decided_by_policy"],
    )
    edited = row["latest_edit"]
    return approval if edited is None else _with_edit(approval, edited)


def _with_edit(approval: models.Approval, edited: dict[str, Any]) -> models.Approval:
    """The approval with its latest edit (``edited``: its row of edits as JSON): the edit, and
    the routing of the edited call, which the approval needs from then on."""
    edit = models.Edit(
        number=edited["edit_no"],
        arguments=hashing.parse_canonical(edited["arguments_jcs"]),
        arguments_jcs=edited["arguments_jcs"],
        arguments_sha256=edited["arguments_sha256"],
        patch=tuple(edited["patch"]),
        by=models.Decider.model_validate(edited["edited_by"]),
        at=edited["at"],
        note=edited["note"],
        policy_version=edited["policy_version"],
    )
    return approval.evolve(
        edit=edit,
        required=models.Required(
            role=edited["required_role"],
            approvals=edited["required_approvals"],
            deny_reason=edited["deny_reason_required"],
            any_of=tuple(edited["required_any_of"]),
            verify=edited["verify"],
        ),
        rule=edited["rule"],
        why=edited["rule_why"],
        valid_for=edited["valid_for"],
        report_within=edited["report_within"],
        editable=tuple(edited["editable"]),
    )


def _execution(row: db.Row) -> models.Execution | None:
    if row["execution_claim_id"] is None:
        return None
    outcome = (
        models.ExecutionOutcome(
            status=row["execution_outcome"],
            detail=row["execution_detail"] or "",
            reported_at=row["execution_reported_at"],
        )
        if row["execution_outcome"] is not None
        else None
    )
    return models.Execution(
        claim_id=row["execution_claim_id"],
        idempotency_key=row["execution_key"],
        claimed_at=row["execution_claimed_at"],
        outcome=outcome,
    )


def _arguments(row: db.Row) -> tuple[str, dict[str, Any]]:
    """The arguments' text as hashed and their values parsed from that very text (the jsonb
    column has normalised the numbers); rows from before migration 0007 have only the jsonb."""
    text: str | None = row["arguments_jcs"]
    if text is None:
        return hashing.legacy_canonical_text(row["arguments"]), row["arguments"]
    return text, hashing.parse_canonical(text)


def _deciders(row: db.Row) -> tuple[models.Decider, ...]:
    # settled: the settlement's list; pending: the quorum votes counted so far
    deciders = row["decided_by"] if row["settled_status"] else row["votes"]
    return tuple(models.Decider.model_validate(d) for d in (deciders or []))


def _card_state(row: db.Row) -> models.CardState:
    """Posted once its ts is stored; failed when its latest post was dead-lettered (a redrive
    makes it pending again); pending otherwise, with the last try's error if it had one."""
    if row["card_ts"]:
        return models.CardState(status="posted", channel=row["card_channel"], ts=row["card_ts"])
    status: models.CardStatus = "failed" if row["card_dead_at"] else "pending"
    return models.CardState(status=status, error=row["card_last_error"])


def _delivery(row: db.Row) -> models.Delivery:
    """The state of the latest callback row; none without a callback."""
    if not row["has_callback"]:
        return models.Delivery()
    status: models.DeliveryStatus = (
        "delivered"
        if row["delivery_done_at"]
        else "dead_letter"
        if row["delivery_dead_at"]
        else "pending"
    )
    return models.Delivery(
        status=status,
        attempts=row["delivery_attempts"],
        last_error=row["delivery_last_error"],
        delivered_at=row["delivery_done_at"],
    )


def _attempt(row: db.Row) -> models.Attempt:
    return models.Attempt(
        approval_id=row["approval_id"],
        slack_user_id=row["slack_user_id"],
        email=row["email"],
        name=row["name"],
        action=row["action"],
        outcome=models.AttemptOutcome(row["outcome"]),
        detail=row["detail"],
        at=row["at"],
    )


def _turn(row: db.Row) -> models.TurnRecord:
    return models.TurnRecord.model_validate({k: row[k] for k in models.TurnRecord.model_fields})


def _timer(row: db.Row, approval_id: str, page: models.Page | None = None) -> models.TimerEntry:
    return models.TimerEntry(
        approval_id=approval_id,
        kind=row["kind"],
        step=row["step"],
        due_at=row["due_at"],
        page=page,
    )


def _page(value: Any) -> models.Page | None:
    """A timer's ``page`` column (jsonb, NULL when it pages nobody)."""
    return None if value is None else models.Page.model_validate(value)
