"""One step's loss and LoRA gradients equal a hand-computed reference for each loss mode.

The reference recomputes everything the naive way: full logits, log_softmax, gather, the
spec's per-token formula written out by hand, the global token mean, autograd. The backend's
update is read back with SGD at lr = 1 (the parameter change is minus the gradient).
"""

from __future__ import annotations

import pytest
import torch

from retrain.backends.local.backend import LocalBackend
from retrain.backends.local.batch import collate
from retrain.types import Datum


def datums(backend: LocalBackend) -> list[Datum]:
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(5):
        prompt = backend.tokenizer.encode_prompt(f"{i}*{i}=")
        comp = torch.randint(6, 100, (2 + i,), generator=g).tolist()
        adv = [0.0] * len(prompt) + (torch.randn(len(comp), generator=g) * 2).tolist()
        old = [0.0] * len(prompt) + (-3.0 - torch.rand(len(comp), generator=g)).tolist()
        out.append(Datum(tokens=prompt + comp, logprobs=old, advantages=adv))
    return out


def reference_loss(mode: str, new: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, selected: torch.Tensor,
                   eps: float, eps_high: float, coef: float) -> torch.Tensor:
    r = torch.exp(new - old)
    if mode == "standard":
        per = -torch.minimum(r * adv, torch.clamp(r, 1 - eps, 1 + eps_high) * adv)
    elif mode == "kl_cov":
        per = -r * adv + coef * (new - old).abs() * selected
    else:  # clip_cov, eps = 1.0 when clip_eps is 0
        clipped = torch.maximum(-r * adv, -torch.clamp(r, 0.0, 2.0) * adv)
        per = torch.where(selected, torch.zeros_like(clipped), clipped)
    return per.sum() / new.numel()


@pytest.mark.parametrize("mode,flags", [
    ("standard", ["--clip-eps", "0.2", "--clip-eps-high", "0.28"]),
    ("kl_cov", ["--kl-cov-percent", "30", "--kl-cov-coef", "0.5"]),
    ("clip_cov", ["--clip-cov-ratio", "0.3", "--clip-cov-min", "-1000", "--clip-cov-max", "1000"]),
])
def test_loss_and_lora_gradients_match_reference(tiny_config, mode: str, flags: list[str]) -> None:  # type: ignore[no-untyped-def]
    backend = LocalBackend(tiny_config("--policy-loss-mode", mode, "--temperature", "1.0", "--top-p", "1.0", *flags))
    data = datums(backend)
    lora = {n: p for n, p in backend.model.named_parameters() if p.requires_grad}
    with torch.no_grad():  # non-zero B so that A also gets a gradient
        for n, p in lora.items():
            if "lora_B" in n:
                p.normal_(0, 0.02)
    before = {n: p.detach().clone() for n, p in lora.items()}
    gen_state = backend.select_generator.get_state()

    # the reference, computed first from the same weights
    batch = collate(data, backend.tokenizer.pad_token_id, backend.device)
    logits = backend.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float()
    new = torch.log_softmax(logits[:, :-1], -1).gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)[batch.action]
    old, adv = batch.old_logprobs[batch.action], batch.advantages[batch.action]
    selected = torch.zeros_like(new, dtype=torch.bool)
    if mode == "kl_cov":
        cov = (adv - adv.mean()) * (new.detach() - new.detach().mean())
        selected[torch.topk(cov, max(1, int(new.numel() * 30 / 100))).indices] = True
    elif mode == "clip_cov":
        r = torch.exp(new.detach() - old)
        by_origin = (-torch.clamp(r, 0.0, 2.0) * adv) > (-r * adv)
        eligible = (~by_origin).nonzero().squeeze(-1)
        g = torch.Generator().set_state(gen_state)
        want = min(max(1, int(new.numel() * 0.3)), eligible.numel())
        selected[eligible[torch.randperm(eligible.numel(), generator=g)[:want]]] = True
    ref = reference_loss(mode, new, old, adv, selected, 0.2, 0.28, 0.5)
    grads = torch.autograd.grad(ref, list(lora.values()))
    backend.model.zero_grad(set_to_none=True)

    backend.optimizer = torch.optim.SGD(list(lora.values()), lr=1.0)
    out = backend.train_step(data, 1.0, 0.0)
    assert out.loss == pytest.approx(float(ref.detach()), rel=1e-4, abs=1e-6)
    for (name, p), grad in zip(lora.items(), grads, strict=True):
        assert torch.allclose(before[name] - p.detach(), grad, atol=1e-5, rtol=1e-4), name
    assert any(g.abs().sum() > 0 for g in grads)
