"""Concurrent calls merged into one: the repository's group reads and writes.

A :class:`Coalescer` wraps a function of many keys (one statement with ``= ANY($1)``). A call
with one key joins the calls made in the same turn of the event loop, or, while a batch is in
the database, the next batch, which starts the moment the one before it answers. Nothing waits
on a timer: alone, a call costs one extra turn of the loop; under load, one round trip serves
all the calls that arrived during the previous one (group commit, without a window to tune).

Each call still sees what it would have seen alone, and more: its batch is sent after the call
was made, so a read returns every write that had committed before it was asked for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["Coalescer"]

K = TypeVar("K")
R = TypeVar("R")


class Coalescer(Generic[K, R]):
    """``await coalescer(key)``: the result for ``key`` of ``run(keys)``, whose answers come in
    the order of its keys. A batch that raises raises in each of its callers."""

    def __init__(
        self, run: Callable[[list[K]], Awaitable[Sequence[R]]], *, max_batch: int = 256
    ) -> None:
        self._run = run
        self._max_batch = max_batch
        self._waiting: list[tuple[K, asyncio.Future[R]]] = []
        self._draining: asyncio.Task[None] | None = None

    async def __call__(self, key: K) -> R:
        answer: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        # read even when its caller gave up, so no error goes unretrieved
        answer.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._waiting.append((key, answer))
        if self._draining is None:
            self._draining = asyncio.create_task(self._drain())
        # shielded: a caller that gives up does not cancel the batch of the others
        return await asyncio.shield(answer)

    async def _drain(self) -> None:
        try:
            while self._waiting:
                batch = self._waiting[: self._max_batch]
                del self._waiting[: self._max_batch]
                await self._answer(batch)
        finally:
            self._draining = None

    async def _answer(self, batch: list[tuple[K, asyncio.Future[R]]]) -> None:
        try:
            results = await self._run([key for key, _ in batch])
        except asyncio.CancelledError:
            for _, answer in (*batch, *self._waiting):  # the loop is going away: so are they
                answer.cancel()
            self._waiting.clear()
            raise
        except Exception as exc:
            for _, answer in batch:
                if not answer.done():
                    answer.set_exception(exc)
            return
        if len(results) != len(batch):  # a bug in run: every caller hears of it
            error = RuntimeError(f"{len(results)} answers to a batch of {len(batch)}")
            for _, answer in batch:
                if not answer.done():
                    answer.set_exception(error)
            return
        for (_, answer), result in zip(batch, results, strict=True):
            if not answer.done():
                answer.set_result(result)
