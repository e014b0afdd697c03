"""The same datums through the local backend and through the Tinker backend's loss
construction (its loss_fn_inputs, evaluated with the formula Tinker documents: a sum over
positions) give the same loss and the same weight on every token's logprob, within 1e-5, for
every [training] loss_aggregation: its per-token weights are folded into Tinker's inputs
exactly (backends/tinker/loss.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from retrain.backends.local.backend import LocalBackend
from retrain.backends.local.batch import collate
from retrain.backends.local.logprobs import action_logprobs
from retrain.backends.local.loss import PolicyLossConfig, policy_loss, sft_loss
from retrain.backends.tinker.loss import evaluate, rl_datums, sft_datums
from retrain.config.schema import LOSS_AGGREGATIONS
from retrain.types import Datum
from retrain.validation.load import load_config


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> LocalBackend:
    root = tmp_path_factory.mktemp("parity")
    (root / "c.toml").write_text(f"""
[model]
model = "tiny"
lora_rank = 4
[backend]
devices = "cpu"
adapter_path = "{root / 'a'}"
[training]
seed = 0
temperature = 1.0
top_p = 1.0
""")
    return LocalBackend(load_config(str(root / "c.toml")).config)


MAX_TOKENS = 9


def make_datums(seed: int, *, sft: bool = False) -> list[Datum]:
    """Three rows of different lengths, with loss masks; some sampled tokens carry a zero
    advantage (they still count in the denominators)."""
    rng = np.random.default_rng(seed)
    out = []
    for prompt, completion in ((4, 5), (3, 7), (5, 2)):
        tokens = rng.integers(6, 60, prompt + completion).tolist()
        adv = rng.normal(0, 1, completion)
        adv[rng.random(completion) < 0.25] = 0.0
        if sft:
            adv = (rng.random(completion) < 0.7).astype(float)
        old = (-rng.uniform(2.0, 6.0, completion)).tolist()
        out.append(Datum(tokens=tokens, logprobs=[0.0] * prompt + old, advantages=[0.0] * prompt + adv.tolist(),
                         mask=[0] * prompt + [1] * completion))
    return out


def learner_logprobs(backend: LocalBackend, datums: list[Datum]) -> tuple[torch.Tensor, list[np.ndarray]]:
    """Logprobs of every predicted position: as the local backend's [B, L-1] grid, and per
    datum (what Tinker's forward_backward returns)."""
    batch = collate(datums, backend.tokenizer.pad_token_id, backend.device)
    every = batch.attention_mask[:, 1:].bool()
    with torch.no_grad():
        flat = action_logprobs(backend.model, batch.input_ids, batch.attention_mask, every).double()
    grid = torch.zeros(every.shape, dtype=torch.float64)
    grid[every] = flat
    return grid, [grid[i, : len(d.tokens) - 1].numpy() for i, d in enumerate(datums)]


@pytest.mark.parametrize("aggregation", LOSS_AGGREGATIONS)
@pytest.mark.parametrize("clip_eps", [0.0, 0.2])
def test_policy_loss_and_token_weights_match(backend: LocalBackend, clip_eps: float, aggregation: str) -> None:
    datums = make_datums(1)
    assert any(a == 0.0 and m for d in datums for a, m in zip(d.advantages, d.mask or [], strict=True))
    grid, per_datum = learner_logprobs(backend, datums)
    batch = collate(datums, backend.tokenizer.pad_token_id, backend.device, aggregation=aggregation,
                    max_tokens=MAX_TOKENS)
    action = batch.action
    new = grid[action].clone().requires_grad_(True)
    cfg = PolicyLossConfig(clip_eps=clip_eps)
    local = policy_loss(cfg, new, batch.old_logprobs[action].double(), batch.advantages[action].double())
    local_loss = (local.per_token * batch.weight[action].double()).sum()
    local_loss.backward()

    folded = rl_datums(datums, aggregation, MAX_TOKENS)
    config = {"clip_low_threshold": 1 - clip_eps, "clip_high_threshold": 1 + clip_eps} if clip_eps else None
    remote = evaluate("ppo" if clip_eps else "importance_sampling", folded, per_datum, config)
    assert remote.loss == pytest.approx(float(local_loss), abs=1e-5)
    weights = torch.zeros_like(grid)
    weights[action] = new.grad
    for i, g in enumerate(remote.grads):
        np.testing.assert_allclose(g, weights[i, : len(g)].numpy(), atol=1e-5)
    if clip_eps:
        assert 0 < remote.clip_fraction == pytest.approx(local.clip_fraction)
    assert remote.abs_kl == pytest.approx(local.abs_kl)
    # and the local backend's own step reports that loss (before its update)
    backend.loss_config, backend.loss_aggregation, backend.max_tokens = cfg, aggregation, MAX_TOKENS
    assert backend.train_step(datums, 0.0, 0.0).loss == pytest.approx(float(local_loss), abs=1e-5)


@pytest.mark.parametrize("kind", ["cross_entropy", "importance_sampling"])
def test_sft_loss_and_token_weights_match(backend: LocalBackend, kind: str) -> None:
    datums = make_datums(2, sft=True)
    grid, per_datum = learner_logprobs(backend, datums)
    batch = collate(datums, backend.tokenizer.pad_token_id, backend.device)
    w = batch.advantages.double().clamp_min(0) * batch.action
    mask = w > 0
    new = grid[mask].clone().requires_grad_(True)
    local_loss = sft_loss(kind, new, w[mask]).sum() / int(mask.sum())
    local_loss.backward()

    remote = evaluate(kind, sft_datums(datums, kind), per_datum)
    assert remote.loss == pytest.approx(float(local_loss), abs=1e-5)
    weights = torch.zeros_like(grid)
    weights[mask] = new.grad
    for i, g in enumerate(remote.grads):
        np.testing.assert_allclose(g, weights[i, : len(g)].numpy(), atol=1e-5)
