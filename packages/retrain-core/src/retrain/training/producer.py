"""Where a step's rollouts come from: sampled now, or sampled while the previous step trained.

`max_async_level = 0`: publish the latest weights to the sampler, then sample and score.
`max_async_level = 1`: the batch of step k+1 is sampled (and scored) on a background thread
while step k trains, from the weights published at the start of step k — one update behind
the weights it trains. Per step:

1. take the batch in flight (or, with none — the first step, the first after a resume —
   sample one now from the weights the sampler serves);
2. publish the latest weights (the step's `sync` span, retrain.process.spans);
3. start sampling the next step's batch from them.

Rollouts carry the version of the weights that sampled them, max(step - level, 0) in RL
steps. The data cursor saved with a checkpoint is the one *before* the batch in flight, so a
resumed run samples that batch again — from the same weights, since a checkpoint keeps the
sampler's adapter — instead of losing it or training on it twice.

With dynamic sampling (retrain.training.dapo.dynamic) a batch is all the rounds that fill
it, sampled one after the other from the same weights; with level 1 the background thread
samples them all and is the only user of the data cursor until the main thread takes the
batch, so the cursor saved with a checkpoint is still the one before the batch in flight.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import msgspec

from retrain.backends.protocol import TrainBackend
from retrain.process.spans import span
from retrain.rollout.group import StepRollouts
from retrain.training.dapo.dynamic import DynamicSampling
from retrain.training.flow import Flow
from retrain.training.prompts import PromptCursor
from retrain.training.step import collect
from retrain.types import Example


class RolloutProducer:
    def __init__(self, backend: TrainBackend, flow: Flow, cursor: PromptCursor, *, level: int, max_steps: int,
                 dynamic: DynamicSampling | None = None) -> None:
        self.backend, self.flow, self.cursor = backend, flow, cursor
        self.level, self.max_steps, self.dynamic = level, max_steps, dynamic
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="retrain-rollouts") if level > 0 else None
        self._pending: Future[StepRollouts] | None = None
        self._pending_from = cursor.index

    @property
    def committed_index(self) -> int:
        """The data cursor of the steps trained so far (the batch in flight excluded)."""
        return self._pending_from if self._pending is not None else self.cursor.index

    def next(self, step: int, sizes: tuple[int, int]) -> StepRollouts:
        if self._pending is None:
            if self.level == 0:
                with span("sync"):
                    self.backend.checkpoint(f"step_{step}")
            rollouts = self._produce(sizes, max(step - self.level, 0))
        else:
            t0 = time.perf_counter()
            rollouts = self._pending.result()
            self._pending = None
            rollouts.producer_metrics.update(overlap_metrics(rollouts.sample_time_s + rollouts.score_time_s,
                                                             time.perf_counter() - t0))
        if self.level > 0:
            with span("sync"):
                self.backend.checkpoint(f"step_{step}")
            if step + 1 < self.max_steps and self._pool is not None:
                self._pending_from = self.cursor.index
                self._pending = self._pool.submit(self._produce, sizes, step)
        rollouts.producer_metrics["async/policy_lag"] = step - rollouts.policy_version
        return rollouts

    def _produce(self, sizes: tuple[int, int], version: int) -> StepRollouts:
        """A step's rollouts from the next prompts of the cursor: `batch_size` of them, and with
        dynamic sampling as many more as filling the batch takes."""
        batch_size, group_size = sizes

        def take(n: int) -> StepRollouts:
            start = self.cursor.index
            return self._collect(start, self.cursor.take(n), group_size, version)

        first = take(batch_size)
        if self.dynamic is None:
            return first
        rollouts = self.dynamic.fill(first, batch_size, take)
        if rollouts.fill is not None:
            rollouts.producer_metrics.update(rollouts.fill.metrics())
        return rollouts

    def _collect(self, start: int, batch: Sequence[tuple[Example, list[int]]], group_size: int,
                 version: int) -> StepRollouts:
        sampling = msgspec.structs.replace(self.flow.sampling, batch_id=start)
        rollouts = collect(self.backend, self.flow, batch, group_size=group_size, sampling=sampling)
        rollouts.policy_version = version
        return rollouts

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def overlap_metrics(produce_s: float, wait_s: float) -> dict[str, float]:
    """How much of producing a batch (sampling + scoring) the trainer did not wait for."""
    return {"async/produce_s": round(produce_s, 6), "async/wait_s": round(wait_s, 6),
            "async/overlap": round(max(0.0, 1.0 - wait_s / produce_s), 6) if produce_s > 0 else 0.0}
