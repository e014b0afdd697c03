"""Remote calls with a deadline, bounded retries, the shared throttle and per-kind timing.

The SDK already resends an HTTP request that failed with a connection error, a 429 or a 5xx;
it waits without limit for a future's result. Here every wait has a deadline
(`call_timeout_s`), and an idempotent call (sample, save, load, create) is submitted again
after a timeout, a 429 or a 5xx, at most `max_retries` times with doubling backoff.
`forward_backward` and `optim_step` are never resent: a resent gradient that the service had
in fact applied would count twice. When the retries run out the call raises `TinkerError`,
the step stops, and the run's last checkpoint stays as it was.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from retrain.backends.tinker.runtime import Secret, Service, TinkerError, describe_failure
from retrain.backends.tinker.throttle import Throttle

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})


def retryable(sdk: Any, exc: BaseException) -> bool:
    if isinstance(exc, TimeoutError | concurrent.futures.TimeoutError | sdk.APIConnectionError):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status in RETRYABLE_STATUS or status >= 500)


class Remote:
    def __init__(self, sdk: Any, svc: Service, throttle: Throttle, *, timeout_s: float, retries: int,
                 backoff_s: float) -> None:
        self.sdk, self.service, self.throttle = sdk, svc, throttle
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self.seconds: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)

    @property
    def secret(self) -> Secret:
        return self.service.key

    def call(self, kind: str, submit: Callable[[], Any]) -> Any:
        """Submit an idempotent call and wait for its result, retrying within bounds."""
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                return self.wait(kind, submit())
            except TinkerError as exc:
                cause = exc.__cause__
                if cause is None or not retryable(self.sdk, cause) or attempt == self.retries:
                    raise
                self.counts["retries"] += 1
                time.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def wait(self, kind: str, future: Any) -> Any:
        """The result of a submitted call (an SDK future, or the value itself), timed under
        `kind`; a failure or a missed deadline becomes TinkerError (its cause kept)."""
        t0 = time.perf_counter()
        try:
            with self.throttle.slot():
                result = future.result(timeout=self.timeout_s) if hasattr(future, "result") else future
        except (TimeoutError, concurrent.futures.TimeoutError) as exc:
            raise TinkerError(f"{kind} got no answer from {self.service.where} within "
                              f"{self.timeout_s:g} s ([backend.options] call_timeout_s)") from exc
        except Exception as exc:
            raise TinkerError(f"{kind} failed at {self.service.where}: {describe_failure(exc, self.secret)}") from exc
        finally:
            self.seconds[kind] += time.perf_counter() - t0
            self.counts[kind] += 1
        return result

    @contextlib.contextmanager
    def unrecorded(self) -> Iterator[None]:
        """Calls made inside leave the step's timings and counts as they were (evaluation)."""
        seconds, counts, waited = dict(self.seconds), dict(self.counts), self.throttle.waited_s
        try:
            yield
        finally:
            self.seconds.clear()
            self.seconds.update(seconds)
            self.counts.clear()
            self.counts.update(counts)
            self.throttle.waited_s = waited

    def metrics(self) -> dict[str, float | int]:
        """`tinker/<call>_s` wall seconds and the step's retries, since the previous call."""
        out: dict[str, float | int] = {f"tinker/{k}_s": round(v, 6) for k, v in sorted(self.seconds.items())}
        out["tinker/calls"] = sum(v for k, v in self.counts.items() if k != "retries")
        out["tinker/retries"] = self.counts.get("retries", 0)
        out["tinker/throttle_wait_s"] = round(self.throttle.waited_s, 6)
        self.seconds.clear()
        self.counts.clear()
        self.throttle.waited_s = 0.0
        return out

