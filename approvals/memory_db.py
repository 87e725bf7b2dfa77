"""An in-memory stand-in for PostgreSQL that answers the named queries of ``sql/queries.sql``.

For tests. Each query has one handler here, named like it, that does what its SQL does to plain
rows and returns rows shaped like its columns (what its ``SELECT`` or ``RETURNING`` gives, by the
same names). That is all: no rule of the domain and no model, which the repository derives and
builds from the rows for this fake and PostgreSQL alike. It imports no module of ours (an
import-linter contract forbids every module of ``approvals``, models included, and ``guards``),
so nothing of the domain can creep in; what it needs comes from the standard library.

Like PostgreSQL:

- a transaction commits whole or not at all: any exception (cancellation too) restores what it
  changed, and so does a failed statement whose error was caught: the statements after it raise
  :class:`TransactionAborted` and the transaction ends in a rollback, as PostgreSQL answers the
  COMMIT of an aborted transaction;
- the schema holds its keys and checks: a primary, unique or foreign key or a ``CHECK`` of the
  migrations that a statement would break raises :class:`ConstraintViolation`, named as
  PostgreSQL names the constraint (``NOT NULL`` is left to the models);
- notifications sent in a transaction are delivered when it commits;
- JSON columns hold copies made through JSON (a tuple comes back a list), and every read gets
  copies of its own: editing a row read never edits the table;
- timestamps come back in UTC, as ``timestamptz`` does, whatever offset they were written with
  (a naive one is taken as local time, as asyncpg takes it);
- ids are never given out twice, even by a transaction rolled back.

Unlike it, transactions run one at a time (one lock stands in for row locks, SKIP LOCKED and
advisory locks), and so do statements outside them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import json
import operator
import re
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = ["QUERIES", "ConstraintViolation", "MemoryDatabase", "TransactionAborted"]

Row = dict[str, Any]

# fmt: off
# the jsonb columns of every table (no column name means two things across tables)
_JSON = frozenset({
    "arguments", "requester", "context", "outsiders", "votes", "required_any_of",
    "argument_schemas", "decided_by", "payload", "evaluated", "page", "events",
})
# the columns each INSERT names, in the order of its parameters
_INSERTED = {
    "approvals": (
        "approval_id", "agent", "session_id", "request_id", "tool_name", "call_id", "arguments",
        "arguments_sha256", "requester", "summary", "context", "callback_url", "framework",
        "required_role", "required_approvals", "rule", "created_at", "expires_at",
        "policy_version", "fingerprint", "outsiders", "rule_why", "deny_reason_required",
        "required_any_of", "arguments_jcs", "argument_schemas", "valid_for", "report_within",
        "review_channel",
    ),
    "executions": ("approval_id", "claim_id", "idempotency_key", "claimed_at"),
    "settlements": (
        "approval_id", "status", "decided_by", "reason", "decided_at", "policy_version",
    ),
    "attempts": (
        "approval_id", "slack_user_id", "email", "name", "action", "outcome", "detail", "at",
    ),
    "outbox": ("approval_id", "kind", "payload", "created_at"),
    "turn_verdicts": (
        "agent", "session_id", "request_id", "channel", "lead_id", "tool_name", "call_id",
        "inputs_sha256", "policy_version", "verdict", "rule", "reason_code", "message",
        "evaluated", "approval_id", "at", "lead_key",
    ),
    "timers": ("approval_id", "kind", "step", "due_at", "page"),
}
# the columns of audit_since, each None where a row's table has no such column
_AUDIT_NULLS: dict[str, Any] = dict.fromkeys((
    "kind", "approval_id", "at", "slack_user_id", "email", "name", "action", "outcome", "detail",
    "status", "decided_by", "reason", "policy_version", "timer_kind", "step", "due_at",
))
_SHA256 = re.compile("[0-9a-f]{64}")
# The CHECKs of the migrations, under the names PostgreSQL gave them (<table>_<column>_check,
# or <table>_check, _check1… for one over several columns) and in their alphabetical order, the
# order PostgreSQL tests them in. A check fails only when false: NULL makes it unknown, a pass.
_CHECKS: dict[str, tuple[tuple[str, Callable[[Row], bool]], ...]] = {
    "approvals": (
        ("approvals_arguments_sha256_check",
         lambda r: r["arguments_sha256"] is None or bool(_SHA256.fullmatch(r["arguments_sha256"]))),
        ("approvals_check",
         lambda r: None in (r["expires_at"], r["created_at"]) or r["expires_at"] > r["created_at"]),
        ("approvals_check1", lambda r: (r["card_channel"] is None) == (r["card_ts"] is None)),
        ("approvals_required_approvals_check",
         lambda r: r["required_approvals"] is None or r["required_approvals"] >= 1),
        ("approvals_report_within_check",
         lambda r: r.get("report_within") is None or r["report_within"] > 0),
        ("approvals_status_check",
         lambda r: r["status"] in {None, "pending", "approved", "denied", "expired", "cancelled"}),
        ("approvals_valid_for_check", lambda r: r.get("valid_for") is None or r["valid_for"] > 0),
    ),
    "executions": (
        ("executions_check", lambda r: (r["outcome"] is None) == (r["reported_at"] is None)),
        ("executions_outcome_check", lambda r: r["outcome"] in {None, "ok", "error"}),
    ),
    "settlements": (
        ("settlements_status_check",
         lambda r: r["status"] in {None, "approved", "denied", "expired", "cancelled"}),
    ),
    "attempts": (
        ("attempts_action_check", lambda r: r["action"] in {None, "approve", "deny"}),
        ("attempts_outcome_check", lambda r: r["outcome"] in {
            None, "accepted", "self", "no_authority", "lookup_failed", "stale", "expired",
            "over_limit", "duplicate", "vote_dropped",
        }),
    ),
    "outbox": (
        ("outbox_check", lambda r: r["done_at"] is None or r["dead_at"] is None),
        ("outbox_kind_check", lambda r: r["kind"] in {
            None, "post_card", "update_card", "callback", "remind", "escalate", "page",
        }),
    ),
    "turn_verdicts": (
        ("turn_verdicts_check",
         lambda r: r["verdict"] is None
         or (r["verdict"] == "escalate") == (r["approval_id"] is not None)),
        ("turn_verdicts_inputs_sha256_check",
         lambda r: r["inputs_sha256"] is None or bool(_SHA256.fullmatch(r["inputs_sha256"]))),
        ("turn_verdicts_verdict_check",
         lambda r: r["verdict"] in {None, "allow", "refuse", "escalate"}),
    ),
    "audit_seals": (
        ("audit_seals_check",
         lambda r: r["to_xid"] > r["from_xid"]
         or (r["to_xid"] == r["from_xid"] and r["to_event"] is not None)),
        ("audit_seals_count_check", lambda r: r["count"] >= 1),
        ("audit_seals_events_sha256_check", lambda r: bool(_SHA256.fullmatch(r["events_sha256"]))),
        ("audit_seals_hash_check", lambda r: bool(_SHA256.fullmatch(r["hash"]))),
        ("audit_seals_prev_hash_check", lambda r: bool(_SHA256.fullmatch(r["prev_hash"]))),
        ("audit_seals_seq_check", lambda r: r["seq"] >= 1),
    ),
    "timers": (
        ("timers_kind_check", lambda r: r["kind"] in {None, "remind", "escalate"}),
        ("timers_page_check", lambda r: r["page"] is None or r["kind"] in {None, "escalate"}),
    ),
}
# Each table's foreign key to approvals (approval_id), by PostgreSQL's name for it. (The other
# one, turn_verdicts.duplicate_of, only a migration writes: this fake leaves it NULL.)
_REFERENCES_APPROVAL = {
    table: f"{table}_approval_id_fkey"
    for table in ("settlements", "attempts", "outbox", "timers", "turn_verdicts", "executions")
}
# the xid8 column each table fills with DEFAULT pg_current_xact_id() (migration 0017)
_XID_DEFAULTS = {
    "approvals": "created_xid",
    "attempts": "xid",
    "settlements": "xid",
    "turn_verdicts": "xid",
    "executions": "claimed_xid",
}
# the primary keys that the INSERT gives (the other tables' are ids from a sequence)
_PRIMARY_KEYS = {
    "approvals": "approval_id",
    "settlements": "approval_id",
    "executions": "approval_id",
}
# fmt: on


class ConstraintViolation(Exception):
    """A statement would break a key or check of the schema: what PostgreSQL refuses with an
    integrity error (asyncpg's ``UniqueViolationError``, ``ForeignKeyViolationError``,
    ``CheckViolationError``), with its message and, like asyncpg's, ``constraint_name``."""

    def __init__(self, message: str, constraint_name: str) -> None:
        super().__init__(message)
        self.constraint_name = constraint_name


class TransactionAborted(Exception):
    """A statement sent after one that failed, in the same transaction (PostgreSQL's "current
    transaction is aborted, commands ignored until end of transaction block")."""


def _json_copy(value: Any) -> Any:
    """A value written to a JSON column, as the column keeps it: a copy made through JSON."""
    return json.loads(json.dumps(value))


def _utc(value: Any) -> Any:
    """A parameter as PostgreSQL holds it: a timestamp in UTC (a timestamptz has no offset of
    its own to give back), anything else as it is."""
    return value.astimezone(UTC) if isinstance(value, datetime) else value


def _read(row: Row) -> Row:
    """A row for the caller: a copy, its JSON values too, as asyncpg decodes them afresh."""
    copy = dict(row)
    for column in _JSON.intersection(copy):
        copy[column] = _stored_json_copy(copy[column])
    return copy


def _stored_json_copy(value: Any) -> Any:
    """What :func:`_json_copy` makes of a stored JSON value, a few times faster (reads are
    most of the fake's work): what JSON made holds only dicts, lists and immutable scalars.
    One frame a level (``map``, not a comprehension), so it nests as deep as ``json`` does."""
    if type(value) is dict:
        return dict(zip(value, map(_stored_json_copy, value.values()), strict=True))
    if type(value) is list:
        return list(map(_stored_json_copy, value))
    return value


def _check(table: str, row: Row) -> None:
    """Raise for the first ``CHECK`` of ``table`` that ``row`` fails (new or updated)."""
    for name, holds in _CHECKS[table]:
        if not holds(row):
            raise ConstraintViolation(
                f'new row for relation "{table}" violates check constraint "{name}"', name
            )


def _row(table: str, values: Sequence[Any], **defaults: Any) -> Row:
    """A new row of ``table`` from an INSERT's parameters, with the columns' defaults; like
    PostgreSQL, its checks come first (before ON CONFLICT looks for the row's key)."""
    row = dict(zip(_INSERTED[table], values, strict=True))
    row = defaults | {k: _json_copy(v) if k in _JSON else v for k, v in row.items()}
    _check(table, row)
    return row


def _columns(row: Row, *names: str) -> Row:
    return {name: row[name] for name in names}


def _count_by(column: str, rows: Iterable[Row]) -> list[Row]:
    """``SELECT column, count(*) AS count … GROUP BY column``."""
    counts: defaultdict[Any, int] = defaultdict(int)
    for row in rows:
        counts[row[column]] += 1
    return [{column: value, "count": count} for value, count in counts.items()]


def _migrations_applied() -> dict[int, Row]:
    """``schema_migrations`` as ``migrate`` leaves it: the fake holds the schema of every
    migration in ``sql/migrations`` (named ``NNNN_name.sql``), so it has applied them all."""
    folder = Path(__file__).parent / "sql" / "migrations"
    found = (re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name) for entry in folder.iterdir())
    return {int(m[1]): {"version": int(m[1]), "name": m[2]} for m in found if m}


@dataclasses.dataclass
class _Tables:
    """The rows of each table by primary key (in insertion order, which is id order), and the
    unique keys that ON CONFLICT looks up."""

    approvals: dict[str, Row] = dataclasses.field(default_factory=dict)
    settlements: dict[str, Row] = dataclasses.field(default_factory=dict)
    executions: dict[str, Row] = dataclasses.field(default_factory=dict)
    attempts: dict[int, Row] = dataclasses.field(default_factory=dict)
    outbox: dict[int, Row] = dataclasses.field(default_factory=dict)
    timers: dict[int, Row] = dataclasses.field(default_factory=dict)
    turn_verdicts: dict[int, Row] = dataclasses.field(default_factory=dict)
    # named like their constraint or index
    approvals_request_key: dict[tuple[str, str, str], Row] = dataclasses.field(default_factory=dict)
    turn_verdicts_by_request: dict[tuple[str, str, str], Row] = dataclasses.field(
        default_factory=dict
    )
    timers_once: dict[tuple[str, str, int], Row] = dataclasses.field(default_factory=dict)
    audit_seals: dict[int, Row] = dataclasses.field(default_factory=dict)
    schema_migrations: dict[int, Row] = dataclasses.field(default_factory=_migrations_applied)


# the kind of audit event each table's audit_events_/audit_export_ query reads, by table
_CHAIN_KINDS = {
    "attempts": "attempt",
    "created": "created",
    "deliveries": "delivery",
    "claims": "execution",
    "outcomes": "outcome",
    "settlements": "settlement",
    "timers": "timer",
    "turns": "turn",
}


class _Queries:
    """One handler per query of ``sql/queries.sql``, named like it, taking its parameters."""

    def __init__(self) -> None:
        self.tables = _Tables()
        self._ids: defaultdict[str, itertools.count[int]] = defaultdict(lambda: itertools.count(1))
        # how to take back each change of the transaction under way, oldest first: every
        # change goes through _add or _set, so a rollback costs what the transaction did
        self.undo: list[Callable[[], object]] = []
        # the transaction's id, as pg_current_xact_id() gives it (migration 0017): one per
        # transaction, set by MemoryDatabase.transaction; transactions run one at a time here,
        # so every id below the current one has finished
        self.xid = 0
        # NOTIFYs a statement sent from inside its SQL, taken by its transaction (sent on commit)
        self.notifications: list[tuple[str, str]] = []

    def _where(self, table: str, **equal: Any) -> list[Row]:
        """The rows of ``table`` whose columns equal these values (a WHERE of ``=``s)."""
        rows: dict[Any, Row] = getattr(self.tables, table)
        columns = operator.itemgetter(*equal)
        wanted = columns(equal)
        return [r for r in rows.values() if columns(r) == wanted]

    def _add(self, table: str, key: Any, row: Row) -> Row:
        rows: dict[Any, Row] = getattr(self.tables, table)
        rows[key] = row
        self.undo.append(lambda: rows.pop(key))
        return row

    def _set(self, table: str, row: Row, **columns: Any) -> None:
        """An UPDATE of ``row``, a row of ``table``: its checks hold afterwards or it fails (and
        the failed transaction takes the change back with the rest)."""
        before = {name: row[name] for name in columns}
        row.update(columns)
        self.undo.append(lambda: row.update(before))
        _check(table, row)

    def _insert(self, table: str, row: Row) -> Row:
        """Add ``row`` to ``table`` under its primary key, which must be new, or under the next
        id of the table's sequence (never rolled back); then, as PostgreSQL checks foreign keys
        last, the approval it refers to must exist."""
        rows: dict[Any, Row] = getattr(self.tables, table)
        column = _PRIMARY_KEYS.get(table)
        if column is None:
            row = {"id": next(self._ids[table])} | row
            key = row["id"]
        elif (key := row[column]) in rows:
            name = f"{table}_pkey"
            raise ConstraintViolation(
                f'duplicate key value violates unique constraint "{name}"\n'
                f"DETAIL:  Key ({column})=({key}) already exists.",
                name,
            )
        if (xid_column := _XID_DEFAULTS.get(table)) is not None:
            row[xid_column] = self.xid  # the column's DEFAULT pg_current_xact_id()
        reference = _REFERENCES_APPROVAL.get(table)
        approval_id = row["approval_id"]
        if reference and approval_id is not None and approval_id not in self.tables.approvals:
            raise ConstraintViolation(
                f'insert or update on table "{table}" violates foreign key constraint '
                f'"{reference}"\nDETAIL:  Key (approval_id)=({approval_id}) is not present in '
                'table "approvals".',
                reference,
            )
        return self._add(table, key, row)

    # -- approvals and settlements ------------------------------------------------------------

    def insert_approval(self, *values: Any) -> list[Row]:
        row = _row("approvals", values, status="pending", card_channel=None, card_ts=None, votes=[])
        key = (row["agent"], row["session_id"], row["request_id"])
        if key in self.tables.approvals_request_key:
            return []  # ON CONFLICT ON CONSTRAINT approvals_request_key DO NOTHING
        self._insert("approvals", row)
        self._add("approvals_request_key", key, row)
        return [_columns(row, "approval_id")]

    def create_approval(self, *values: Any) -> list[Row]:
        """``insert_approval`` and, only when it inserted, the outbox rows and timers given as
        parallel arrays, and the two notifications (sent on commit)."""
        approval = values[:29]
        outbox = zip(*values[29:33], strict=True)
        timers = zip(*values[33:38], strict=True)
        outbox_channel, timers_channel, earliest = values[38:41]
        inserted = self.insert_approval(*approval)
        if not inserted:
            return []
        for approval_id, kind, payload, at in outbox:
            self.insert_outbox(approval_id, kind, json.loads(payload), _utc(at))
        for approval_id, kind, step, at, page in timers:
            page_json = None if page is None else json.loads(page)
            self.insert_paging_timer(approval_id, kind, step, _utc(at), page_json)
        self.notifications += [(outbox_channel, ""), (timers_channel, earliest)]
        return inserted

    def approval_id_by_request(self, agent: str, session_id: str, request_id: str) -> list[Row]:
        found = self.tables.approvals_request_key.get((agent, session_id, request_id))
        return [_columns(found, "approval_id")] if found else []

    def get_approvals(self, ids: Sequence[str]) -> list[Row]:
        found = (self.tables.approvals.get(i) for i in dict.fromkeys(ids))  # = ANY(ids)
        return [self._with_joins(a) for a in found if a is not None]

    def _with_joins(self, approval: Row) -> Row:
        """The approval with the columns ``get_approvals`` joins to it: its settlement's, its
        execution claim's, those of its latest callback and of its latest post_card outbox row
        (the SQL's LEFT JOIN LATERAL … ORDER BY id DESC LIMIT 1), and the earliest ``fired_at``
        of its escalate timers (``min()``); each ``None`` where the join finds no row. Then the
        services its timers may page and those a page trigger row was queued for (``ARRAY(SELECT
        DISTINCT … ORDER BY …)``: sorted, empty when none). What they mean (delivery status,
        card state) the repository derives."""
        approval_id = approval["approval_id"]
        settled = self.tables.settlements.get(approval_id, {})
        callbacks = self._where("outbox", approval_id=approval_id, kind="callback")
        callback = callbacks[-1] if callbacks else {}
        posts = self._where("outbox", approval_id=approval_id, kind="post_card")
        post = posts[-1] if posts else {}
        escalations = [
            t["fired_at"]
            for t in self._where("timers", approval_id=approval_id, kind="escalate")
            if t["fired_at"] is not None
        ]
        execution = self.tables.executions.get(approval_id, {})
        timers = self._where("timers", approval_id=approval_id)
        pages = {s for t in timers if t["page"] is not None for s in t["page"].get("services", [])}
        paged = {
            o["payload"].get("service")
            for o in self._where("outbox", approval_id=approval_id, kind="page")
            if o["payload"].get("event") == "trigger"
        }
        return approval | {
            "settled_status": settled.get("status"),
            "decided_by": settled.get("decided_by"),
            "reason": settled.get("reason"),
            "decided_at": settled.get("decided_at"),
            "execution_claim_id": execution.get("claim_id"),
            "execution_key": execution.get("idempotency_key"),
            "execution_claimed_at": execution.get("claimed_at"),
            "execution_outcome": execution.get("outcome"),
            "execution_detail": execution.get("detail"),
            "execution_reported_at": execution.get("reported_at"),
            "delivery_attempts": callback.get("attempts"),
            "delivery_last_error": callback.get("last_error"),
            "delivery_done_at": callback.get("done_at"),
            "delivery_dead_at": callback.get("dead_at"),
            "has_callback": bool(callback),
            "card_last_error": post.get("last_error"),
            "card_dead_at": post.get("dead_at"),
            "escalated_at": min(escalations, default=None),
            "pages": sorted(pages),
            "paged": sorted(paged),
        }

    def settle_if_pending(
        self, approval_id: str, status: str, votes: list[Any], votes_before: Sequence[str]
    ) -> list[Row]:
        row = self.tables.approvals.get(approval_id)
        if row is None or row["status"] != "pending":
            return []
        if [v["slack_user_id"] for v in row["votes"]] != list(votes_before):
            return []
        self._set("approvals", row, status=status, votes=_json_copy(votes))
        return [_columns(row, "approval_id")]

    def settle_many_if_pending(self, *values: Any) -> list[Row]:
        """``settle_if_pending`` for each approval of the parallel arrays (votes and voters as
        JSON text), in approval_id order, and for each that moved its ``insert_settlement``,
        its outbox rows (in the order given) and the notifications (sent on commit). Nothing
        is skipped as locked: transactions run one at a time here."""
        ids, statuses, votes, voters, reasons, decided_at, versions = values[:7]
        outbox = zip(*values[7:11], strict=True)
        outbox_channel, settled_channel = values[11:13]
        moved: list[str] = []
        for i in sorted(range(len(ids)), key=ids.__getitem__):
            approval_id, status, decided_by = ids[i], statuses[i], json.loads(votes[i])
            if not self.settle_if_pending(approval_id, status, decided_by, json.loads(voters[i])):
                continue
            self.insert_settlement(
                approval_id, status, decided_by, reasons[i], _utc(decided_at[i]), versions[i]
            )
            moved.append(approval_id)
        for approval_id, kind, payload, at in outbox:
            if approval_id in moved:
                self.insert_outbox(approval_id, kind, json.loads(payload), _utc(at))
        self.notifications += [
            note for i in moved for note in ((outbox_channel, ""), (settled_channel, i))
        ]
        return [{"approval_id": i} for i in moved]

    def claim_execution(
        self, approval_id: str, claim_id: str, key: str, now: datetime
    ) -> list[Row]:
        approval = self.tables.approvals.get(approval_id)
        settled = self.tables.settlements.get(approval_id)
        if approval is None or settled is None or settled["status"] != "approved":
            return []
        if now > settled["decided_at"] + timedelta(seconds=approval["valid_for"]):
            return []
        if approval_id in self.tables.executions:  # ON CONFLICT (approval_id) DO NOTHING
            return []
        if any(e["claim_id"] == claim_id for e in self.tables.executions.values()):
            name = "executions_claim_id_key"  # UNIQUE (claim_id), not the conflict target
            raise ConstraintViolation(
                f'duplicate key value violates unique constraint "{name}"\n'
                f"DETAIL:  Key (claim_id)=({claim_id}) already exists.",
                name,
            )
        row = _row(
            "executions",
            (approval_id, claim_id, key, now),
            outcome=None,
            detail=None,
            reported_at=None,
            reported_xid=None,
        )
        self._insert("executions", row)
        return [{"claim_id": claim_id}]

    def report_outcome(
        self, approval_id: str, key: str, outcome: str, detail: str, now: datetime
    ) -> list[Row]:
        row = self.tables.executions.get(approval_id)
        if row is None or row["idempotency_key"] != key or row["outcome"] is not None:
            return []
        self._set(
            "executions",
            row,
            outcome=outcome,
            detail=detail,
            reported_at=now,
            reported_xid=self.xid,
        )
        return [_columns(row, "claim_id")]

    def insert_settlement(self, *values: Any) -> list[Row]:
        row = _row("settlements", values)
        self._insert("settlements", row)
        return []

    def set_cards(
        self, ids: Sequence[str], channels: Sequence[str], tss: Sequence[str]
    ) -> list[Row]:
        for approval_id, channel, ts in zip(ids, channels, tss, strict=True):
            row = self.tables.approvals.get(approval_id)
            if row is not None:
                self._set("approvals", row, card_channel=channel, card_ts=ts)
        return []

    def pending_expired(self, now: datetime, limit: int) -> list[Row]:
        due = [a for a in self._pending() if a["expires_at"] <= now]
        due.sort(key=lambda a: a["expires_at"])
        return [_columns(a, "approval_id") for a in due[:limit]]

    def timers_next_due(self) -> list[Row]:
        unfired = (t["due_at"] for t in self.tables.timers.values() if t["fired_at"] is None)
        expiring = (a["expires_at"] for a in self._pending())
        return [{"due": min([*unfired, *expiring], default=None)}]

    def approvals_among(self, ids: Sequence[str]) -> list[Row]:
        found = (self.tables.approvals.get(i) for i in dict.fromkeys(ids))
        return [_columns(a, "approval_id") for a in found if a is not None]

    def pending_among(self, ids: Sequence[str]) -> list[Row]:
        return [_columns(a, "approval_id") for a in self._pending() if a["approval_id"] in ids]

    def pending_ids(self, limit: int) -> list[Row]:
        return self._newest(self._pending(), limit)

    def requested_by(self, slack_user_id: str, email: str | None, limit: int) -> list[Row]:
        mine = [
            a
            for a in self.tables.approvals.values()
            if a["requester"].get("slack_user_id") == slack_user_id
            or (email is not None and a["requester"].get("email") == email)
        ]
        return self._newest(mine, limit)

    def pending_by_rule(self) -> list[Row]:
        return _count_by("rule", self._pending())

    def _pending(self) -> list[Row]:
        return self._where("approvals", status="pending")

    @staticmethod
    def _newest(approvals: list[Row], limit: int) -> list[Row]:
        newest = sorted(approvals, key=lambda a: a["created_at"], reverse=True)
        return [_columns(a, "approval_id") for a in newest[:limit]]

    # -- attempts -----------------------------------------------------------------------------

    def insert_attempt(self, *values: Any) -> list[Row]:
        self._insert("attempts", _row("attempts", values))
        return []

    def list_attempts(self, approval_id: str) -> list[Row]:
        return self._where("attempts", approval_id=approval_id)

    # -- outbox -------------------------------------------------------------------------------

    def insert_outbox(self, *values: Any) -> list[Row]:
        row = _row(
            "outbox",
            values,
            attempts=0,
            claims=0,
            claim_no=0,
            locked_until=None,
            done_at=None,
            dead_at=None,
            done_xid=None,
        )
        self._insert("outbox", row | {"next_attempt_at": row["created_at"], "last_error": None})
        return []

    def _open_outbox(self) -> list[Row]:
        return [
            o for o in self.tables.outbox.values() if o["done_at"] is None and o["dead_at"] is None
        ]

    def claim_outbox(
        self, now: datetime, lease_until: datetime, limit: int, held: list[int]
    ) -> list[Row]:
        due = [
            o
            for o in self._open_outbox()
            if o["next_attempt_at"] <= now
            and (o["locked_until"] is None or o["locked_until"] <= now)
            and o["id"] not in held
        ]
        due.sort(key=lambda o: (o["next_attempt_at"], o["id"]))
        for row in due[:limit]:
            self._set(
                "outbox",
                row,
                locked_until=lease_until,
                claims=row["claims"] + 1,
                claim_no=row["claim_no"] + 1,
            )
        columns = (
            "id",
            "kind",
            "approval_id",
            "payload",
            "attempts",
            "claims",
            "claim_no",
            "created_at",
        )
        return [_columns(o, *columns) for o in due[:limit]]

    def outbox_done(self, ids: Sequence[int], times: Sequence[datetime]) -> list[Row]:
        rows: list[Row] = []
        for item_id, now in zip(ids, times, strict=True):
            rows += self._outbox_done(item_id, _utc(now))
        return rows

    def _outbox_done(self, item_id: int, now: datetime) -> list[Row]:
        row = self.tables.outbox.get(item_id)
        if row is None or row["done_at"] is not None:
            return []
        self._set(
            "outbox",
            row,
            done_at=now,
            dead_at=None,
            locked_until=None,
            last_error=None,
            attempts=row["attempts"] + 1,
            done_xid=self.xid,
        )
        approval = self.tables.approvals.get(row["approval_id"], {})
        settlement = self.tables.settlements.get(row["approval_id"], {})
        return [
            {
                "id": item_id,
                "kind": row["kind"],
                "submitted_at": approval.get("created_at"),
                "settled_at": settlement.get("decided_at"),
            }
        ]

    def _claimed(self, item_id: int, claim_no: int, *, open_only: bool = True) -> Row | None:
        """The row while ``claim_no`` is still its latest claim and it is not done (nor dead,
        with ``open_only``): the fence of every outcome but done."""
        row = self.tables.outbox.get(item_id)
        if row is None or row["claim_no"] != claim_no or row["done_at"] is not None:
            return None
        if open_only and row["dead_at"] is not None:
            return None
        return row

    def outbox_retry(
        self, item_id: int, claim_no: int, next_attempt_at: datetime, error: str
    ) -> list[Row]:
        row = self._claimed(item_id, claim_no)
        if row is not None:
            self._set(
                "outbox",
                row,
                next_attempt_at=next_attempt_at,
                last_error=error,
                locked_until=None,
                attempts=row["attempts"] + 1,
            )
        return []

    def outbox_later(self, item_id: int, claim_no: int, next_attempt_at: datetime) -> list[Row]:
        row = self._claimed(item_id, claim_no)
        if row is not None:
            self._set(
                "outbox",
                row,
                next_attempt_at=next_attempt_at,
                locked_until=None,
                claims=row["claims"] - 1,
            )
        return []

    def outbox_renew(
        self, item_ids: list[int], claim_nos: list[int], lease_until: datetime
    ) -> list[Row]:
        for item_id, claim in zip(item_ids, claim_nos, strict=True):
            row = self._claimed(item_id, claim, open_only=False)
            if row is not None and row["locked_until"] is not None:
                self._set("outbox", row, locked_until=lease_until)
        return []

    def outbox_release(self, item_id: int, claim_no: int) -> list[Row]:
        row = self._claimed(item_id, claim_no, open_only=False)
        if row is not None:
            self._set("outbox", row, locked_until=None)
        return []

    def outbox_unclaim(self, item_id: int, claim_no: int) -> list[Row]:
        row = self._claimed(item_id, claim_no, open_only=False)
        if row is not None:
            self._set("outbox", row, locked_until=None, claims=row["claims"] - 1)
        return []

    def outbox_dead(self, item_id: int, claim_no: int, now: datetime, error: str) -> list[Row]:
        row = self._claimed(item_id, claim_no)
        if row is None:
            return []
        self._set(
            "outbox",
            row,
            dead_at=now,
            last_error=error,
            locked_until=None,
            attempts=row["attempts"] + 1,
        )
        return [{"id": item_id}]

    def outbox_redrive(self, approval_id: str, now: datetime) -> list[Row]:
        dead = [o for o in self._where("outbox", approval_id=approval_id) if o["dead_at"]]
        for row in dead:
            self._set(
                "outbox", row, dead_at=None, next_attempt_at=now, locked_until=None, created_at=now
            )
        return [_columns(o, "id") for o in dead]

    def outbox_next_due(self) -> list[Row]:
        due = (
            max(o["next_attempt_at"], o["locked_until"] or o["next_attempt_at"])
            for o in self._open_outbox()
        )
        return [{"min": min(due, default=None)}]

    def outbox_counts(self) -> list[Row]:
        dead = sum(1 for o in self.tables.outbox.values() if o["dead_at"] is not None)
        return [{"backlog": len(self._open_outbox()), "dead": dead}]

    def outbox_backlog(self, now: datetime) -> list[Row]:
        by_kind: defaultdict[str, list[Row]] = defaultdict(list)
        for row in self._open_outbox():
            if row["created_at"] <= now:
                by_kind[row["kind"]].append(row)
        return [
            {"kind": kind, "count": len(rows), "oldest": min(r["created_at"] for r in rows)}
            for kind, rows in by_kind.items()
        ]

    def outbox_dead_by_kind(self) -> list[Row]:
        dead = [o for o in self.tables.outbox.values() if o["dead_at"] is not None]
        return _count_by("kind", dead)

    # -- the schema ---------------------------------------------------------------------------

    def database_time(self) -> list[Row]:
        return [{"now": datetime.now(UTC)}]

    def schema_version(self) -> list[Row]:
        return [{"version": max(self.tables.schema_migrations, default=None)}]

    # -- lead-facing turns --------------------------------------------------------------------

    def insert_turn(self, *values: Any) -> list[Row]:
        row = _row("turn_verdicts", values)
        key = (row["agent"], row["session_id"], row["request_id"])
        if key in self.tables.turn_verdicts_by_request:
            return []  # ON CONFLICT (agent, session_id, request_id) ... DO NOTHING
        row = self._insert("turn_verdicts", row | {"duplicate_of": None})
        self._add("turn_verdicts_by_request", key, row)
        return [_columns(row, "id")]

    def turn_by_request(self, agent: str, session_id: str, request_id: str) -> list[Row]:
        found = self.tables.turn_verdicts_by_request.get((agent, session_id, request_id))
        return [found] if found else []

    def turns_for_session(self, agent: str, session_id: str) -> list[Row]:
        return self._where("turn_verdicts", agent=agent, session_id=session_id)

    def lock_lead(self, _key: str) -> list[Row]:
        return []  # transactions run one at a time here: the lead is serialised already

    def count_allowed_turns(
        self, agent: str, lead_key: str, tool_name: str, since: datetime
    ) -> list[Row]:
        allowed = self._where(
            "turn_verdicts", agent=agent, lead_key=lead_key, tool_name=tool_name, verdict="allow"
        )
        return [{"count": sum(1 for t in allowed if t["at"] > since)}]

    # -- the audit ----------------------------------------------------------------------------

    def audit_since(self, since: datetime) -> list[Row]:
        rows = [
            _AUDIT_NULLS | {"kind": "attempt"} | a
            for a in self.tables.attempts.values()
            if a["at"] >= since
        ]
        rows += [
            _AUDIT_NULLS | {"kind": "settlement", "at": s["decided_at"]} | s
            for s in self.tables.settlements.values()
            if s["decided_at"] >= since
        ]
        rows += [
            _AUDIT_NULLS
            | {"kind": "timer", "at": t["fired_at"], "timer_kind": t["kind"]}
            | _columns(t, "approval_id", "step", "due_at")
            for t in self.tables.timers.values()
            if t["fired_at"] is not None and t["fired_at"] >= since
        ]
        rows.sort(key=lambda r: (r["at"], r["kind"]))
        return [_columns(r, *_AUDIT_NULLS) for r in rows]

    def audit_created_since(self, since: datetime) -> list[Row]:
        columns = (
            "approval_id", "agent", "session_id", "request_id", "tool_name", "call_id",
            "arguments_sha256", "requester", "rule", "required_role", "policy_version",
            "expires_at",
        )  # fmt: skip
        return [
            _columns(a, *columns) | {"at": a["created_at"]}
            for a in self.tables.approvals.values()
            if a["created_at"] >= since
        ]

    def audit_claims_since(self, since: datetime) -> list[Row]:
        return [
            _columns(e, "approval_id", "claim_id") | {"at": e["claimed_at"]}
            for e in self.tables.executions.values()
            if e["claimed_at"] >= since
        ]

    def audit_outcomes_since(self, since: datetime) -> list[Row]:
        return [
            _columns(e, "approval_id", "claim_id", "outcome", "detail") | {"at": e["reported_at"]}
            for e in self.tables.executions.values()
            if e["reported_at"] is not None and e["reported_at"] >= since
        ]

    def audit_turns_since(self, since: datetime) -> list[Row]:
        columns = (
            "approval_id", "at", "agent", "session_id", "request_id", "tool_name", "call_id",
            "verdict", "rule", "reason_code", "inputs_sha256", "policy_version",
        )  # fmt: skip
        return [
            _columns(t, *columns) for t in self.tables.turn_verdicts.values() if t["at"] >= since
        ]

    # -- the audit chain (migration 0017) -----------------------------------------------------

    # Each kind's events: audit_events_* reads those at (from_xid, from_key) <= (xid, key) <
    # (to_xid, to_key) in that order, at most `limit`; audit_export_* those at or after a time.
    # A row from before 0017 (no xid) is at transaction 0.

    def _chain_rows(self, kind: str) -> list[tuple[Row, datetime, Any, Any]]:
        """Every event of ``kind``: its row as the query selects it, its time, xid and key."""
        t = self.tables
        columns: tuple[str, ...]
        match kind:
            case "attempt":
                columns = (
                    "approval_id", "at", "xid", "slack_user_id", "email", "name", "action",
                    "outcome", "detail",
                )  # fmt: skip
                return [
                    (_columns(a, *columns) | {"key": str(a["id"])}, a["at"], a.get("xid"), a["id"])
                    for a in t.attempts.values()
                ]
            case "created":
                columns = (
                    "approval_id", "agent", "session_id", "request_id", "tool_name", "call_id",
                    "arguments_sha256", "requester", "rule", "required_role", "policy_version",
                    "expires_at",
                )  # fmt: skip
                return [
                    (
                        _columns(a, *columns)
                        | {"key": a["approval_id"], "at": a["created_at"]}
                        | {"xid": a.get("created_xid")},
                        a["created_at"],
                        a.get("created_xid"),
                        a["approval_id"],
                    )
                    for a in t.approvals.values()
                ]
            case "delivery":
                return [
                    (
                        _columns(o, "approval_id", "attempts")
                        | {"key": str(o["id"]), "at": o["done_at"], "xid": o["done_xid"]}
                        | {"delivered": o["kind"]},
                        o["done_at"],
                        o["done_xid"],
                        o["id"],
                    )
                    for o in t.outbox.values()
                    if o["kind"] in ("callback", "post_card") and o["done_at"] is not None
                ]
            case "execution":
                return [
                    (
                        _columns(e, "approval_id", "claim_id")
                        | {"key": e["approval_id"], "at": e["claimed_at"]}
                        | {"xid": e.get("claimed_xid")},
                        e["claimed_at"],
                        e.get("claimed_xid"),
                        e["approval_id"],
                    )
                    for e in t.executions.values()
                ]
            case "outcome":
                return [
                    (
                        _columns(e, "approval_id", "claim_id", "outcome", "detail")
                        | {"key": e["approval_id"], "at": e["reported_at"]}
                        | {"xid": e["reported_xid"]},
                        e["reported_at"],
                        e["reported_xid"],
                        e["approval_id"],
                    )
                    for e in t.executions.values()
                    if e["reported_at"] is not None
                ]
            case "settlement":
                columns = ("approval_id", "xid", "status", "decided_by", "reason", "policy_version")
                return [
                    (
                        _columns(s, *columns) | {"key": s["approval_id"], "at": s["decided_at"]},
                        s["decided_at"],
                        s.get("xid"),
                        s["approval_id"],
                    )
                    for s in t.settlements.values()
                ]
            case "timer":
                return [
                    (
                        _columns(r, "approval_id", "step", "due_at")
                        | {"key": str(r["id"]), "at": r["fired_at"], "xid": r["fired_xid"]}
                        | {"timer_kind": r["kind"]},
                        r["fired_at"],
                        r["fired_xid"],
                        r["id"],
                    )
                    for r in t.timers.values()
                    if r["fired_at"] is not None
                ]
            case "turn":
                columns = (
                    "approval_id", "at", "xid", "agent", "session_id", "request_id", "tool_name",
                    "call_id", "verdict", "rule", "reason_code", "inputs_sha256", "policy_version",
                )  # fmt: skip
                return [
                    (_columns(r, *columns) | {"key": str(r["id"])}, r["at"], r.get("xid"), r["id"])
                    for r in t.turn_verdicts.values()
                ]
        raise ValueError(f"no audit event of kind {kind!r}")

    def _chain_range(
        self, kind: str, from_xid: int, from_key: Any, to_xid: int, to_key: Any, limit: int
    ) -> list[Row]:
        found = [
            (position, row)
            for row, _, xid, key in self._chain_rows(kind)
            if (from_xid, from_key) <= (position := (xid or 0, key)) < (to_xid, to_key)
        ]
        return [row for _, row in sorted(found, key=lambda f: f[0])[:limit]]

    def _chain_since(self, kind: str, since: datetime) -> list[Row]:
        return [row for row, at, _, _ in self._chain_rows(kind) if at >= since]

    def _handler(self, query: str) -> Callable[..., list[Row]]:
        """The method answering ``query``. The audit chain's per-table reads (audit_events_*,
        a range of the chain's order; audit_export_*, events at or after a time) are one
        method each, told the kind of event its table holds."""
        for prefix, read in (
            ("audit_events_", self._chain_range),
            ("audit_export_", self._chain_since),
        ):
            if query.startswith(prefix):
                return functools.partial(read, _CHAIN_KINDS[query.removeprefix(prefix)])
        method: Callable[..., list[Row]] = getattr(self, query)
        return method

    def audit_seal_lock(self) -> list[Row]:
        return [{"locked": True}]  # transactions run one at a time here: nobody else seals

    def audit_seal_lock_wait(self) -> list[Row]:
        return [{"locked": True}]

    def audit_last_seal(self) -> list[Row]:
        if not self.tables.audit_seals:
            return []
        last = self.tables.audit_seals[max(self.tables.audit_seals)]
        return [_columns(last, "seq", "to_xid", "to_event", "hash", "sealed_at")]

    def audit_seal_horizon(self) -> list[Row]:
        return [{"horizon": self.xid}]  # every transaction before this one has finished

    def insert_audit_seal(self, *values: Any) -> list[Row]:
        names = (
            "seq", "from_xid", "to_xid", "sealed_at", "count", "events_sha256", "prev_hash",
            "hash", "events", "from_event", "to_event",
        )  # fmt: skip
        row = {k: _json_copy(v) if k in _JSON else v for k, v in zip(names, values, strict=True)}
        _check("audit_seals", row)
        if row["seq"] in self.tables.audit_seals:
            return []  # ON CONFLICT (seq) DO NOTHING
        self._add("audit_seals", row["seq"], row)
        return [_columns(row, "seq")]

    def audit_seal_sizes(self, after: int, limit: int) -> list[Row]:
        seqs = sorted(s for s in self.tables.audit_seals if s > after)[:limit]
        return [_columns(self.tables.audit_seals[s], "seq", "count") for s in seqs]

    def audit_seals_after(self, after: int, limit: int) -> list[Row]:
        seqs = sorted(s for s in self.tables.audit_seals if s > after)[:limit]
        return [self.tables.audit_seals[s] for s in seqs]

    def audit_seals_for_export(self, lowest_xid: int, since: datetime) -> list[Row]:
        seals = self.tables.audit_seals
        firsts = [
            min((s for s in seals if seals[s]["to_xid"] >= lowest_xid), default=None),
            min((s for s in seals if seals[s]["sealed_at"] >= since), default=None),
        ]
        first = min((s for s in firsts if s is not None), default=None)  # least() skips NULL
        return [] if first is None else [seals[s] for s in sorted(seals) if s >= first]

    # -- timers -------------------------------------------------------------------------------

    def insert_timer(self, *values: Any) -> list[Row]:
        return self.insert_paging_timer(*values, None)

    def insert_paging_timer(self, *values: Any) -> list[Row]:
        row = _row("timers", values)
        key = (row["approval_id"], row["kind"], row["step"])
        if key not in self.tables.timers_once:  # else ON CONFLICT timers_once DO NOTHING
            row |= {"fired_at": None, "fired_xid": None}
            self._add("timers_once", key, self._insert("timers", row))
        return []

    def claim_due_timers(self, now: datetime, limit: int) -> list[Row]:
        due = [
            t for t in self.tables.timers.values() if t["fired_at"] is None and t["due_at"] <= now
        ]
        due.sort(key=lambda t: (t["due_at"], t["id"]))
        for row in due[:limit]:
            self._set("timers", row, fired_at=now, fired_xid=self.xid)
        columns = ("id", "approval_id", "kind", "step", "due_at", "page")
        return [_columns(t, *columns) for t in due[:limit]]

    def fired_timers(self, approval_id: str) -> list[Row]:
        fired = [t for t in self._where("timers", approval_id=approval_id) if t["fired_at"]]
        fired.sort(key=lambda t: (t["fired_at"], t["id"]))
        return [_columns(t, "kind", "step", "due_at", "fired_at") for t in fired]


QUERIES = frozenset(name for name in vars(_Queries) if not name.startswith("_")) | {
    prefix + table for prefix in ("audit_events_", "audit_export_") for table in _CHAIN_KINDS
}
"""The query names this fake answers (a test holds them equal to those of queries.sql)."""


class _Connection:
    """Statements of one transaction (the lock is held); notifications wait for its commit."""

    def __init__(self, queries: _Queries) -> None:
        self._queries = queries
        self.notifications: list[tuple[str, str]] = []
        self.failed = False  # a statement raised: the transaction can only roll back now

    def _refuse_if_failed(self) -> None:
        if self.failed:
            raise TransactionAborted(
                "current transaction is aborted, commands ignored until end of transaction block"
            )

    def _run(self, query: str, args: Sequence[Any]) -> list[Row]:
        if query not in QUERIES:
            raise NotImplementedError(f"the in-memory database has no handler for query {query!r}")
        self._refuse_if_failed()
        handler = self._queries._handler(query)
        try:
            rows = handler(*map(_utc, args))
        except Exception:
            self.failed = True
            raise
        finally:
            sent, self._queries.notifications = self._queries.notifications, []
        self.notifications += sent
        return [_read(row) for row in rows]

    async def fetch(self, query: str, *args: Any) -> list[Row]:
        return self._run(query, args)

    async def fetchrow(self, query: str, *args: Any) -> Row | None:
        rows = self._run(query, args)
        return rows[0] if rows else None

    async def fetchval(self, query: str, *args: Any) -> Any:
        row = await self.fetchrow(query, *args)
        return next(iter(row.values())) if row else None

    async def execute(self, query: str, *args: Any) -> None:
        self._run(query, args)

    async def executemany(self, query: str, args: Iterable[Sequence[Any]]) -> None:
        for one in args:
            self._run(query, one)

    async def notify(self, channel: str, payload: str = "") -> None:
        self._refuse_if_failed()  # a NOTIFY is a statement too
        self.notifications.append((channel, payload))


class MemoryDatabase:
    """The fake :class:`~approvals.db.Database`; every statement runs as a transaction."""

    def __init__(self) -> None:
        self._queries = _Queries()
        self._lock = asyncio.Lock()
        self._xids = itertools.count(3)  # transaction ids; 0 to 2 are special in PostgreSQL
        self._listeners: defaultdict[str, list[Callable[[str], None]]] = defaultdict(list)

    @contextlib.asynccontextmanager
    async def snapshot(self) -> AsyncIterator[_Connection]:
        """Reads under the lock: nothing commits between them."""
        async with self._lock:
            yield _Connection(self._queries)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[_Connection]:
        async with self._lock:
            self._queries.xid = next(self._xids)
            conn = _Connection(self._queries)
            committed = False
            try:
                yield conn
                # a failed statement dooms the transaction even if its error was caught:
                # PostgreSQL answers the COMMIT of an aborted transaction with a ROLLBACK
                committed = not conn.failed
            finally:
                if not committed:
                    for undo in reversed(self._queries.undo):
                        undo()
                self._queries.undo.clear()
        if not committed:
            return
        for channel, payload in conn.notifications:
            for listener in list(self._listeners[channel]):
                listener(payload)

    async def fetch(self, query: str, *args: Any) -> list[Row]:
        async with self.transaction() as conn:
            return await conn.fetch(query, *args)

    async def fetchrow(self, query: str, *args: Any) -> Row | None:
        async with self.transaction() as conn:
            return await conn.fetchrow(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        async with self.transaction() as conn:
            return await conn.fetchval(query, *args)

    async def execute(self, query: str, *args: Any) -> None:
        async with self.transaction() as conn:
            await conn.execute(query, *args)

    async def executemany(self, query: str, args: Iterable[Sequence[Any]]) -> None:
        async with self.transaction() as conn:
            await conn.executemany(query, args)

    async def notify(self, channel: str, payload: str = "") -> None:
        async with self.transaction() as conn:
            await conn.notify(channel, payload)

    async def listen(self, channel: str, listener: Callable[[str], None]) -> None:
        self._listeners[channel].append(listener)

    async def close(self) -> None:
        return None
