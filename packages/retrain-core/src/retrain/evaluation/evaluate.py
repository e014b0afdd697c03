"""One evaluation: sample n >= k completions per problem from the policy, score them with the
run's reward, and reduce them to an `EvalRow` (and one `ProblemResult` per problem).

A sample passes when its reward is at least `pass_threshold`. Per problem, with c of the n
samples passing: pass@1 = c/n and pass@k = 1 - C(n-c, k)/C(n, k), the unbiased estimators
(with n = k, pass@k is 1 when any sample passed: an estimate from one draw of k); maj@k is a
majority vote over the answers the reward extracts (a reward exposes them with
`extract_answer(response) -> str`; the boxed rewards do) of k samples, averaged over the
floor(n/k) disjoint blocks of k samples in draw order (each block is one draw of k, so the
mean stays unbiased). The row holds the means over problems.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from retrain.backends.protocol import Tokenizer
from retrain.data.chat import encode_example
from retrain.evaluation.estimators import majority_passes, pass_at_k
from retrain.evaluation.row import EvalRow, ProblemResult
from retrain.rewards.create import score_answers
from retrain.rewards.types import RewardFault
from retrain.types import Completion, Example, SamplingParams


class PolicySampler(Protocol):
    """What evaluation needs of a backend: its tokenizer and seeded sampling."""

    tokenizer: Tokenizer

    def sample(self, prompts: Sequence[Sequence[int]], num_samples: int,
               params: SamplingParams) -> list[list[Completion]]: ...


@dataclass(frozen=True)
class Problem:
    id: int | str
    example: Example
    prompt_ids: list[int]


def encode_problems(examples: Sequence[Example], tokenizer: Tokenizer,
                    encode: Callable[[Example, Tokenizer], list[int]] = encode_example, *,
                    max_prompt_tokens: int = 0) -> list[Problem]:
    """Each example with its prompt tokens (`encode`: the run's rendering) and an id (its own,
    else its index); with `max_prompt_tokens` > 0, those whose prompt is longer are left out
    (the caller counts them: len(examples) - len(result))."""
    out = []
    for i, ex in enumerate(examples):
        ids = encode(ex, tokenizer)
        if not max_prompt_tokens or len(ids) <= max_prompt_tokens:
            out.append(Problem(ex.example_id if ex.example_id is not None else i, ex, ids))
    return out


@dataclass(frozen=True)
class Evaluation:
    row: EvalRow
    problems: list[ProblemResult]
    #: the first reward failure of each kind among the samples (the run reports them once)
    faults: list[RewardFault] = field(default_factory=list)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def evaluate(sampler: PolicySampler, problems: Sequence[Problem], reward: Any, k: int, *,
             params: SamplingParams, pass_threshold: float = 1.0, step: int = 0, per_call: int = 64,
             progress: Callable[[int], None] | None = None, n: int | None = None) -> Evaluation:
    """`n` samples per problem (default k, at least k); `reward` scores batches
    (`score_batch(responses, references)`, as the run's reward does); `params.seed` must be
    set, and call i samples with `params.seed + i`; `progress(problems_done)` is called after
    each call."""
    if params.seed is None:
        raise ValueError("evaluation samples from its own stream: params.seed must be set")
    n = k if n is None else n
    if not 1 <= k <= n:
        raise ValueError(f"evaluation needs 1 <= k <= n samples per problem (k={k}, n={n})")
    t0 = time.perf_counter()
    extract = getattr(reward, "extract_answer", None)
    tok = sampler.tokenizer
    results: list[ProblemResult] = []
    pass1: list[float] = []
    passk: list[float] = []
    majk: list[float] = []
    tokens = truncated = 0
    rewards_all: list[float] = []
    failed = 0
    faults: dict[str, RewardFault] = {}
    for call, start in enumerate(range(0, len(problems), per_call)):
        chunk = problems[start:start + per_call]
        seeded = msgspec.structs.replace(params, seed=params.seed + call)
        groups = sampler.sample([p.prompt_ids for p in chunk], n, seeded)
        texts = [[tok.decode(c.token_ids) for c in group] for group in groups]
        scored = score_answers(reward, [t for group in texts for t in group],
                               [p.example.reference for p in chunk for _ in range(n)],
                               [p.example.prompt for p in chunk for _ in range(n)])
        scores = [float(s) for s in scored.scores]
        failed += int(getattr(scored, "errors", 0)) + int(getattr(scored, "timeouts", 0))
        for fault in getattr(scored, "faults", ()):
            faults.setdefault(fault.kind, fault)
        for i, (problem, group, group_texts) in enumerate(zip(chunk, groups, texts, strict=True)):
            rewards = scores[i * n:(i + 1) * n]
            passed = [r >= pass_threshold for r in rewards]
            c = sum(passed)
            pass1.append(c / n)
            passk.append(pass_at_k(n, c, k))
            if callable(extract):
                answers = [str(extract(t) or "") for t in group_texts]
                blocks = range(0, n - n % k, k)
                majk.append(_mean([float(majority_passes(answers[b:b + k], passed[b:b + k])) for b in blocks]))
            tokens += sum(len(x.token_ids) for x in group)
            truncated += sum(x.finish_reason == "length" for x in group)
            rewards_all += rewards
            shown = next((j for j, p in enumerate(passed) if p), 0)
            results.append(ProblemResult(id=problem.id, prompt=problem.example.prompt,
                                         reference=problem.example.reference, rewards=rewards, passed=c,
                                         sample=group_texts[shown]))
        if progress is not None:
            progress(len(results))
    samples = len(rewards_all)
    row = EvalRow(step=step, k=k, n=n, examples=len(results), mean_reward=_mean(rewards_all), pass_at_1=_mean(pass1),
                  pass_at_k=_mean(passk), maj_at_k=_mean(majk) if callable(extract) else None,
                  mean_tokens=tokens / samples if samples else 0.0,
                  truncated_share=truncated / samples if samples else 0.0,
                  wall_s=round(time.perf_counter() - t0, 6), reward_errors=failed)
    return Evaluation(row, results, list(faults.values()))
