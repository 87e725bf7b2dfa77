"""Memory handed back after a burst: when the relay's rests trim, and that glibc's trim runs."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from bot import memory


def test_a_rest_trims_once_a_burst_of_rows_was_delivered_since_the_last_trim() -> None:
    trims: list[None] = []
    after = memory.AfterBursts(lambda: trims.append(None), burst_rows=100)
    after(60)
    assert trims == []  # a trickle: not yet
    after(40)
    assert len(trims) == 1
    after(99)
    assert len(trims) == 1  # counted afresh from the last trim
    after(1)
    assert len(trims) == 2


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_glibc_trim_is_found_and_runs() -> None:
    trim = memory.malloc_trim()
    assert trim is not None
    junk = [bytes(4096) for _ in range(10_000)]  # ~40 MB through malloc, then freed
    del junk
    trim()


# run in a process of its own: freezing the test worker would keep its objects for good
_FREEZE = """
import gc, weakref
from bot import memory

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)

kept = Node()
before = cycle()  # garbage made before the freeze: collected, not frozen
frozen = memory.freeze_startup()
assert before() is None, "garbage of the start was frozen"
assert frozen > 10_000, frozen  # the modules imported, at least
assert gc.is_tracked(kept) and frozen == gc.get_freeze_count()
after = cycle()  # garbage made after: the collector still finds it
gc.collect()
assert after() is None, "a cycle made after the freeze was not collected"
print("ok", frozen)
"""


def test_the_start_is_frozen_and_later_garbage_still_collected() -> None:
    done = subprocess.run(  # noqa: S603 (this interpreter, a fixed script)
        [sys.executable, "-c", _FREEZE], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok ")
