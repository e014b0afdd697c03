"""`[reward] type = "model"`: a reward model (a sequence classifier) scores each completion.

The classifier reads one text per completion, `[reward] model_template` with `{prompt}` (the
example's prompt) and `{response}` filled in, and answers its logits; the reward is their
`model_score` (`normalise`): sigmoid of a one-label head's logit (in (0, 1), above 0.5 counted
correct), that logit as it is, or softmax, the probability of label `model_label`.

The classifier is the checkpoint loaded on this machine (retrain-backends-local registers it
in the `retrain.rewards` entry-point group under "model") or a server (`model_url`,
`server.ClassifierServer`). Either way, the judge's machinery runs it:

1. each (prompt, response) is looked up in the cache of scores (`reward_model_cache.jsonl` in the
   log directory: a resumed run, or a text scored twice, gets the first score);
2. the rest go `model_batch_size` texts at a time, a server's requests at most
   `judge_concurrency` in flight, each bounded by `timeout_s` and retried `judge_retries` times
   after a timeout, a connection failure or 408/409/429/5xx (retrain.rewards.judge.retry);
3. a batch whose last try failed scores 0.0 for each of its texts, counted like any reward
   failure (`reward_errors`, `reward_timeouts`), so the run's error budget
   (`[reward] max_error_share`, `max_error_steps`) stops a run whose reward model keeps failing;
4. the step row gets `reward_model/requests` (tries included), `reward_model/cache_hits`,
   `reward_model/retries` and `reward_model/latency_s` (per request).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from retrain.config.schema import TrainConfig
from retrain.io.layout import REWARD_MODEL_CACHE
from retrain.registry import builtin, entry_points
from retrain.rewards.bounded import Item, Tally
from retrain.rewards.judge.cache import JudgeCache
from retrain.rewards.judge.retry import BACKOFF_S, Attempts, with_retries
from retrain.rewards.types import RewardBatch, RewardFault, RewardUnavailable

LOCAL_HINT = "pip install retrain-backends-local (it loads reward models), or serve it and set [reward] model_url"
BAD_LOGITS = "reward-model logits that do not fit model_score"


class Classifier(Protocol):
    #: what the cache key and messages call it
    name: str

    def classify(self, texts: Sequence[str]) -> list[list[float]]:
        """Each text's logits; raises a `retrain.rewards.judge.errors.JudgeError` on failure."""
        ...

    def close(self) -> None: ...


def normalise(logits: Sequence[float], score: str, label: int) -> float:
    """The reward of one text's logits under `model_score`; ValueError when they do not fit it."""
    if score in ("sigmoid", "logit"):
        if len(logits) != 1:
            raise ValueError(f"model_score = {score!r} reads a one-label head; this one has {len(logits)} labels "
                             "(model_score = \"softmax\" reads a label's probability)")
        x = float(logits[0])
        return x if score == "logit" else 0.5 * (1.0 + math.tanh(0.5 * x))  # sigmoid, exact for large |x|
    if not logits or not -len(logits) <= label < len(logits):
        raise ValueError(f"model_label = {label} is not a label of a head with {len(logits)}")
    top = max(logits)
    weights = [math.exp(v - top) for v in logits]
    return weights[label] / sum(weights)


def render(template: str, prompt: str, response: str) -> str:
    """The classifier's text: `template` with {prompt} and {response} replaced (nothing else in
    it is read, so braces in either text stay as they are)."""
    return template.replace("{prompt}", prompt).replace("{response}", response)


class ModelReward:
    """Scores batches through a classifier; `close()` stops its threads and the classifier."""

    wants_prompts = True

    def __init__(self, classifier: Classifier, *, template: str, score: str, label: int, batch_size: int,
                 concurrency: int, retries: int, timeout_s: float, cache: JudgeCache | None = None,
                 backoff_s: float = BACKOFF_S) -> None:
        self.classifier, self.template, self.score_kind, self.label = classifier, template, score, label
        self.batch_size, self.retries, self.timeout_s, self.backoff_s = batch_size, retries, timeout_s, backoff_s
        self.cache = cache if cache is not None else JudgeCache(None)
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="retrain-reward-model")

    def _key(self, text: str) -> str:
        raw = json.dumps([self.classifier.name, self.score_kind, self.label, text], ensure_ascii=False)
        return hashlib.sha256(raw.encode()).hexdigest()

    def score_batch(self, items: Sequence[Item], prompts: Sequence[str]) -> RewardBatch:
        texts = [render(self.template, p, resp) for p, (resp, _) in zip(prompts, items, strict=True)]
        keys = [self._key(t) for t in texts]
        tally = Tally(len(texts))
        todo = []
        for i, key in enumerate(keys):
            cached = self.cache.get(key)
            if cached is not None:
                tally.ok(i, cached)
            else:
                todo.append(i)
        chunks = [todo[k:k + self.batch_size] for k in range(0, len(todo), self.batch_size)]
        tries = list(self.pool.map(lambda chunk: self._ask([texts[i] for i in chunk]), chunks))
        fresh: list[tuple[str, float]] = []
        for chunk, attempt in zip(chunks, tries, strict=True):
            for i, value in zip(chunk, self._scores(attempt, len(chunk)), strict=True):
                if isinstance(value, RewardFault):
                    if attempt.timed_out:
                        tally.timeout(i, self.timeout_s, value)
                    else:
                        tally.error(i, value)
                else:
                    tally.ok(i, value)
                    fresh.append((keys[i], value))
        self.cache.add(fresh)
        batch = tally.batch()
        latencies = [s for a in tries for s in a.latencies]
        requests = sum(a.requests for a in tries)
        batch.extra.update({
            "reward_model/requests": float(requests),
            "reward_model/cache_hits": float(len(texts) - len(todo)),
            "reward_model/retries": float(requests - len(tries)),
            "reward_model/latency_s": sum(latencies) / len(latencies) if latencies else 0.0,
        })
        return batch

    def _ask(self, texts: list[str]) -> Attempts[list[list[float]]]:
        return with_retries(lambda: self.classifier.classify(texts), self.retries, self.backoff_s)

    def _scores(self, attempt: Attempts[list[list[float]]], n: int) -> list[float | RewardFault]:
        if attempt.value is None:
            fault = attempt.fault or RewardFault("a reward-model failure", "no answer")
            return [fault] * n
        if len(attempt.value) != n:
            return [RewardFault(BAD_LOGITS, f"{len(attempt.value)} answers for {n} texts")] * n
        out: list[float | RewardFault] = []
        for logits in attempt.value:
            try:
                out.append(normalise(logits, self.score_kind, self.label))
            except (ValueError, TypeError) as e:
                out.append(RewardFault(BAD_LOGITS, str(e)))
        return out

    def score(self, response: str, reference: str) -> float:
        return float(self.score_batch([(response, reference)], [""]).scores[0])

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.classifier.close()


def build_model_reward(config: TrainConfig, *, cache_dir: str | Path | None = None) -> ModelReward:
    """The reward model of `[reward]`; `cache_dir` is where its scores persist (the run's log
    directory), None for an in-memory cache. Raises RewardUnavailable when it cannot be run from
    here (the local loader not installed)."""
    r = config.reward
    classifier: Classifier
    if r.model_url:
        from retrain.rewards.model.server import ClassifierServer

        classifier = ClassifierServer(r.model_url, r.model, api_key_env=r.model_api_key_env, timeout_s=r.timeout_s)
        concurrency = r.judge_concurrency
    else:
        ep = entry_points.lookup(builtin.ENTRY_POINT_GROUPS["reward"], "model")
        if ep is None:
            raise RewardUnavailable(f"[reward] type = \"model\" loads {r.model!r} on this machine, which needs the "
                                    f"local reward-model loader: {LOCAL_HINT}")
        classifier = ep.load()(config)
        concurrency = 1  # one model: its forward passes run one after another
    cache = JudgeCache(Path(cache_dir) / REWARD_MODEL_CACHE if cache_dir is not None else None)
    return ModelReward(classifier, template=r.model_template, score=r.model_score, label=r.model_label,
                       batch_size=r.model_batch_size, concurrency=concurrency, retries=r.judge_retries if r.model_url
                       else 0, timeout_s=r.timeout_s, cache=cache)

