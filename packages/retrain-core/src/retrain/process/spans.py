"""Wall-clock spans of a step's phases, named by where they open.

`span("train")` times its block. Opened inside another span it is named below it: the local
backend's `forward` inside the trainer's `train` is `train/forward`. The seconds of every block
are added to the collector of the current context (`Spans.collect()`, which a trainer opens for
one step); the step row takes them as `<path>_time_s` fields (`sample_time_s`, `train_time_s`,
`sync_time_s`, `train/forward_time_s`) beside the keys it already has, never over one. Without
a collector a span still times its block (`Span.seconds`) and records it nowhere, so a phase
timed for the row runs the same outside a trainer.

The collector is a context variable, so a thread sampling the next step's batch
(`max_async_level = 1`) records into no step's row: that batch's times travel with its
rollouts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class Span:
    """One timed block: its full path and, once it has closed, its seconds."""

    __slots__ = ("path", "seconds")

    def __init__(self, path: str) -> None:
        self.path = path
        self.seconds = 0.0


class Spans:
    """The spans of one step: seconds per path (a path opened twice adds up), and the time since
    the collector was made (the step's wall time)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.totals: dict[str, float] = {}

    def add(self, path: str, seconds: float) -> None:
        self.totals[path] = self.totals.get(path, 0.0) + seconds

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def seconds(self, path: str) -> float:
        """The seconds spent in `path`; 0.0 when it never opened (a step with no update has no `train`)."""
        return self.totals.get(path, 0.0)

    def fields(self) -> dict[str, float]:
        """`<path>_time_s` per path, rounded like the row's other timings."""
        return {f"{path}_time_s": round(seconds, 6) for path, seconds in self.totals.items()}

    @contextmanager
    def collect(self) -> Iterator[Spans]:
        """Record the spans this context opens into this collector while the block runs."""
        token = _CURRENT.set((self, ""))
        try:
            yield self
        finally:
            _CURRENT.reset(token)


class _Discard(Spans):
    """The collector of a context with none open: it keeps nothing."""

    def add(self, path: str, seconds: float) -> None:
        return None


_CURRENT: ContextVar[tuple[Spans, str]] = ContextVar("retrain_spans", default=(_Discard(), ""))


@contextmanager
def span(name: str, sync: Callable[[], None] | None = None) -> Iterator[Span]:
    """Time the block as `name`, below the span it opens in; its seconds go to the current
    collector when the block ends, also when it raises. `sync` waits for work the block
    queued (an accelerator's kernels run after the host call returns): called before the
    block and after it ends normally, so the span holds the block's device time rather than its launch time."""
    spans, parent = _CURRENT.get()
    timed = Span(f"{parent}/{name}" if parent else name)
    token = _CURRENT.set((spans, timed.path))
    if sync is not None:
        sync()
    t0 = time.perf_counter()
    try:
        yield timed
        if sync is not None:
            sync()
    finally:
        timed.seconds = time.perf_counter() - t0
        _CURRENT.reset(token)
        spans.add(timed.path, timed.seconds)
