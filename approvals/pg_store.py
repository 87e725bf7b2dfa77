"""The PostgreSQL :class:`~approvals.store.Store`, through asyncpg.

The only module that imports asyncpg: driver errors are translated here and rows become models
here. Each query lives in ``sql/queries.sql`` and is wrapped by one method.

NOTIFY tells other processes that something changed (``countersign_outbox`` wakes relays,
``countersign_settled`` wakes long-polls); it is sent inside the transaction, so Postgres delivers
it only on commit. Callers poll as a backstop, so a lost notification only costs latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from approvals import hashing, models, sql_loader

__all__ = ["DATABASE_UNAVAILABLE", "PostgresStore", "migrate"]

log = logging.getLogger(__name__)

OUTBOX_CHANNEL = "countersign_outbox"
SETTLED_CHANNEL = "countersign_settled"
# Any constant works: it only has to be the same in every process that migrates.
MIGRATION_LOCK = 0x636F756E7465  # "counte"

Q = sql_loader.queries()

# Connection-level failures, for callers that must not import asyncpg (the CLI).
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (asyncpg.PostgresError, asyncpg.InterfaceError)
Conn = asyncpg.Connection | asyncpg.pool.PoolConnectionProxy


async def _init_connection(conn: Conn) -> None:
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name, encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
        )


async def _keep_session(conn: Conn) -> None:
    """Pool connections never LISTEN, SET or take advisory locks (the listener and migrations
    use their own connections), so asyncpg's reset query on every release is pure overhead: it
    cost ~15 % of intake throughput in `make bench`. asyncpg still rolls back an open
    transaction before calling this."""


async def migrate(dsn: str) -> list[int]:
    """Apply the migrations not applied yet; returns their versions.

    Idempotent, and safe when several processes start at once: an advisory lock serialises
    them, and each migration commits together with its row in ``schema_migrations``.
    """
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
            applied = []
            for version, name, sql in sql_loader.migrations():
                if version in done:
                    continue
                async with conn.transaction():
                    await conn.execute(sql)
                    await conn.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                        version,
                        name,
                    )
                log.info("migration applied", extra={"action": "migrate", "version": version})
                applied.append(version)
            return applied
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)
    finally:
        await conn.close()


def _arguments(row: asyncpg.Record) -> tuple[str, dict[str, Any]]:
    """The arguments' text as hashed and their values parsed from that very text (the jsonb
    column has normalised the numbers); rows from before migration 0007 have only the jsonb."""
    text: str | None = row["arguments_jcs"]
    if text is None:
        return hashing.legacy_canonical_text(row["arguments"]), row["arguments"]
    return text, json.loads(text)


def _turn(row: asyncpg.Record) -> models.TurnRecord:
    return models.TurnRecord.model_validate({k: row[k] for k in models.TurnRecord.model_fields})


def _approval(row: asyncpg.Record) -> models.Approval:
    # settled: the settlement's list; pending: the quorum votes counted so far
    deciders = row["decided_by"] if row["settled_status"] else row["votes"]
    decided_by = tuple(models.Decider.model_validate(d) for d in (deciders or []))
    if not row["has_callback"]:
        delivery = models.Delivery()
    else:
        status: models.DeliveryStatus = (
            "delivered"
            if row["delivery_done_at"]
            else "dead_letter"
            if row["delivery_dead_at"]
            else "pending"
        )
        delivery = models.Delivery(
            status=status,
            attempts=row["delivery_attempts"],
            last_error=row["delivery_last_error"],
            delivered_at=row["delivery_done_at"],
        )
    arguments_jcs, arguments = _arguments(row)
    card = (
        models.CardRef(channel=row["card_channel"], ts=row["card_ts"])
        if row["card_channel"]
        else None
    )
    return models.Approval(
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
        ),
        rule=row["rule"],
        why=row["rule_why"],
        decided_by=decided_by,
        reason=row["reason"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        decided_at=row["decided_at"],
        policy_version=row["policy_version"],
        fingerprint=row["fingerprint"],
        card=card,
        delivery=delivery,
        outsiders=tuple(models.Outsider.model_validate(o) for o in row["outsiders"]),
        escalated_at=row["escalated_at"],
        argument_schemas=tuple(row["argument_schemas"]),
    )


def _attempt(row: asyncpg.Record) -> models.Attempt:
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


class PostgresStore:
    """A pool of connections plus one listening connection for notifications."""

    def __init__(self, pool: asyncpg.Pool, listener: asyncpg.Connection | None) -> None:
        self._pool = pool
        self._listener = listener
        self._outbox_event = asyncio.Event()
        self._settle_waiters: defaultdict[str, set[asyncio.Event]] = defaultdict(set)

    @classmethod
    async def connect(
        cls, dsn: str, *, min_size: int = 2, max_size: int = 10, listen: bool = True
    ) -> PostgresStore:
        pool = await asyncpg.create_pool(
            dsn, min_size=min_size, max_size=max_size, init=_init_connection, reset=_keep_session
        )
        listener = await asyncpg.connect(dsn) if listen else None
        store = cls(pool, listener)
        if listener is not None:
            await listener.add_listener(OUTBOX_CHANNEL, store._on_outbox)
            await listener.add_listener(SETTLED_CHANNEL, store._on_settled)
        return store

    def _on_outbox(self, *_: object) -> None:
        self._outbox_event.set()

    def _on_settled(self, _conn: Conn, _pid: int, _channel: str, payload: object) -> None:
        for event in self._settle_waiters.get(str(payload), ()):
            event.set()

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Conn]:
        async with self._pool.acquire() as conn, conn.transaction():
            yield conn

    async def _insert_outbox(
        self, conn: Conn, entries: Sequence[models.OutboxEntry], now: datetime
    ) -> None:
        if not entries:
            return
        await conn.executemany(
            Q["insert_outbox"],
            [(e.approval_id, e.kind.value, e.payload, now) for e in entries],
        )
        await conn.execute("SELECT pg_notify($1, '')", OUTBOX_CHANNEL)

    async def create_approval(
        self,
        approval: models.Approval,
        outbox: Sequence[models.OutboxEntry],
        timers: Sequence[models.TimerEntry] = (),
    ) -> tuple[models.Approval, bool]:
        a = approval
        async with self._transaction() as conn:
            inserted = await conn.fetchval(
                Q["insert_approval"],
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
            )
            if inserted is not None:
                await self._insert_outbox(conn, outbox, a.created_at)
                await self._insert_timers(conn, timers)
                # exactly what was inserted: no card, no settlement, no delivery yet
                return a, True
            existing_id = await conn.fetchval(
                Q["approval_id_by_request"], a.agent, a.session_id, a.request_id
            )
        stored = await self.get_approval(existing_id)
        assert stored is not None
        return stored, False

    async def get_approval(self, approval_id: str) -> models.Approval | None:
        found = await self._by_ids([approval_id])
        return found[0] if found else None

    async def settle(
        self,
        settled: models.Approval,
        attempt: models.Attempt | None,
        outbox: Sequence[models.OutboxEntry],
        *,
        votes_before: Sequence[str] = (),
        dropped: Sequence[models.Attempt] = (),
    ) -> bool:
        votes = [d.model_dump(mode="json") for d in settled.decided_by]
        async with self._transaction() as conn:
            moved = await conn.fetchval(
                Q["settle_if_pending"],
                settled.approval_id,
                settled.status.value,
                votes,
                list(votes_before),
            )
            if moved is None:
                return False
            now = settled.decided_at or (attempt.at if attempt else None)
            assert now is not None, "a quorum vote always comes with its attempt"
            if settled.settled:
                await conn.execute(
                    Q["insert_settlement"],
                    settled.approval_id,
                    settled.status.value,
                    votes,
                    settled.reason,
                    settled.decided_at,
                    settled.policy_version,
                )
            for gone in dropped:
                await self._insert_attempt(conn, gone)
            if attempt is not None:
                await self._insert_attempt(conn, attempt)
            await self._insert_outbox(conn, outbox, now)
            if settled.settled:
                await conn.execute("SELECT pg_notify($1, $2)", SETTLED_CHANNEL, settled.approval_id)
        return True

    async def _insert_attempt(self, conn: Conn, a: models.Attempt) -> None:
        await conn.execute(
            Q["insert_attempt"],
            a.approval_id,
            a.slack_user_id,
            a.email,
            a.name,
            a.action,
            a.outcome.value,
            a.detail,
            a.at,
        )

    async def record_attempt(self, attempt: models.Attempt) -> None:
        async with self._pool.acquire() as conn:
            await self._insert_attempt(conn, attempt)

    async def attempts(self, approval_id: str) -> list[models.Attempt]:
        async with self._pool.acquire() as conn:
            return [_attempt(r) for r in await conn.fetch(Q["list_attempts"], approval_id)]

    async def set_card(self, approval_id: str, card: models.CardRef) -> None:
        async with self._pool.acquire() as conn:
            await conn.execute(Q["set_card"], approval_id, card.channel, card.ts)

    async def pending_expired(self, now: datetime, limit: int) -> list[str]:
        async with self._pool.acquire() as conn:
            return [r["approval_id"] for r in await conn.fetch(Q["pending_expired"], now, limit)]

    async def claim_outbox(
        self, now: datetime, lease_until: datetime, limit: int
    ) -> list[models.OutboxItem]:
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(Q["claim_outbox"], now, lease_until, limit)
        items = [
            models.OutboxItem(
                id=r["id"],
                kind=models.OutboxKind(r["kind"]),
                approval_id=r["approval_id"],
                payload=r["payload"],
                attempts=r["attempts"],
                created_at=r["created_at"],
            )
            for r in rows
        ]
        return sorted(items, key=lambda i: i.id)

    async def _execute(self, query: str, *args: Any) -> None:
        async with self._pool.acquire() as conn:
            await conn.execute(Q[query], *args)

    async def outbox_done(self, item_id: int, now: datetime) -> None:
        await self._execute("outbox_done", item_id, now)

    async def outbox_retry(self, item_id: int, next_attempt_at: datetime, error: str) -> None:
        await self._execute("outbox_retry", item_id, next_attempt_at, error)

    async def outbox_release(self, item_id: int) -> None:
        await self._execute("outbox_release", item_id)

    async def outbox_dead(
        self,
        item_id: int,
        now: datetime,
        error: str,
        follow_up: Sequence[models.OutboxEntry] = (),
    ) -> None:
        async with self._transaction() as conn:
            await conn.execute(Q["outbox_dead"], item_id, now, error)
            await self._insert_outbox(conn, follow_up, now)

    async def redrive(
        self, approval_id: str, now: datetime, follow_up: Sequence[models.OutboxEntry] = ()
    ) -> int:
        async with self._transaction() as conn:
            rows = await conn.fetch(Q["outbox_redrive"], approval_id, now)
            if rows:
                await self._insert_outbox(conn, follow_up, now)
                await conn.execute("SELECT pg_notify($1, '')", OUTBOX_CHANNEL)
        return len(rows)

    async def outbox_next_due(self) -> datetime | None:
        async with self._pool.acquire() as conn:
            value: datetime | None = await conn.fetchval(Q["outbox_next_due"])
            return value

    async def outbox_counts(self) -> tuple[int, int]:
        async with self._pool.acquire() as conn:
            row = await conn.fetchrow(Q["outbox_counts"])
        assert row is not None
        return row["backlog"], row["dead"]

    async def wait_for_outbox(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
            # races its timeout, and a relay that ignores its cancel never stops
            async with asyncio.timeout(timeout):
                await self._outbox_event.wait()
        self._outbox_event.clear()

    async def wait_for_settlement(self, approval_id: str, timeout: float) -> None:
        event = asyncio.Event()
        self._settle_waiters[approval_id].add(event)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await event.wait()
        finally:
            waiters = self._settle_waiters[approval_id]
            waiters.discard(event)
            if not waiters:
                del self._settle_waiters[approval_id]

    async def close(self) -> None:
        if self._listener is not None:
            await self._listener.close()
        await self._pool.close()

    async def get_turn(self, key: models.TurnKey) -> models.TurnRecord | None:
        async with self._pool.acquire() as conn:
            return await self._turn_by_request(conn, key)

    async def record_turn(self, record: models.TurnRecord) -> tuple[models.TurnRecord, bool]:
        async with self._transaction() as conn:
            return await self._insert_turn(conn, record)

    async def decide_turn(
        self,
        key: models.TurnKey,
        counted: models.LeadWindow | None,
        decide: Callable[[int | None], models.TurnRecord | None],
    ) -> tuple[models.TurnRecord | None, bool]:
        async with self._transaction() as conn:
            if counted is not None:
                # held until commit: the next turn of this lead counts this one's verdict
                lock = json.dumps([counted.agent, counted.lead_key, counted.tool_name])
                await conn.execute(Q["lock_lead"], lock)
            stored = await self._turn_by_request(conn, key)
            if stored is not None:
                return stored, False
            count = None
            if counted is not None:
                count = await conn.fetchval(
                    Q["count_allowed_turns"],
                    counted.agent,
                    counted.lead_key,
                    counted.tool_name,
                    counted.since,
                )
            record = decide(count)
            if record is None:
                return None, False
            return await self._insert_turn(conn, record)

    async def _insert_turn(
        self, conn: Conn, record: models.TurnRecord
    ) -> tuple[models.TurnRecord, bool]:
        r = record
        inserted = await conn.fetchval(
            Q["insert_turn"],
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
        stored = await self._turn_by_request(conn, record.key)
        assert stored is not None
        return stored, False

    @staticmethod
    async def _turn_by_request(conn: Conn, key: models.TurnKey) -> models.TurnRecord | None:
        row = await conn.fetchrow(Q["turn_by_request"], key.agent, key.session_id, key.request_id)
        return _turn(row) if row is not None else None

    async def turns_for_session(self, agent: str, session_id: str) -> list[models.TurnRecord]:
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(Q["turns_for_session"], agent, session_id)
        return [_turn(r) for r in rows]

    async def audit_since(self, since: datetime) -> list[models.AuditEvent]:
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(Q["audit_since"], since)
        return [
            models.AuditEvent(
                kind=r["kind"], approval_id=r["approval_id"], at=r["at"], data=r["data"]
            )
            for r in rows
        ]

    async def _insert_timers(self, conn: Conn, timers: Sequence[models.TimerEntry]) -> None:
        if timers:
            await conn.executemany(
                Q["insert_timer"], [(t.approval_id, t.kind, t.step, t.due_at) for t in timers]
            )

    async def schedule_timer(self, timer: models.TimerEntry) -> None:
        async with self._pool.acquire() as conn:
            await self._insert_timers(conn, [timer])

    async def fire_due_timers(self, now: datetime, limit: int) -> list[models.TimerEntry]:
        async with self._transaction() as conn:
            rows = await conn.fetch(Q["claim_due_timers"], now, limit)
            if not rows:
                return []
            pending = {
                r["approval_id"]
                for r in await conn.fetch(Q["pending_among"], [r["approval_id"] for r in rows])
            }
            fired = [
                models.TimerEntry(
                    approval_id=r["approval_id"], kind=r["kind"], step=r["step"], due_at=r["due_at"]
                )
                for r in rows
                if r["approval_id"] in pending  # a settled approval's timers just lapse
            ]
            await self._insert_outbox(conn, models.timer_outbox(fired), now)
        return fired

    async def _by_ids(self, ids: list[str]) -> list[models.Approval]:
        """Approvals in the order of ``ids``, in one query (not one per id)."""
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(Q["get_approvals"], ids)
        found = {r["approval_id"]: _approval(r) for r in rows}
        return [found[i] for i in ids if i in found]

    async def list_pending(self, limit: int) -> list[models.Approval]:
        async with self._pool.acquire() as conn:
            ids = [r["approval_id"] for r in await conn.fetch(Q["pending_ids"], limit)]
        return await self._by_ids(ids)

    async def list_requested_by(
        self, slack_user_id: str, email: str | None, limit: int
    ) -> list[models.Approval]:
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(Q["requested_by"], slack_user_id, email, limit)
        return await self._by_ids([r["approval_id"] for r in rows])

    async def fired_timers(self, approval_id: str) -> list[tuple[models.TimerEntry, datetime]]:
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(Q["fired_timers"], approval_id)
        return [
            (
                models.TimerEntry(
                    approval_id=approval_id, kind=r["kind"], step=r["step"], due_at=r["due_at"]
                ),
                r["fired_at"],
            )
            for r in rows
        ]
