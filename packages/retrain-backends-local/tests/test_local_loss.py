"""Policy losses against the spec's worked examples (algorithms.md §9.1), and SFT losses."""

from __future__ import annotations

import math

import pytest
import torch

from retrain.backends.local.loss import (
    PolicyLossConfig,
    policy_loss,
    select_tokens,
    sft_loss,
    token_weights,
)

R = torch.tensor([1.5, 0.5, 1.1, 1.5], dtype=torch.float64)
A = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=torch.float64)
OLD = torch.zeros(4, dtype=torch.float64)
NEW = R.log()


def mean_loss(cfg: PolicyLossConfig, new=NEW, old=OLD, adv=A, selected=None):  # type: ignore[no-untyped-def]
    res = policy_loss(cfg, new, old, adv, selected)
    return float(res.per_token.mean()), res


def test_standard_clipped() -> None:
    loss, res = mean_loss(PolicyLossConfig(clip_eps=0.2))
    assert loss == pytest.approx(0.225)
    assert res.per_token.tolist() == pytest.approx([-1.2, -0.5, 1.1, 1.5])
    assert res.clip_fraction == pytest.approx(0.75)
    assert res.abs_kl == pytest.approx(0.399847, abs=1e-6)


def test_asymmetric_and_unclipped() -> None:
    assert mean_loss(PolicyLossConfig(clip_eps=0.2, clip_eps_high=0.28))[0] == pytest.approx(0.205)
    loss, res = mean_loss(PolicyLossConfig())
    assert loss == pytest.approx(0.15) and res.clip_fraction == 0.0


def test_kl_cov_example() -> None:
    new = torch.tensor([-0.1, -2.0, -0.5, -0.3], dtype=torch.float64)
    old = new - R.log()  # ratios r = [1.5, .5, 1.1, 1.5]
    cfg = PolicyLossConfig(mode="kl_cov", kl_cov_percent=25.0)
    selected = select_tokens(cfg, new, old, A)
    assert selected.tolist() == [True, False, False, False]
    loss, res = mean_loss(cfg, new, old, A, selected)
    assert res.per_token[0].item() == pytest.approx(-1.5 + math.log(1.5))
    assert loss == pytest.approx(0.251366, abs=1e-6)
    assert res.cov_fraction == 0.25


def test_clip_cov_example() -> None:
    adv = torch.tensor([3.0, -1.0, -1.0, -1.0], dtype=torch.float64)
    new = torch.tensor([-0.1, -1.0, -1.0, -1.0], dtype=torch.float64)
    cfg = PolicyLossConfig(mode="clip_cov")
    selected = select_tokens(cfg, new, new.clone(), adv, torch.Generator().manual_seed(0))
    assert selected.tolist() == [True, False, False, False]
    loss, res = mean_loss(cfg, new, new.clone(), adv, selected)
    assert loss == pytest.approx(0.75) and res.cov_fraction == 0.25
    new.requires_grad_(True)
    policy_loss(cfg, new, new.detach().clone(), adv, selected).per_token.sum().backward()
    assert new.grad is not None and new.grad[0].item() == 0.0 and new.grad[1].item() != 0.0


def test_dual_clip_caps_negative_advantages() -> None:
    new = torch.tensor([math.log(4.0)], dtype=torch.float64)
    res = policy_loss(PolicyLossConfig(clip_eps=0.2, clip_ratio_c=3.0), new, torch.zeros(1, dtype=torch.float64),
                      torch.tensor([-1.0], dtype=torch.float64))
    assert res.per_token.item() == pytest.approx(3.0)


def test_sft_losses() -> None:
    lp = torch.tensor([math.log(0.5), math.log(0.25)])
    w = torch.tensor([1.0, 1.0])
    assert sft_loss("cross_entropy", lp, w).tolist() == pytest.approx([math.log(2), math.log(4)])
    assert sft_loss("importance_sampling", lp, w).tolist() == pytest.approx([-0.5, -0.25])


def test_token_weights_per_aggregation() -> None:
    """Two rows with 3 and 1 sampled tokens, a budget of 4 tokens per completion."""
    action = torch.tensor([[True, True, True, False], [False, False, False, True]])
    expect = {
        "token_mean": [[1 / 4] * 3 + [0], [0, 0, 0, 1 / 4]],
        "seq_mean_token_mean": [[1 / 6] * 3 + [0], [0, 0, 0, 1 / 2]],
        "seq_mean_token_sum": [[1 / 2] * 3 + [0], [0, 0, 0, 1 / 2]],
        "constant": [[1 / 8] * 3 + [0], [0, 0, 0, 1 / 8]],
    }
    for aggregation, weights in expect.items():
        assert torch.allclose(token_weights(aggregation, action, 4), torch.tensor(weights)), aggregation
    empty = torch.zeros((2, 3), dtype=torch.bool)
    assert token_weights("seq_mean_token_mean", empty, 4).sum() == 0
    with pytest.raises(ValueError, match="unknown loss_aggregation"):
        token_weights("sequence", action, 4)


def test_kl_estimators() -> None:
    """r = log p_ref - log p = -0.5 at the first token, 0 at the second (identical policies)."""
    from retrain.backends.local.loss import kl_penalty

    new = torch.tensor([-1.0, -2.0])
    ref = torch.tensor([-1.5, -2.0])
    assert kl_penalty("k1", new, ref).tolist() == pytest.approx([0.5, 0.0])
    assert kl_penalty("k2", new, ref).tolist() == pytest.approx([0.125, 0.0])
    assert kl_penalty("k3", new, ref).tolist() == pytest.approx([math.exp(-0.5) + 0.5 - 1, 0.0])
    with pytest.raises(ValueError, match="kl_estimator"):
        kl_penalty("k4", new, ref)
