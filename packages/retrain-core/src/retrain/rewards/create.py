"""`build_reward(config)`: the configured reward as a bounded batch scorer.

| type | runs | per-item deadline |
|---|---|---|
| match, strict | inline (pure string checks) | none needed |
| math | worker processes (math-verify needs a main thread; hung parses are killed) | killed |
| custom, dotted paths, entry points | daemon threads, or one event loop when async | abandoned |
| judge | its own bounded pool, retries and cache (retrain.rewards.judge.scorer) | every request times out |
| model | a reward model, local or served, batched, with the judge's retries and cache (retrain.rewards.model.scorer) | a server's requests time out |

Every failure mode — an exception, a non-finite or non-numeric result, an overrun — gives
0.0 for that item and is counted in `RewardBatch.errors` / `.timeouts`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

from retrain.config.schema import TrainConfig
from retrain.registry.core import lookup
from retrain.rewards.bounded import Item, ProcessPool, run_async, run_inline, run_threads
from retrain.rewards.boxed import extract_boxed
from retrain.rewards.custom import CustomReward, is_async, reward_from_object
from retrain.rewards.types import RewardBatch
from retrain.rewards.verifiers import require_math_verify

Mode = Literal["inline", "thread", "async", "process", "batch"]
MATH_TARGET = "retrain.rewards.verifiers:MathReward"


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


class RewardScorer:
    """Scores batches of (response, reference) pairs with the configured reward."""

    def __init__(
        self,
        name: str,
        reward: Any = None,
        *,
        mode: Mode = "thread",
        timeout_s: float = 10.0,
        workers: int | None = None,
        pool: ProcessPool | None = None,
    ) -> None:
        self.name, self.reward, self.mode = name, reward, mode
        # the answer a response gives, when the reward exposes one (maj@k votes on it)
        extract = getattr(reward, "extract_answer", None)
        self.extract_answer: Callable[[str], Any] | None = extract if callable(extract) else None
        self.timeout_s = timeout_s
        self.workers = workers or default_workers()
        self.pool = pool

    def score_batch(self, responses: Sequence[str], references: Sequence[str],
                    prompts: Sequence[str] | None = None) -> RewardBatch:
        """`prompts`, the text each response answered, reach a reward that reads them (the
        judge, a reward model); the others score (response, reference) alone."""
        if len(responses) != len(references):
            raise ValueError(f"{len(responses)} responses but {len(references)} references")
        items: list[Item] = list(zip(responses, references, strict=True))
        if self.mode == "batch":
            asked = list(prompts) if prompts is not None else [""] * len(items)
            if len(asked) != len(items):
                raise ValueError(f"{len(asked)} prompts for {len(items)} responses")
            batch: RewardBatch = self.reward.score_batch(items, asked)
            return batch
        if self.mode == "process":
            assert self.pool is not None
            return self.pool.score_batch(items)
        score = self.reward.score
        if self.mode == "inline":
            return run_inline(score, items)
        if self.mode == "async":
            return run_async(score, items, timeout_s=self.timeout_s, concurrency=4 * self.workers)
        return run_threads(score, items, timeout_s=self.timeout_s, workers=self.workers)

    @property
    def reads_prompts(self) -> bool:
        return self.mode == "batch"

    def score(self, response: str, reference: str) -> float:
        return float(self.score_batch([response], [reference]).scores[0])

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        if self.mode == "batch":
            self.reward.close()

    def __enter__(self) -> RewardScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build_reward(config: TrainConfig, *, workers: int | None = None,
                 cache_dir: str | None = None) -> RewardScorer:
    """The reward of `[reward] type`; raises RewardUnavailable / PluginError with the reason.
    `cache_dir`: where a reward that keeps state across a resume keeps it (the judge's verdicts:
    the run's log directory); None keeps it in memory."""
    kind = config.reward.type
    timeout = config.reward.timeout_s
    if kind == "math":
        require_math_verify()
        pool = ProcessPool(MATH_TARGET, workers=workers or default_workers(), timeout_s=timeout)
        scorer = RewardScorer(kind, mode="process", timeout_s=timeout, workers=workers, pool=pool)
        scorer.extract_answer = extract_boxed  # what MathReward parses, read here without a worker
        return scorer
    if kind == "judge":
        from retrain.rewards.judge.scorer import build_judge

        return RewardScorer(kind, build_judge(config, cache_dir=cache_dir), mode="batch", timeout_s=timeout)
    if kind == "model":
        from retrain.rewards.model.scorer import build_model_reward

        return RewardScorer(kind, build_model_reward(config, cache_dir=cache_dir), mode="batch", timeout_s=timeout)
    if kind == "custom":
        reward: Any = CustomReward(config)
    else:
        found = lookup("reward", kind, config.plugins.search_paths)
        if found.source == "builtin":
            return RewardScorer(
                kind, found.obj(), mode="inline", timeout_s=timeout, workers=workers
            )
        reward = reward_from_object(found.obj, config, kind)
    mode: Mode = "async" if is_async(reward) else "thread"
    return RewardScorer(kind, reward, mode=mode, timeout_s=timeout, workers=workers)


def score_answers(reward: Any, responses: Sequence[str], references: Sequence[str], prompts: Sequence[str]) -> Any:
    """`reward.score_batch`, with the prompts when the reward reads them (a `RewardScorer` of
    the judge); any other object with `score_batch(responses, references)` works too."""
    if getattr(reward, "reads_prompts", False):
        return reward.score_batch(responses, references, prompts)
    return reward.score_batch(responses, references)
