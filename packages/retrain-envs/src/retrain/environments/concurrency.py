"""Bounded concurrency for environment calls, and the wall time they take.

`EnvClock` measures the time at least one environment call was in flight (`env/env_wall_s`):
with calls overlapping, it is the step's real wait on the environment, which the step's
`env/time_share` reads; `busy_s` sums every call's own time (`env/env_s`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


class EnvClock:
    def __init__(self) -> None:
        self.wall_s = 0.0
        self.busy_s = 0.0
        self._inflight = 0
        self._since = 0.0

    async def timed(self, call: Awaitable[T]) -> T:
        t0 = time.perf_counter()
        if self._inflight == 0:
            self._since = t0
        self._inflight += 1
        try:
            return await call
        finally:
            t1 = time.perf_counter()
            self.busy_s += t1 - t0
            self._inflight -= 1
            if self._inflight == 0:
                self.wall_s += t1 - self._since


async def bounded(items: Sequence[T], worker: Callable[[T], Awaitable[R]], limit: int) -> list[R]:
    """`worker` over `items` with at most `limit` running at once; results in input order."""
    gate = asyncio.Semaphore(max(1, limit))

    async def one(item: T) -> R:
        async with gate:
            return await worker(item)

    return list(await asyncio.gather(*(one(i) for i in items)))
