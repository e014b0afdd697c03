"""Bounded reward execution: every item gets a deadline, and a reward that raises, returns a
non-finite value or overruns scores 0.0 and is counted — a reward never stops the run.

Three ways to run a batch:
- `run_threads`: daemon worker threads; an item past its deadline is abandoned and its
  worker replaced (a thread cannot be killed, so a reward stuck forever keeps one idle
  thread; CPU-bound rewards that may hang belong in a process pool);
- `run_async`: one event loop, `asyncio.wait_for` per item, bounded concurrency;
- `ProcessPool`: worker processes that build the reward from a `module:attr` target; a
  worker past its deadline is killed and replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import select
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from retrain.rewards.custom import as_float
from retrain.rewards.types import RewardBatch, RewardFault

Item = tuple[str, str]
MAX_FAILURE_NOTES = 5
STARTUP_TIMEOUT_S = 120.0


@dataclass
class Tally:
    """Outcomes of a batch, item by item."""

    n: int
    scores: list[float | None] = field(default_factory=list)
    errors: int = 0
    timeouts: int = 0
    failures: list[str] = field(default_factory=list)
    faults: dict[str, RewardFault] = field(default_factory=dict)  # the first of each kind

    def __post_init__(self) -> None:
        self.scores = [None] * self.n

    def done(self, i: int) -> bool:
        return self.scores[i] is not None

    def ok(self, i: int, value: Any) -> None:
        try:
            score = as_float(value)
        except Exception as exc:
            self.error(i, RewardFault(f"a result that is not a number ({type(value).__name__})",
                                      f"{value!r:.80} ({type(exc).__name__})"))
            return
        if not math.isfinite(score):
            self.error(i, RewardFault("a non-finite result", repr(score)))
            return
        self.scores[i] = score

    def error(self, i: int, fault: RewardFault) -> None:
        self.scores[i] = 0.0
        self.errors += 1
        self._note(f"item {i}: {fault.line()}")
        self.faults.setdefault(fault.kind, fault)

    def timeout(self, i: int, seconds: float, fault: RewardFault | None = None) -> None:
        self.scores[i] = 0.0
        self.timeouts += 1
        self._note(f"item {i}: timed out after {seconds:g}s")
        fault = fault or RewardFault("a timeout", f"no result within {seconds:g}s")
        self.faults.setdefault("timeout" if fault.kind == "a timeout" else fault.kind, fault)

    def _note(self, message: str) -> None:
        if len(self.failures) < MAX_FAILURE_NOTES:
            self.failures.append(message)

    def batch(self) -> RewardBatch:
        scores = np.array([0.0 if s is None else s for s in self.scores], dtype=np.float64)
        return RewardBatch(scores, self.errors, self.timeouts, list(self.failures), list(self.faults.values()))


def fault_of(exc: BaseException) -> RewardFault:
    """The fault an exception makes: its type and the innermost frame outside retrain's reward
    runner (the reward's own code, or a library it called)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(_OWN)]
    where = ""
    if frames:
        frame = frames[-1]
        where = f" at {_short(frame.filename)}:{frame.lineno} in {frame.name}"
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return RewardFault(f"{type(exc).__name__}{where}", str(exc), text)


_OWN = str(Path(__file__).parent)


def _short(filename: str) -> str:
    """A path relative to the working directory when it is under it."""
    with contextlib.suppress(ValueError):
        return str(Path(filename).resolve().relative_to(Path.cwd().resolve()))
    return filename


def run_inline(score: Callable[[str, str], Any], items: Sequence[Item]) -> RewardBatch:
    """For rewards that cannot hang (pure string checks): no threads, no deadline."""
    tally = Tally(len(items))
    for i, (response, reference) in enumerate(items):
        try:
            tally.ok(i, score(response, reference))
        except Exception as exc:
            tally.error(i, fault_of(exc))
    return tally.batch()


def run_threads(
    score: Callable[[str, str], Any], items: Sequence[Item], *, timeout_s: float, workers: int = 4
) -> RewardBatch:
    n = len(items)
    tally = Tally(n)
    cond = threading.Condition()
    started: dict[int, float] = {}
    cursor = [0]

    def worker() -> None:
        while True:
            with cond:
                if cursor[0] >= n:
                    return
                i = cursor[0]
                cursor[0] += 1
                started[i] = time.monotonic()
            fault: RewardFault | None = None
            value: Any = None
            try:
                value = score(*items[i])
            except BaseException as exc:
                fault = fault_of(exc)
            with cond:
                if tally.done(i):
                    pass
                elif fault is None:
                    tally.ok(i, value)
                else:
                    tally.error(i, fault)
                cond.notify_all()

    def spawn() -> None:
        threading.Thread(target=worker, daemon=True, name="retrain-reward").start()

    for _ in range(min(max(workers, 1), n)):
        spawn()
    with cond:
        while not all(tally.done(i) for i in range(n)):
            now = time.monotonic()
            nearest = now + 0.05
            for i, t0 in list(started.items()):
                if tally.done(i):
                    continue
                if now - t0 >= timeout_s:
                    tally.timeout(i, timeout_s)
                    spawn()  # the stuck worker is lost; keep the pool's width
                else:
                    nearest = min(nearest, t0 + timeout_s)
            cond.wait(timeout=max(nearest - time.monotonic(), 0.001))
    return tally.batch()


def run_async(
    score: Callable[[str, str], Any],
    items: Sequence[Item],
    *,
    timeout_s: float,
    concurrency: int = 16,
) -> RewardBatch:
    tally = Tally(len(items))

    async def main() -> None:
        sem = asyncio.Semaphore(max(concurrency, 1))

        async def one(i: int) -> None:
            async with sem:
                try:
                    value = await asyncio.wait_for(score(*items[i]), timeout_s)
                except TimeoutError:
                    tally.timeout(i, timeout_s)
                except Exception as exc:
                    tally.error(i, fault_of(exc))
                else:
                    tally.ok(i, value)

        await asyncio.gather(*(one(i) for i in range(len(items))))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(main())
    else:  # called from inside an event loop (a notebook): run ours on a helper thread
        helper = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
        helper.start()
        helper.join()
    return tally.batch()


# ---------------------------------------------------------------- worker processes


class _Worker:
    """One `python -m retrain.rewards.worker` process speaking JSON lines on its pipes.

    A plain subprocess rather than multiprocessing: spawn-style multiprocessing re-imports
    the parent's __main__, which breaks scripts without a `__main__` guard."""

    def __init__(self, target: str, kwargs: dict[str, Any]) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "retrain.rewards.worker", target, json.dumps(kwargs)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.fd = self.proc.stdout.fileno()
        self._buffer = b""
        hello = self.read_line(time.monotonic() + STARTUP_TIMEOUT_S)
        if hello is None or not hello.get("ready"):
            self.kill()
            detail = "no answer" if hello is None else hello.get("fail", hello)
            raise RuntimeError(f"reward worker for {target} failed to start: {detail}")

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def pending_line(self) -> bool:
        return b"\n" in self._buffer

    def read_available(self) -> bool:
        """Read what the pipe holds; False at end of file (the worker died)."""
        chunk = os.read(self.fd, 1 << 16)
        self._buffer += chunk
        return bool(chunk)

    def take_line(self) -> dict[str, Any] | None:
        if b"\n" not in self._buffer:
            return None
        line, _, self._buffer = self._buffer.partition(b"\n")
        out: dict[str, Any] = json.loads(line)
        return out

    def read_line(self, deadline: float) -> dict[str, Any] | None:
        while not self.pending_line():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.fd], [], [], remaining)[0]:
                return None
            if not self.read_available():
                return None
        return self.take_line()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


class ProcessPool:
    """Worker processes scoring with `load_target(target)(**kwargs)`; kept across batches.

    Started lazily (the first batch pays the import cost); a worker that overruns an item's
    deadline or dies is killed and replaced."""

    def __init__(
        self,
        target: str,
        kwargs: dict[str, Any] | None = None,
        *,
        workers: int = 2,
        timeout_s: float = 10.0,
    ) -> None:
        self.target, self.kwargs = target, dict(kwargs or {})
        self.workers, self.timeout_s = max(workers, 1), timeout_s
        self._pool: list[_Worker] = []

    def _spawn(self) -> _Worker:
        return _Worker(self.target, self.kwargs)

    def score_batch(self, items: Sequence[Item]) -> RewardBatch:
        tally = Tally(len(items))
        pending = list(range(len(items)))[::-1]
        while len(self._pool) < min(self.workers, max(len(items), 1)):
            self._pool.append(self._spawn())
        idle = list(self._pool)
        busy: dict[int, tuple[_Worker, int, float]] = {}
        while pending or busy:
            while pending and idle:
                w, i = idle.pop(), pending.pop()
                response, reference = items[i]
                w.send({"i": i, "response": response, "reference": reference})
                busy[w.fd] = (w, i, time.monotonic() + self.timeout_s)
            nearest = min(deadline for _, _, deadline in busy.values())
            ready, _, _ = select.select(list(busy), [], [], max(nearest - time.monotonic(), 0.0))
            for fd in ready:
                w, i, _ = busy[fd]
                if not w.read_available():
                    del busy[fd]
                    tally.error(i, RewardFault("a reward worker that died", f"exit status {w.proc.poll()}"))
                    idle.append(self._replace(w))
                    continue
                answer = w.take_line()
                if answer is None:
                    continue
                del busy[fd]
                if answer.get("ok"):
                    tally.ok(i, answer.get("value"))
                else:
                    tally.error(i, RewardFault(str(answer.get("kind") or "an error"), str(answer.get("error")),
                                               str(answer.get("traceback") or "")))
                idle.append(w)
            now = time.monotonic()
            for fd, (w, i, deadline) in list(busy.items()):
                if now >= deadline:
                    del busy[fd]
                    tally.timeout(i, self.timeout_s)
                    idle.append(self._replace(w))
        return tally.batch()

    def _replace(self, worker: _Worker) -> _Worker:
        worker.kill()
        fresh = self._spawn()
        self._pool[self._pool.index(worker)] = fresh
        return fresh

    def close(self) -> None:
        for w in self._pool:
            w.kill()
        self._pool = []
