"""Concurrent calls merged into batches: each caller gets its own answer, a failing batch
fails only its callers, and a caller that gives up does not cancel the others."""

from __future__ import annotations

import asyncio

import pytest

from approvals.coalesce import Coalescer


class Recorder:
    def __init__(self, *, fail_on: str | None = None, delay: float = 0.0) -> None:
        self.batches: list[list[str]] = []
        self.fail_on = fail_on
        self.delay = delay

    async def __call__(self, keys: list[str]) -> list[str]:
        self.batches.append(list(keys))
        await asyncio.sleep(self.delay)
        if self.fail_on in keys:
            raise ValueError(f"refused {self.fail_on}")
        return [k.upper() for k in keys]


async def test_calls_in_one_turn_go_in_one_batch_and_each_gets_its_answer() -> None:
    run = Recorder()
    merged = Coalescer(run)
    answers = await asyncio.gather(*(merged(k) for k in ["a", "b", "c"]))
    assert answers == ["A", "B", "C"]
    assert run.batches == [["a", "b", "c"]]


async def test_calls_made_while_a_batch_runs_wait_for_the_next_one() -> None:
    run = Recorder(delay=0.05)
    merged = Coalescer(run)
    first = asyncio.create_task(merged("a"))
    await asyncio.sleep(0.01)  # the first batch is in flight
    later = await asyncio.gather(merged("b"), merged("c"))
    assert await first == "A"
    assert list(later) == ["B", "C"]
    assert run.batches == [["a"], ["b", "c"]]


async def test_a_batch_is_bounded() -> None:
    run = Recorder()
    merged = Coalescer(run, max_batch=2)
    assert await asyncio.gather(*(merged(k) for k in "abcde")) == list("ABCDE")
    assert run.batches == [["a", "b"], ["c", "d"], ["e"]]


async def test_a_failed_batch_fails_its_callers_only() -> None:
    run = Recorder(fail_on="b", delay=0.05)
    merged = Coalescer(run)
    doomed = [asyncio.create_task(merged(k)) for k in ["a", "b"]]
    await asyncio.sleep(0.01)
    after = asyncio.create_task(merged("c"))
    for task in doomed:
        with pytest.raises(ValueError, match="refused b"):
            await task
    assert await after == "C"


async def test_a_caller_that_gives_up_leaves_the_batch_to_the_others() -> None:
    run = Recorder(delay=0.05)
    merged = Coalescer(run)
    impatient = asyncio.create_task(merged("a"))
    patient = asyncio.create_task(merged("b"))
    await asyncio.sleep(0.01)
    impatient.cancel()
    assert await patient == "B"
    with pytest.raises(asyncio.CancelledError):
        await impatient
    assert run.batches == [["a", "b"]]


async def test_a_wrong_number_of_answers_is_an_error_not_a_misattribution() -> None:
    async def short(keys: list[str]) -> list[str]:
        return keys[:-1]

    merged: Coalescer[str, str] = Coalescer(short)
    results = await asyncio.gather(merged("a"), merged("b"), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
