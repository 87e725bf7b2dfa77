"""Pacing of Slack writes: a token bucket per (kind of call, channel), so the relay stays
under Slack's rate limits instead of hitting them.

Slack allows about one ``chat.postMessage`` a second per channel (short bursts tolerated) and
Tier-3 rates for ``chat.update``; a 429 says how long to stay away (``Retry-After``). Each bucket
is a GCRA (the virtual-scheduling form of a token bucket): it hands out *slots*, times at which a
call may go, one ``1 / rate`` apart once its burst is spent.

A slot is held by a key (the outbox row's id) until the key uses it: a row told to come back
later (``errors.NotYet``) finds its own slot again, so rows of a backlog go in the order they
asked, and asking again never pushes a row back nor takes a second slot. A slot missed by far
(its row came back late, or never) lapses and the key asks afresh.

A row making several calls (an escalation posts to the on-call channel and in the card's
thread) waits for the latest of its slots; its earlier slots are kept for it meanwhile, or two
busy channels could each lapse the other's slot for ever. Two calls to one channel take two
slots.

Pure: the clock is passed in (``time.monotonic`` in production), nothing sleeps here. One
pacer per process: replicas pace on their own (Slack's limit is the workspace's, so several
replicas posting to one channel share it; lower the rates accordingly).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Call", "Pacer", "Rate"]


class Call(StrEnum):
    """The kinds of Slack call paced apart (each has its own limit per channel)."""

    POST = "post"  # chat.postMessage: cards, reminders, escalations, thread notes
    UPDATE = "update"  # chat.update: a card showing its outcome


@dataclass(frozen=True)
class Rate:
    """``per_second`` calls once the first ``burst`` (sent at once) are spent."""

    per_second: float
    burst: int = 1

    def __post_init__(self) -> None:
        if not self.per_second > 0 or self.burst < 1:
            raise ValueError(f"a rate needs per_second > 0 and burst >= 1, not {self}")


# How long a missed slot may be kept for a row waiting on another bucket (a row never waits in
# memory for longer than part of its short lease; past it, it asks afresh).
_KEPT_AT_MOST = 120.0


class _Bucket:
    """One channel's slots for one kind of call."""

    def __init__(self, rate: Rate) -> None:
        self._interval = 1.0 / rate.per_second
        # how far ahead of the theoretical arrival time a slot may be (the burst)
        self._tolerance = (rate.burst - 1) * self._interval
        # a slot missed by more than this lapses (late by a burst, or at least one interval)
        self._grace = max(self._tolerance, self._interval)
        self._tat = -math.inf  # theoretical arrival time of the next slot
        self._paused_until = -math.inf
        self._slots: dict[Hashable, float] = {}

    def slot(self, key: Hashable, now: float, *, kept_until: float | None = None) -> float:
        """The time ``key`` may call: the slot it holds, else a new one. ``kept_until``: the
        key was told to wait until then for another bucket, so its slot here, even missed, is
        kept for it if it came back in time."""
        held = self._slots.get(key)
        kept = kept_until is not None and now <= kept_until + self._grace
        if held is not None and held >= self._paused_until and (held >= now - self._grace or kept):
            return held
        self._prune(now)
        at = max(now, self._tat - self._tolerance)
        self._tat = max(self._tat, at) + self._interval
        self._slots[key] = at
        return at

    def release(self, key: Hashable) -> None:
        self._slots.pop(key, None)

    def pause(self, until: float) -> None:
        """No slot before ``until``, and no burst right after it (Slack just said stop)."""
        self._paused_until = max(self._paused_until, until)
        self._tat = max(self._tat, until + self._tolerance)

    def _prune(self, now: float) -> None:
        # the lapsed slots of rows that never came back (shut down, claimed elsewhere); one
        # kept for a row waiting on another bucket goes too once it is far behind
        lapsed = [k for k, at in self._slots.items() if at < now - self._grace - _KEPT_AT_MOST]
        for k in lapsed:
            del self._slots[k]


class Pacer:
    """Slots for Slack calls, per (kind of call, channel)."""

    def __init__(self, rates: Mapping[Call, Rate], clock: Callable[[], float]) -> None:
        self._rates = dict(rates)
        self._clock = clock
        self._buckets: dict[tuple[Call, str], _Bucket] = {}
        self._told: dict[Hashable, float] = {}  # when a key making several calls may go

    def _bucket(self, call: Call, channel: str) -> _Bucket:
        key = (call, channel)
        if key not in self._buckets:
            self._buckets[key] = _Bucket(self._rates[call])
        return self._buckets[key]

    def _slots(
        self, key: Hashable, calls: Iterable[tuple[Call, str]]
    ) -> list[tuple[_Bucket, Hashable]]:
        """Each call's bucket, and the key its slot is held under there: the second call to
        one bucket holds a second slot."""
        seen: Counter[tuple[Call, str]] = Counter()
        slots: list[tuple[_Bucket, Hashable]] = []
        for call in calls:
            nth = seen[call]
            seen[call] += 1
            slots.append((self._bucket(*call), key if nth == 0 else (key, nth)))
        return slots

    def wait(self, key: Hashable, calls: Iterable[tuple[Call, str]]) -> float:
        """Seconds until ``key`` may make all of ``calls`` (0 when it may now). Holds a slot
        in each bucket for ``key``: asking again returns the same times, later nearer."""
        now = self._clock()
        slots = self._slots(key, calls)
        told = self._told.get(key) if len(slots) > 1 else None
        at = max((b.slot(k, now, kept_until=told) for b, k in slots), default=now)
        if len(slots) > 1:
            self._forget_told(now)
            self._told[key] = at
        return max(0.0, at - now)

    def use(self, key: Hashable, calls: Iterable[tuple[Call, str]]) -> None:
        """``key`` makes its calls now: its slots are spent."""
        for bucket, held_as in self._slots(key, calls):
            bucket.release(held_as)
        self._told.pop(key, None)

    def pause(self, call: Call, channel: str, seconds: float) -> None:
        """Slack answered 429 with ``Retry-After: seconds``: the whole channel waits (for this
        kind of call), whichever row asked; rows holding earlier slots ask again."""
        self._bucket(call, channel).pause(self._clock() + seconds)

    def _forget_told(self, now: float) -> None:
        if len(self._told) > _TOLD_PRUNE_AT:
            for key in [k for k, at in self._told.items() if at < now - _KEPT_AT_MOST]:
                del self._told[key]


# rows that never came back leave their "told" time behind; swept once there are this many
_TOLD_PRUNE_AT = 1000
