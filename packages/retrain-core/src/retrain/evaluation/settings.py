"""`[eval]` resolved: when a run evaluates, and how evaluation samples.

Evaluation samples from its own random stream: `SamplingParams.seed` is derived from
`[training] seed` alone, and each sampling call of an evaluation adds its index to it, so
every evaluation of a run (and `retrain eval` with the same config) draws the same random
numbers, and the training sampler's stream is never touched.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from retrain.config.schema import TrainConfig
from retrain.types import SamplingParams


@dataclass(frozen=True)
class EvalSchedule:
    every: int
    before_train: bool
    at_end: bool

    @classmethod
    def of(cls, config: TrainConfig) -> EvalSchedule:
        e = config.eval
        return cls(e.every, e.before_train, e.every > 0 if e.at_end is None else e.at_end)

    @property
    def enabled(self) -> bool:
        return self.every > 0 or self.before_train or self.at_end

    def due(self, done: int, total: int) -> bool:
        """Whether to evaluate the policy after `done` of `total` RL steps."""
        if done == 0:
            return self.before_train
        if done == total and self.at_end:
            return True
        return self.every > 0 and done % self.every == 0


def stream_seed(seed: int) -> int:
    """The first seed of evaluation's stream (a 62-bit int, far from the training seeds)."""
    digest = hashlib.blake2b(f"retrain-eval\0{max(seed, 0)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 2


@dataclass(frozen=True)
class EvalPlan:
    """How to evaluate: `n` samples per problem (at least `k`) for pass@1 and pass@k,
    `per_call` problems per sampling call (as many sequences as one training step samples, at
    least one problem)."""

    schedule: EvalSchedule
    k: int
    params: SamplingParams
    pass_threshold: float
    per_call: int
    n: int

    @classmethod
    def of(cls, config: TrainConfig, *, k: int | None = None, n: int | None = None) -> EvalPlan:
        """`k` and `n` override `[eval] k` and `n` (`retrain eval --k/--n`); n defaults to k."""
        e, t = config.eval, config.training
        k = k or e.k
        n = n or e.n or k
        if n < k:
            raise ValueError(f"{n} samples per problem cannot estimate pass@{k} (n must be >= k)")
        temperature = e.temperature if e.temperature >= 0 else (0.0 if n == 1 else t.temperature)
        params = SamplingParams(max_tokens=e.max_tokens or t.max_tokens, temperature=temperature,
                                top_p=e.top_p or t.top_p, seed=stream_seed(t.seed))
        return cls(EvalSchedule.of(config), k, params, e.pass_threshold, max(1, t.batch_size * t.group_size // n), n)
