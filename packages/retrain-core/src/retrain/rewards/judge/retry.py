"""One call to a server, retried the judge's way: a `Retryable` failure (a timeout, a connection
that fails, 408/409/429/5xx) is tried again `retries` times after 0.5 s, 1 s, 2 s, ... (the
server's Retry-After, when it sends one, up to 30 s); a `Refused` one (any other failure the
call raises as a `JudgeError`) is not. The judge, the reward model's server and the
distillation teacher's server all go through it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from retrain.rewards.judge.errors import JudgeError, Retryable
from retrain.rewards.types import RewardFault

BACKOFF_S = 0.5
MAX_RETRY_AFTER_S = 30.0
T = TypeVar("T")


@dataclass
class Attempts(Generic[T]):
    """What the tries of one call gave: its value, or the fault of its last try."""

    value: T | None = None
    fault: RewardFault | None = None
    timed_out: bool = False
    requests: int = 0
    latencies: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.fault is None and self.requests > 0


def with_retries(call: Callable[[], T], retries: int, backoff_s: float = BACKOFF_S) -> Attempts[T]:
    out: Attempts[T] = Attempts()
    for attempt in range(retries + 1):
        t0 = time.perf_counter()
        out.requests += 1
        try:
            value = call()
        except Retryable as e:
            out.latencies.append(time.perf_counter() - t0)
            out.fault, out.timed_out = RewardFault(e.kind, str(e)), e.timeout
            if attempt < retries:
                time.sleep(min(e.retry_after, MAX_RETRY_AFTER_S) if e.retry_after is not None
                           else backoff_s * 2 ** attempt)
            continue
        except JudgeError as e:
            out.latencies.append(time.perf_counter() - t0)
            out.fault, out.timed_out = RewardFault(e.kind, str(e)), False
            return out
        out.latencies.append(time.perf_counter() - t0)
        out.value, out.fault, out.timed_out = value, None, False
        return out
    return out
