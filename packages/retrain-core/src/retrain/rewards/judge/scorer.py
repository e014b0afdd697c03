"""`[reward] type = "judge"`: an LLM on an OpenAI-compatible endpoint grades each completion.

1. Each (prompt, reference, response) of a batch is looked up in the cache of verdicts
   (`cache.JudgeCache`); an empty response scores 0.0 without a request.
2. The rest are asked at most `judge_concurrency` at a time, each request bounded by
   `[reward] timeout_s`. A request that times out, cannot connect or gets 408/409/429/5xx is
   retried `judge_retries` times after 0.5 s, 1 s, 2 s, ... (a server's Retry-After, when it
   sends one, up to 30 s); a refused request (400, 401, 404, ...) or a reply that is not a chat
   completion is not.
3. An item whose last try failed scores 0.0 and is counted like any reward failure
   (`reward_errors`, `reward_timeouts`): the run's error budget (`[reward] max_error_share`,
   `max_error_steps`, retrain.training.reward_faults) stops a run whose judge keeps failing.
4. The batch's verdicts join the cache; the step row gets the judge's own counters: `judge/requests`
   (tries included), `judge/cache_hits`, `judge/retries`, `judge/unclear` (replies with neither
   yes nor no), `judge/latency_s` and `judge/latency_max_s` (per request).

Every request finishes within its timeout, so a batch is bounded too: at most
ceil(items / concurrency) x (retries + 1) x (timeout_s + backoff), and no thread is left behind.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from retrain.config.schema import TrainConfig
from retrain.io.http import check_url
from retrain.io.layout import JUDGE_CACHE
from retrain.registry import builtin, entry_points
from retrain.rewards.bounded import Item, Tally
from retrain.rewards.judge.cache import JudgeCache, verdict_key
from retrain.rewards.judge.endpoint import HttpJudge
from retrain.rewards.judge.retry import BACKOFF_S, with_retries
from retrain.rewards.judge.verdict import DEFAULT_MODEL, Verdict
from retrain.rewards.types import RewardBatch, RewardFault, RewardUnavailable

OPENAI_URL = "https://api.openai.com/v1"
VERIFIERS_HINT = "pip install retrain-envs (it registers the verifiers judge client), or judge_client = \"http\""


class JudgeClient(Protocol):
    client: str

    def ask(self, prompt: str, reference: str, response: str) -> Verdict: ...


@dataclass
class Outcome:
    """One item's result: a score, or the fault of its last try."""

    score: float | None = None
    fault: RewardFault | None = None
    timed_out: bool = False
    cached: bool = False
    clear: bool = True
    requests: int = 0
    latencies: list[float] = field(default_factory=list)


class JudgeReward:
    """Scores batches through a judge client; `close()` stops its worker threads."""

    wants_prompts = True

    def __init__(self, client: JudgeClient, *, model: str, concurrency: int, retries: int, timeout_s: float,
                 cache: JudgeCache | None = None, backoff_s: float = BACKOFF_S) -> None:
        self.client, self.model, self.retries, self.timeout_s = client, model, retries, timeout_s
        self.cache = cache if cache is not None else JudgeCache(None)
        self.backoff_s = backoff_s
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="retrain-judge")

    def score_batch(self, items: Sequence[Item], prompts: Sequence[str]) -> RewardBatch:
        keys = [verdict_key(self.client.client, self.model, p, ref, resp) for p, (resp, ref) in zip(prompts, items,
                                                                                                     strict=True)]
        futures = [self.pool.submit(self._one, key, prompt, ref, resp)
                   for key, prompt, (resp, ref) in zip(keys, prompts, items, strict=True)]
        outcomes = [f.result() for f in futures]
        self.cache.add((k, o.score) for k, o in zip(keys, outcomes, strict=True)
                       if o.score is not None and not o.cached and o.requests)
        return _batch(outcomes, self.timeout_s)

    def score(self, response: str, reference: str) -> float:
        return float(self.score_batch([(response, reference)], [""]).scores[0])

    def _one(self, key: str, prompt: str, reference: str, response: str) -> Outcome:
        cached = self.cache.get(key)
        if cached is not None:
            return Outcome(score=cached, cached=True)
        if not response.strip():
            return Outcome(score=0.0)
        tries = with_retries(lambda: self.client.ask(prompt, reference, response), self.retries, self.backoff_s)
        verdict = tries.value
        return Outcome(score=verdict.score if verdict is not None else None,
                       clear=verdict.clear if verdict is not None else True, fault=tries.fault,
                       timed_out=tries.timed_out, requests=tries.requests, latencies=tries.latencies)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def _batch(outcomes: Sequence[Outcome], timeout_s: float) -> RewardBatch:
    tally = Tally(len(outcomes))
    for i, o in enumerate(outcomes):
        if o.score is not None:
            tally.ok(i, o.score)
        elif o.timed_out and o.fault is not None:
            tally.timeout(i, timeout_s, o.fault)
        else:
            tally.error(i, o.fault or RewardFault("a judge failure", "no verdict"))
    latencies = [s for o in outcomes for s in o.latencies]
    requests = sum(o.requests for o in outcomes)
    batch = tally.batch()
    batch.extra.update({
        "judge/requests": float(requests),
        "judge/cache_hits": float(sum(o.cached for o in outcomes)),
        "judge/retries": float(requests - sum(1 for o in outcomes if o.requests)),
        "judge/unclear": float(sum(not o.clear for o in outcomes)),
        "judge/latency_s": sum(latencies) / len(latencies) if latencies else 0.0,
        "judge/latency_max_s": max(latencies, default=0.0),
    })
    return batch


def base_url(config: TrainConfig) -> str:
    return config.reward.judge_base_url or os.environ.get("OPENAI_BASE_URL", "") or OPENAI_URL


def build_judge(config: TrainConfig, *, cache_dir: str | Path | None = None) -> JudgeReward:
    """The judge of `[reward]`; `cache_dir` is where the verdicts persist (the run's log
    directory), None for an in-memory cache. Raises RewardUnavailable when the judge cannot be
    asked from here: no key for a remote endpoint, or the verifiers client not installed."""
    r = config.reward
    url, model = base_url(config), r.judge_model or DEFAULT_MODEL
    if why := check_url(url):  # the config's URL is checked at load; $OPENAI_BASE_URL only here
        where = "[reward] judge_base_url" if r.judge_base_url else "$OPENAI_BASE_URL"
        raise RewardUnavailable(f"[reward] type = judge: {where} = {url!r} {why}")
    key = os.environ.get(r.judge_api_key_env, "") if r.judge_api_key_env else ""
    if not key and not loopback(url):
        raise RewardUnavailable(f"[reward] type = judge: {url} needs an API key, and ${r.judge_api_key_env or '(none)'}"
                                " is not set (judge_api_key_env names the variable)")
    client: Any
    if r.judge_client == "verifiers":
        ep = entry_points.lookup(builtin.ENTRY_POINT_GROUPS["reward"], "judge")
        if ep is None:
            raise RewardUnavailable(f'[reward] judge_client = "verifiers" needs the verifiers judge client: '
                                    f"{VERIFIERS_HINT}")
        client = ep.load()(url, model, r.judge_api_key_env, r.timeout_s)
    else:
        client = HttpJudge(url, model, key, r.timeout_s)
    cache = JudgeCache(Path(cache_dir) / JUDGE_CACHE if cache_dir is not None else None)
    return JudgeReward(client, model=model, concurrency=r.judge_concurrency, retries=r.judge_retries,
                       timeout_s=r.timeout_s, cache=cache)


def loopback(url: str) -> bool:
    """Whether `url` names this machine (a server here may take no API key)."""
    host = (urlparse(url).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")
