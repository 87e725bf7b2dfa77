"""Who used the CPU during a run, from /proc (Linux; elsewhere every figure is None).

The run's processes are grouped: ``server`` (this process: the bot or the baseline),
``postgres`` (the postmaster of the bench's database and its children), ``standin`` (the Slack
stand-in's process), ``loadgen`` (every other child of this process: the load generators and
the agent receiver). ``foreign`` is
the rest of the machine's busy time: other people's work on a shared, noisy machine. ``steal`` is
time the hypervisor gave to other guests.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import asyncpg

__all__ = ["CpuMeter", "CpuUse", "postmaster_of"]

GROUPS = ("server", "postgres", "standin", "loadgen")


def _tick() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return 100.0


TICK = _tick()


def _stat(pid: int | str) -> tuple[str, int, float] | None:
    """(comm, ppid, CPU seconds) of a process, or None if it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    close = text.rindex(")")
    comm = text[text.index("(") + 1 : close]
    fields = text[close + 2 :].split()
    # fields[0] is field 3 of proc(5): state; ppid is field 4, utime 14, stime 15
    return comm, int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


def _system() -> tuple[float, float] | None:
    """(busy, steal) CPU seconds of the whole machine since boot."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            first = f.readline().split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in first[1:9])
    return (user + nice + system + irq + softirq) / TICK, steal / TICK


async def postmaster_of(dsn: str) -> int | None:
    """The PostgreSQL postmaster's pid, if it runs on this machine (else None)."""
    conn = await asyncpg.connect(dsn)
    try:
        backend: int = await conn.fetchval("SELECT pg_backend_pid()")
        stat = _stat(backend)  # while the backend lives: its parent is the postmaster
    finally:
        await conn.close()
    return stat[1] if stat is not None and stat[0] == "postgres" else None


@dataclass(frozen=True)
class CpuUse:
    """CPU seconds used between two snapshots, per group, and the wall seconds between them."""

    wall: float
    groups: dict[str, float | None]
    foreign: float | None
    steal: float | None

    def per_request_us(self, group: str, count: int) -> float | None:
        value = self.groups.get(group)
        return None if value is None else value / count * 1e6

    def cores(self, value: float | None) -> float | None:
        """Average number of cores ``value`` CPU seconds kept busy over the wall time."""
        return None if value is None or self.wall <= 0 else value / self.wall


@dataclass(frozen=True)
class _Snapshot:
    wall: float
    groups: dict[str, float | None]
    system: tuple[float, float] | None


class CpuMeter:
    def __init__(self, postmaster: int | None, standin: int | None) -> None:
        self._postmaster = postmaster
        self._standin = standin
        self._me = os.getpid()
        self._readable = os.path.exists("/proc/self/stat")

    def snapshot(self) -> _Snapshot:
        wall = time.monotonic()
        if not self._readable:
            return _Snapshot(wall, dict.fromkeys(GROUPS), None)
        totals = dict.fromkeys(GROUPS, 0.0)
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            stat = _stat(pid)
            if stat is None:
                continue
            _comm, ppid, seconds = stat
            if pid == self._me:
                totals["server"] += seconds
            elif self._postmaster is not None and self._postmaster in (pid, ppid):
                totals["postgres"] += seconds
            elif pid == self._standin:
                totals["standin"] += seconds
            elif ppid == self._me:
                totals["loadgen"] += seconds
        groups: dict[str, float | None] = dict(totals)
        if self._postmaster is None:
            groups["postgres"] = None
        return _Snapshot(wall, groups, _system())

    @staticmethod
    def used(before: _Snapshot, after: _Snapshot) -> CpuUse:
        groups: dict[str, float | None] = {}
        for name in GROUPS:
            b, a = before.groups.get(name), after.groups.get(name)
            groups[name] = None if a is None or b is None else max(0.0, a - b)
        foreign = steal = None
        if before.system is not None and after.system is not None:
            busy = after.system[0] - before.system[0]
            steal = after.system[1] - before.system[1]
            ours = sum(v for v in groups.values() if v is not None)
            foreign = max(0.0, busy - ours)
        return CpuUse(after.wall - before.wall, groups, foreign, steal)
