"""GSPO (sequence-level ratios), CISPO, SAPO and the sampler-mismatch correction's modes: closed
forms of their values and gradients, the worked examples of docs/advantages.md and
docs/inference.md (read from the pages, so the pages cannot drift), and the backend's step
with each of them. TRL parity: tests/test_trl_objectives.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from retrain.backends.local.loss import PolicyLossConfig, per_sequence, policy_loss
from retrain.backends.local.mismatch import Mismatch

DOCS = Path(__file__).resolve().parents[3] / "docs"

# the worked example of the pages: completion a (tokens 1, 2; A = +1), completion b (token 3; A = -1)
RATIO = torch.tensor([1.5, 0.6, 1.25], dtype=torch.float64)
ADV = torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64)
ROWS = torch.tensor([0, 0, 1])
NEW = torch.tensor([-0.2, -1.0, -0.5], dtype=torch.float64)
OLD = NEW - RATIO.log()

OBJECTIVES = {
    "`standard`, token, `clip_eps = 0.2`": PolicyLossConfig(clip_eps=0.2),
    "`standard`, sequence (GSPO), `clip_eps = 0.2`": PolicyLossConfig(level="sequence", clip_eps=0.2),
    "`cispo`, token, `clip_eps_high = 0.2`": PolicyLossConfig(mode="cispo", clip_eps_high=0.2),
    "`sapo`, token": PolicyLossConfig(mode="sapo"),
    "`sapo`, sequence": PolicyLossConfig(mode="sapo", level="sequence"),
}


def loss_and_grad(cfg: PolicyLossConfig, new: torch.Tensor = NEW, old: torch.Tensor = OLD,
                  adv: torch.Tensor = ADV, rows: torch.Tensor = ROWS) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(per-token losses, dL/d(log p) of L = their sum, clip fraction)."""
    x = new.clone().requires_grad_(True)
    res = policy_loss(cfg, x, old, adv, rows=rows)
    (grad,) = torch.autograd.grad(res.per_token.sum(), x)
    return res.per_token.detach(), grad, res.clip_fraction


def table_rows(page: str, marker: str) -> dict[str, list[float]]:
    """{first cell: the numbers of the other cells} of the table after `<!-- marker -->`."""
    text = (DOCS / page).read_text(encoding="utf-8")
    start = text.index(f"<!-- {marker} -->")
    lines = text[start:].splitlines()[1:]
    out: dict[str, list[float]] = {}
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        out[cells[0]] = [float(c.replace("−", "-")) for c in cells[1:]]
    assert out, f"no table after <!-- {marker} --> in docs/{page}"
    return out


def test_the_policy_loss_worked_example_is_what_the_loss_computes() -> None:
    rows = table_rows("advantages.md", "worked example: policy losses")
    assert set(rows) == set(OBJECTIVES)
    for label, cfg in OBJECTIVES.items():
        per_token, grad, clipped = loss_and_grad(cfg)
        expected = rows[label]
        assert per_token.tolist() == pytest.approx(expected[0:3], abs=1e-6), label
        assert grad.tolist() == pytest.approx(expected[3:6], abs=1e-6), label
        assert clipped == pytest.approx(expected[6], abs=1e-6), label


def test_the_correction_worked_example_is_what_the_correction_computes() -> None:
    rows = table_rows("inference.md", "worked example: importance-sampling correction")
    assert set(rows) == {f"`{m}`" for m in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")}
    for label, expected in rows.items():
        m = Mismatch(correction=True, cap=1.2, mode=label.strip("`"))
        anchor, weight = m.anchor(NEW, OLD, ROWS)
        assert weight is not None and torch.equal(anchor, NEW.float())
        metrics = m.metrics()
        share = metrics.get("engine/is_masked_fraction", metrics.get("engine/is_truncated_fraction"))
        assert weight.tolist() == pytest.approx(expected[0:3], abs=1e-6), label
        assert [metrics["engine/is_ratio_mean"], metrics["engine/is_ratio_max"], metrics["engine/is_weight_mean"],
                share] == pytest.approx(expected[3:7], abs=1e-6), label
        assert metrics["engine/mismatch_kl"] == pytest.approx(
            float((RATIO - 1 - RATIO.log()).mean()), abs=1e-7)


def test_per_sequence_means_and_sums_with_gradient_to_every_token() -> None:
    x = torch.tensor([1.0, 2.0, 3.0, 10.0], requires_grad=True)
    rows = torch.tensor([0, 0, 0, 2])
    assert per_sequence(x, rows, "mean").tolist() == [2.0, 2.0, 2.0, 10.0]
    total = per_sequence(x, rows, "sum")
    assert total.tolist() == [6.0, 6.0, 6.0, 10.0]
    (grad,) = torch.autograd.grad(total[0], x)
    assert grad.tolist() == [1.0, 1.0, 1.0, 0.0]
    with pytest.raises(ValueError):
        per_sequence(x, rows, "max")


def test_gspo_gives_every_token_the_sequence_ratio_and_its_gradient() -> None:
    """Unclipped: l_t = -s A_t with s = exp(mean log r), so dL/dlog p_u = -s (sum_t A_t) / n for
    each token u of the sequence (TRL's sequence level); clipped per sequence: no gradient."""
    adv = torch.tensor([1.0, 3.0, -1.0], dtype=torch.float64)
    per_token, grad, _ = loss_and_grad(PolicyLossConfig(level="sequence"), adv=adv)
    s = math.sqrt(1.5 * 0.6)
    assert per_token.tolist() == pytest.approx([-s, -3 * s, 1.25])
    assert grad.tolist() == pytest.approx([-s * 4 / 2, -s * 4 / 2, 1.25])
    # s = 0.949 is below [0.97, 1.03]: with A < 0 the clipped branch wins, no gradient for the whole
    # sequence; token 3 (s = 1.25 above it, A < 0) keeps its gradient
    per_token, grad, clipped = loss_and_grad(PolicyLossConfig(level="sequence", clip_eps=0.03), adv=-adv.abs())
    assert grad.tolist() == pytest.approx([0.0, 0.0, 1.25]) and per_token[:2].tolist() == pytest.approx([0.97, 2.91])
    assert clipped == 1.0
    with pytest.raises(ValueError, match="row"):
        policy_loss(PolicyLossConfig(level="sequence"), NEW, OLD, ADV)


def test_cispo_weighs_log_p_by_the_clipped_ratio_without_its_gradient() -> None:
    per_token, grad, clipped = loss_and_grad(PolicyLossConfig(mode="cispo", clip_eps=0.5, clip_eps_high=0.2))
    weight = [1.2, 0.6, 1.2]
    assert grad.tolist() == pytest.approx([-w * a for w, a in zip(weight, ADV.tolist(), strict=True)])
    assert per_token.tolist() == pytest.approx([-w * a * lp for w, a, lp in zip(weight, ADV.tolist(), NEW.tolist(),
                                                                                 strict=True)])
    assert clipped == pytest.approx(2 / 3)
    # clip_eps = 0: no lower bound (0.6 stays 0.6 even with a tight upper bound)
    _, grad, _ = loss_and_grad(PolicyLossConfig(mode="cispo", clip_eps_high=0.01))
    assert grad.tolist() == pytest.approx([-1.01, -0.6, 1.01])
    # a bound of 0.5 below: 0.6 is inside [0.5, 1.01]; 0.3 would not be
    assert PolicyLossConfig(mode="cispo", clip_eps=0.5, clip_eps_high=0.01).band() == pytest.approx((0.5, 1.01))


def test_sapo_gates_softly_with_the_temperature_of_the_advantage_sign() -> None:
    cfg = PolicyLossConfig(mode="sapo", sapo_temperature_pos=2.0, sapo_temperature_neg=0.5)
    per_token, grad, clipped = loss_and_grad(cfg)
    for t, (r, a) in enumerate(zip(RATIO.tolist(), ADV.tolist(), strict=True)):
        tau = 2.0 if a > 0 else 0.5
        gate = 1 / (1 + math.exp(-tau * (r - 1)))
        assert per_token[t].item() == pytest.approx(-gate * 4 / tau * a)
        assert grad[t].item() == pytest.approx(-4 * gate * (1 - gate) * r * a)
    assert clipped == 0.0
    # on-policy (r = 1) the gradient is the plain policy gradient's, -A, whatever the temperature
    _, grad, _ = loss_and_grad(cfg, old=NEW)
    assert grad.tolist() == pytest.approx((-ADV).tolist())


def test_the_dual_clip_reads_the_ratio_losses_only() -> None:
    big = torch.tensor([math.log(4.0)], dtype=torch.float64)
    zero, neg, row = torch.zeros(1, dtype=torch.float64), torch.tensor([-1.0], dtype=torch.float64), torch.zeros(1).long()
    standard = policy_loss(PolicyLossConfig(clip_eps=0.2, clip_ratio_c=3.0), big, zero, neg, rows=row)
    assert standard.per_token.item() == pytest.approx(3.0)
    sapo = policy_loss(PolicyLossConfig(mode="sapo", clip_ratio_c=3.0), big, zero, neg, rows=row)
    assert sapo.per_token.item() == pytest.approx(4 / 1.05 / (1 + math.exp(-1.05 * 3)))


def test_configs_that_do_not_run_are_refused() -> None:
    with pytest.raises(ValueError, match="policy_loss_mode"):
        PolicyLossConfig(mode="ppo")
    with pytest.raises(ValueError, match="importance_sampling_level"):
        PolicyLossConfig(level="group")
    with pytest.raises(ValueError, match="token-level"):
        PolicyLossConfig(mode="kl_cov", level="sequence")
    with pytest.raises(ValueError, match="importance_sampling_mode"):
        Mismatch(True, mode="sequence_clip")


def test_without_the_correction_the_sampler_anchors_the_ratio_and_the_kl_is_reported() -> None:
    m = Mismatch()
    anchor, weight = m.anchor(NEW, OLD, ROWS)
    assert weight is None and torch.equal(anchor, OLD)
    metrics = m.metrics()
    assert "engine/is_weight_mean" not in metrics and metrics["engine/mismatch_kl"] > 0
    m = Mismatch(correction=True, mode="sequence_mask")
    m.anchor(NEW, OLD, ROWS, record=False)  # a stand-in micro-batch records nothing
    assert m.metrics()["engine/is_weight_mean"] == 0 and m.fresh().mode == "sequence_mask"


@pytest.mark.parametrize("flags", [
    ("--importance-sampling-level", "sequence", "--clip-eps", "0.2"),
    ("--policy-loss-mode", "cispo", "--clip-eps-high", "4.0", "--importance-sampling-level", "sequence"),
    ("--policy-loss-mode", "sapo"),
    ("--importance-sampling-correction", "--importance-sampling-mode", "sequence_mask", "--kl-coef", "0.1"),
])
def test_the_backend_trains_with_each_objective(tiny_config, flags: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    """A step of the backend with the objective, micro-batched or not: the same loss and
    gradients (sequence quantities never span micro-batches), finite, and the metrics."""
    from retrain.backends.local.backend import LocalBackend
    from retrain.types import Datum

    datums = []
    g = torch.Generator().manual_seed(1)
    for i, n in enumerate((3, 5, 2, 4)):
        prompt = [5, 6, 7][: 1 + i % 3]
        tokens = prompt + torch.randint(8, 60, (n,), generator=g).tolist()
        lp = (-torch.rand(n, generator=g) * 3).tolist()
        datums.append(Datum(tokens=tokens, logprobs=[0.0] * len(prompt) + lp,
                            advantages=[0.0] * len(prompt) + [(-1.0) ** i * (0.5 + i)] * n,
                            mask=[0] * len(prompt) + [1] * n))
    base = ("--temperature", "1.0", "--top-p", "1.0", *flags)
    outs, grads = [], []
    for micro in ("0", "1"):
        backend = LocalBackend(tiny_config(*base, "--backend-opt", f"train_microbatch_size={micro}"))
        backend.model.zero_grad(set_to_none=True)
        out = backend.policy_gradients(datums)
        outs.append(out)
        grads.append({n: p.grad.clone() for n, p in backend.model.named_parameters() if p.grad is not None})
    assert math.isfinite(outs[0].loss) and outs[0].loss == pytest.approx(outs[1].loss, abs=1e-6)
    assert grads[0] and set(grads[0]) == set(grads[1])
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-6), name
    assert "engine/mismatch_kl" in outs[0].metrics
    if "--importance-sampling-correction" in flags:
        assert "engine/is_masked_fraction" in outs[0].metrics and "kl/mean" in outs[0].metrics
