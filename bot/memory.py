"""Memory handed back to the system once a burst of work is over.

CPython frees what a burst allocated, but glibc's allocator keeps the freed pages in its heaps
for the next allocation, so a process that took in a burst keeps that burst's size (its high
water mark) long after. ``malloc_trim(0)`` gives the free pages back. It walks the heaps (a few
milliseconds on a large one, and the pages it gives back are faulted in again by the next
burst) and so runs only when the relay, having delivered many rows since the last time, has
had nothing to do for a poll interval: after a burst, not between two bursts close together
nor between the cards of a trickle.
Elsewhere than glibc (musl, macOS) there is nothing to call and nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
from collections.abc import Callable

__all__ = ["AfterBursts", "freeze_startup", "malloc_trim"]

log = logging.getLogger(__name__)

# rows delivered since the last trim that make a rest worth a trim
BURST_ROWS = 1000


def malloc_trim() -> Callable[[], None] | None:
    """glibc's ``malloc_trim(0)``, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int

    def trim_all() -> None:
        trim(0)  # 1 when memory was released, 0 when there was none: either is fine

    return trim_all


class AfterBursts:
    """The relay's ``on_rest``: told how many rows it delivered before each rest, it trims
    once :data:`BURST_ROWS` were delivered since the last trim."""

    def __init__(self, trim: Callable[[], None], burst_rows: int = BURST_ROWS) -> None:
        self._trim = trim
        self._burst_rows = burst_rows
        self._delivered = 0

    def __call__(self, delivered: int) -> None:
        self._delivered += delivered
        if self._delivered < self._burst_rows:
            return
        self._delivered = 0
        self._trim()
        log.debug("freed memory handed back after a burst", extra={"action": "memory"})


def freeze_startup() -> int:
    """Move every object alive once the bot serves to the collector's permanent generation;
    returns how many.

    What starting built (modules, the application, pydantic's validators, the clients: over
    100 000 objects) lives as long as the process, yet each full collection walked all of it:
    under load one came every second or so and held the event loop 50-160 ms (measured in the
    growth bench), which every click, long-poll and timer in flight waited out. Frozen, they
    are never walked again (a full collection after: 5-15 ms); what is allocated afterwards is
    collected as before. Garbage is collected first, so none is kept; an object of the start
    that later becomes part of an unreachable cycle stays allocated (the start's size at most).
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
