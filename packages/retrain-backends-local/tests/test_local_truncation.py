"""The kept-mass correction: with a truncating sampler (top_p, top_k, min_p) the trainer scores
each sampled token over the kept set the engine drew it from, so the on-policy ratio is 1 and
the mismatch metrics measure the engine, not the truncation."""

from __future__ import annotations

import pytest
import torch

from retrain.backends.local.backend import LocalBackend
from retrain.backends.local.batch import collate
from retrain.backends.local.micro import Layout, micro_batches
from retrain.backends.local.truncation import Truncation
from retrain.inference_engine.pytorch.choice import choose
from retrain.types import Datum, SamplingParams

RULES = {
    "top_p 0.8": (0.8, 0, 0.0),
    "top_k 5": (1.0, 5, 0.0),
    "min_p 0.1": (1.0, 0, 0.1),
    "all three": (0.8, 5, 0.1),
    "top_p with min_p": (0.9, 0, 0.3),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_the_floor_keeps_the_engines_kept_set(rule: str) -> None:
    top_p, top_k, min_p = RULES[rule]
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 103, generator=g) * torch.linspace(0.5, 6.0, 64)[:, None]  # flat to peaked
    params = SamplingParams(max_tokens=1, temperature=0.7, top_p=top_p, top_k=top_k, min_p=min_p)
    drawn = choose(logits, params, uniform=torch.rand(64, generator=g), top_n=103)
    z = logits / 0.7
    rule_ = Truncation.of(top_p, top_k, min_p, 0.7)
    assert rule_ is not None
    floor = rule_.floor(z)
    for row in range(64):
        engine = {int(i) for i, lp in zip(drawn.top_ids[row], drawn.top_logprobs[row], strict=True)
                  if torch.isfinite(lp)}
        assert engine == set((z[row] >= floor[row]).nonzero().squeeze(1).tolist()), row
    kept = torch.where(z >= floor[:, None], z, float("-inf"))
    trainer = z.gather(1, drawn.token[:, None]).squeeze(1) - torch.logsumexp(kept, dim=1)
    assert float((trainer - drawn.logprob).abs().max()) <= 1e-5


def test_nothing_truncates_without_a_filter_or_when_greedy() -> None:
    assert Truncation.of(1.0, 0, 0.0, 1.0) is None and Truncation.of(0.5, 3, 0.1, 0.0) is None


def sampled(backend: LocalBackend, params: SamplingParams) -> list[Datum]:
    prompts = [backend.tokenizer.encode_prompt(f"{i}+{i + 2}=") for i in range(4)]
    out = []
    for prompt, group in zip(prompts, backend.sample(prompts, 4, params), strict=True):
        for i, c in enumerate(group):
            out.append(Datum(tokens=prompt + c.token_ids, logprobs=[0.0] * len(prompt) + c.logprobs,
                             advantages=[0.0] * len(prompt) + [0.5 - 0.3 * i] * len(c.token_ids),
                             mask=[0] * len(prompt) + [1] * len(c.token_ids)))
    return out


def trainer_logprobs(backend: LocalBackend, datums: list[Datum], truncated: bool = True) -> torch.Tensor:
    batch = collate(datums, backend.tokenizer.pad_token_id, backend.device)
    (mb,) = micro_batches(batch, Layout(packed=backend.passes.rl.packed))
    with torch.no_grad():
        return backend._new_logprobs(mb, sampled=truncated) - batch.old_logprobs[batch.action]


@pytest.mark.parametrize("rule", ["top_p 0.8", "top_k 5", "min_p 0.1", "all three"])
def test_the_on_policy_ratio_is_one(tiny_config, rule: str) -> None:  # type: ignore[no-untyped-def]
    top_p, top_k, min_p = RULES[rule]
    # a low temperature peaks the tiny model's flat distribution, so that every filter drops mass
    flags = ("--top-p", str(top_p), "--top-k", str(top_k), "--min-p", str(min_p), "--temperature", "0.35",
             "--policy-loss-mode", "sapo")
    backend = LocalBackend(tiny_config(*flags))
    params = SamplingParams(max_tokens=6, temperature=0.35, top_p=top_p, top_k=top_k, min_p=min_p)
    datums = sampled(backend, params)
    log_ratio = trainer_logprobs(backend, datums)
    assert float(log_ratio.abs().max()) <= 1e-5
    # over the whole vocabulary the ratio is the kept mass, well below 1: the test can fail
    assert float(trainer_logprobs(backend, datums, truncated=False).min()) < -1e-2
    out = backend.train_step(datums, 1e-3, 0.0)
    assert out.metrics["engine/logprob_gap_max"] <= 1e-5  # the engine's numerics, not the truncation


def test_an_inference_server_is_not_truncated_by_the_trainer(tiny_config) -> None:  # type: ignore[no-untyped-def]
    from retrain.backends.local.passes import Passes

    config = tiny_config("--top-p", "0.8")
    config.inference.engine = "vllm"
    backend = LocalBackend(tiny_config("--top-p", "0.8"))
    plan = Passes.plan(config, backend.options, backend.model, packing="", device=backend.device, checkpointed=0)
    assert plan.truncation is None and backend.passes.truncation == Truncation(0.8, 0, 0.0)
