"""Memory handed back after a burst: when the relay's rests trim, and that glibc's trim runs."""

from __future__ import annotations

import platform

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
