"""What a scenario did and what became of it: the agent's submissions (retried as an agent
would), the approvers' clicks, and at the end the count of lost decisions, double settlements,
duplicate callback bodies and deliveries, read from the receiver and the database."""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from bot.sandbox.standin import SlackUser
from tests.faults.table import Row
from tests.faults.world import FaultHarness, TimedReceiver
from tests.support.harness import CHANNEL

__all__ = ["Ledger"]

# how long an agent waits before trying a refused or unanswered submission again
_RECONNECT = 0.2
_MAX_RETRY_AFTER = 2.0


@dataclass
class Ledger:
    h: FaultHarness
    #: request id -> approval id, for every submission answered 2xx
    accepted: dict[str, str] = field(default_factory=dict)
    #: approvals an eligible approver's click was acknowledged (200) for, that must count
    must_count: set[str] = field(default_factory=set)
    started: float = field(default_factory=time.monotonic)
    fault_end: float | None = None
    cards_done_at: float | None = None
    unexpected: list[str] = field(default_factory=list)  # 5xx bodies, for the failure message
    lost_ids: list[str] = field(default_factory=list)
    lost_why: dict[str, str] = field(default_factory=dict)  # what the database says of each
    doubled_ids: list[str] = field(default_factory=list)

    @property
    def receiver(self) -> TimedReceiver:
        assert isinstance(self.h.receiver, TimedReceiver)
        return self.h.receiver

    # -- the agent ---------------------------------------------------------------------

    def body(self, request_id: str) -> dict[str, Any]:
        return self.h.request_body(
            request_id=request_id,
            session_id=f"faults-{request_id}",
            tool={
                "name": "transfer_money",
                "call_id": f"call-{request_id}",
                "arguments": {"amount": 100 + len(self.accepted)},
            },
        )

    async def submit(
        self, request_id: str, *, base_url: str | None = None, give_up_after: float = 90.0
    ) -> str:
        """Submit until a 2xx, as an agent does: a refused or cut request is sent again after
        a moment, a 503 after its Retry-After. Any other answer fails the scenario."""
        body = self.body(request_id)
        deadline = time.monotonic() + give_up_after
        while True:
            status, answer = await self.h.call(
                "POST", "/v1/approvals", json_body=body, base_url=base_url
            )
            if status in (200, 201):
                approval_id = str(answer["approval_id"])
                self.accepted[request_id] = approval_id
                return approval_id
            if status >= 500:
                self.unexpected.append(f"{request_id}: {status} {answer}")
            if 400 <= status < 500:
                raise AssertionError(f"submission {request_id}: {status} {answer}")
            # a 5xx is counted (h.answers) and sent again, as an agent would: the scenario
            # runs to its end, so its figures show it
            if time.monotonic() > deadline:
                raise AssertionError(f"submission {request_id} never accepted: {status} {answer}")
            wait = _RECONNECT
            if status == 503:
                retry_after = self.h.answers[-1].retry_after
                wait = min(_MAX_RETRY_AFTER, float(retry_after)) if retry_after else _RECONNECT
            await asyncio.sleep(wait)

    # -- the approvers -----------------------------------------------------------------

    async def click(
        self, user: SlackUser, approval_id: str, *, base_url: str | None = None, counts: bool
    ) -> int:
        """An Approve click; ``counts``: an acknowledged one must settle the approval."""
        status = await self.h.click(user, approval_id, base_url=base_url)
        if status == 200 and counts:
            self.must_count.add(approval_id)
        return status

    # -- waiting for the outcome ---------------------------------------------------------

    def delivered_keys(self) -> set[str]:
        return {r.idempotency_key for r in self.receiver.delivered}

    def all_delivered(self) -> bool:
        return set(self.accepted.values()) <= self.delivered_keys()

    def cards(self) -> set[str]:
        """The approvals whose card is in the reviewer channel."""
        posted = set()
        for message in self.h.standin.messages.get(CHANNEL, []):
            metadata = message.get("metadata") or {}
            approval_id = (metadata.get("event_payload") or {}).get("approval_id")
            if approval_id:
                posted.add(str(approval_id))
            else:  # a card without metadata still names its approval in its blocks
                text = str(message.get("blocks"))
                posted.update(a for a in self.accepted.values() if a in text)
        return posted

    def all_cards(self) -> bool:
        done = set(self.accepted.values()) <= self.cards()
        if done and self.cards_done_at is None:
            self.cards_done_at = time.monotonic()
        return done

    async def eventually(self, check: Any, *, timeout: float) -> bool:
        """Wait for ``check``; False (not a failure yet) when it did not come in time, so the
        scenario's figures are counted and printed either way."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not check():
            if loop.time() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    # -- the figures -------------------------------------------------------------------

    async def measure(self, scenario: str, *, notes: list[str] | None = None) -> Row:
        conn = await asyncpg.connect(self.h.database_url)
        try:
            statuses: dict[str, str] = {
                r[0]: r[1] for r in await conn.fetch("SELECT approval_id, status FROM approvals")
            }
            settlements: dict[str, int] = {
                r[0]: r[1]
                for r in await conn.fetch(
                    "SELECT approval_id, count(*) FROM settlements GROUP BY approval_id"
                )
            }
            # accepted clicks beyond the approvals the rule needs
            accepted_clicks: dict[str, int] = {
                r[0]: r[1]
                for r in await conn.fetch(
                    "SELECT a.approval_id, count(*) - max(p.required_approvals)"
                    " FROM attempts a JOIN approvals p USING (approval_id)"
                    " WHERE a.outcome = 'accepted' GROUP BY a.approval_id"
                )
            }
        finally:
            await conn.close()
        bodies: defaultdict[str, set[bytes]] = defaultdict(set)
        deliveries: defaultdict[str, int] = defaultdict(int)
        for received in self.receiver.delivered:
            bodies[received.idempotency_key].add(received.body)
            deliveries[received.idempotency_key] += 1
        approval_ids = set(self.accepted.values())
        settled = {a for a, s in statuses.items() if s != "pending"}
        lost = {a for a in approval_ids if a not in statuses}  # acked, never stored
        lost |= {a for a in approval_ids | settled if a not in bodies}  # never delivered
        lost |= {a for a in self.must_count if a not in settled}  # a click that never counted
        doubled = {a for a, n in settlements.items() if n > 1}
        doubled |= {a for a, n in accepted_clicks.items() if n > 0}
        doubled |= {k for k, b in bodies.items() if len(b) > 1}
        # a body that names another approval than its key, or another status than stored
        for key, seen in bodies.items():
            for raw in seen:
                decoded = json.loads(raw)
                if decoded["approval_id"] != key or decoded["status"] != statuses.get(key):
                    doubled.add(key)
        end = max(
            (t for t in (self.receiver.last_delivered_at(), self.cards_done_at) if t), default=None
        )
        recover = None
        if self.fault_end is not None and end is not None:
            recover = max(0.0, end - self.fault_end)
        row = Row(
            scenario=scenario,
            approvals=len(approval_ids),
            lost=len(lost),
            doubled=len(doubled),
            dup_keys=sum(n - 1 for n in deliveries.values()),
            server_errors=len(self.h.server_errors()),
            recover_s=recover,
            took_s=time.monotonic() - self.started,
            notes=list(notes or []),
        )
        row.notes.extend(self._answer_notes())
        self.lost_ids, self.doubled_ids = sorted(lost), sorted(doubled)
        self.lost_why = {
            a: (
                f"status {statuses.get(a, 'not stored')}, "
                f"clicked-must-count {a in self.must_count}, delivered {a in bodies}"
            )
            for a in self.lost_ids
        }
        return row

    def _answer_notes(self) -> list[str]:
        notes = []
        counts = self.h.statuses()
        tried_again = sum(1 for a in self.h.answers if a.status == 503 and a.retry_after)
        if tried_again:
            notes.append(f"{tried_again}× 503+Retry-After")
        refused = sum(1 for a in self.h.answers if a.failure == "refused")
        cut = sum(1 for a in self.h.answers if a.failure == "cut")
        if refused:
            notes.append(f"{refused} refused connections")
        if cut:
            notes.append(f"{cut} requests cut without an answer")
        five = {s: n for s, n in counts.items() if s >= 500}
        if five:
            notes.append("5xx by status: " + ", ".join(f"{s}×{n}" for s, n in sorted(five.items())))
        return notes

    def explain(self, row: Row) -> str:
        """The failure message of a scenario that is not clean."""
        logs = "\n".join(f"--- {b.name} ---\n{b.log_tail(3000)}" for b in self.h.bots)
        return (
            f"{row}\nlost: {self.lost_ids[:20]}\nwhy: {dict(list(self.lost_why.items())[:20])}\n"
            f"doubled: {self.doubled_ids[:20]}\n"
            f"server errors: {self.h.server_errors()[:10]}\n{self.unexpected[:5]}\n{logs}"
        )
