"""Fused LoRA linear (torch path) against the unfused reference, and the peft hook."""

from __future__ import annotations

import pytest
import torch

from retrain.kernels.accelerators import kernel_metrics, reset_kernel_metrics
from retrain.kernels.logprobs import reference_selected_logprobs, selected_logprobs
from retrain.kernels.lora import lm_head_operands, lora_linear, patch_peft_lora, unpatch_peft_lora

# (x/W dtype, A/B dtype): fp32; a bf16 model with fp32 adapters (peft's default autocast);
# an all-bf16 model.
DTYPES = [(torch.float32, torch.float32), (torch.bfloat16, torch.float32),
          (torch.bfloat16, torch.bfloat16)]


@pytest.mark.parametrize(("x_dtype", "a_dtype"), DTYPES, ids=str)
@pytest.mark.parametrize("train_base", [False, True], ids=["frozen-base", "trained-base"])
def test_lora_linear_matches_reference(check_lora, x_dtype, a_dtype, train_base):
    check_lora("torch", x_dtype, a_dtype, train_base)
    assert kernel_metrics()["kernels/lora_path"] == "torch"


def test_lora_linear_rejects_mismatched_shapes(lora_operands):
    x, w, _, a, bb, _ = lora_operands(4, 8, 6, 2, torch.float32, torch.float32, False)
    with pytest.raises(ValueError, match="in-features"):
        lora_linear(x, w[:, :4], a, bb, 1.0)
    with pytest.raises(ValueError, match="B shape"):
        lora_linear(x, w, a, bb[:, :1], 1.0)


def _ids(*shape: int) -> torch.Tensor:
    return torch.randint(0, 64, shape, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_patched_peft_model_matches_peft(tiny_peft_model, peft_step, assert_near, dtype):
    model = tiny_peft_model(dtype)
    ids = _ids(2, 9)
    ref_logits, ref_grads = peft_step(model, ids)
    assert patch_peft_lora(model, path="torch") == 14
    assert patch_peft_lora(model) == 0  # idempotent
    reset_kernel_metrics()
    logits, grads = peft_step(model, ids)
    metrics = kernel_metrics()
    assert metrics["kernels/lora_path"] == "torch"
    assert metrics["kernels/lora_torch_calls"] == 14
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    assert_near(logits, ref_logits, tol, "logits")
    assert set(grads) == set(ref_grads) and any("lora_A" in n for n in grads)
    for name, grad in grads.items():
        assert_near(grad, ref_grads[name], tol, name)
    assert unpatch_peft_lora(model) == 14
    assert "forward" not in vars(model.base_model.model.model.layers[0].self_attn.q_proj)


def test_active_dropout_falls_back_to_peft(tiny_peft_model, peft_step, assert_near):
    model = tiny_peft_model(dropout=0.3)
    ids = _ids(2, 9)
    model.train()
    ref_logits, ref_grads = peft_step(model, ids)
    patch_peft_lora(model, path="torch")
    reset_kernel_metrics()
    logits, grads = peft_step(model, ids)  # same seed: peft's own dropout masks
    assert kernel_metrics()["kernels/lora_path"] == "peft"
    assert_near(logits, ref_logits, 1e-6, "logits")
    for name, grad in grads.items():
        assert_near(grad, ref_grads[name], 1e-6, name)

    model.eval()  # dropout is the identity in eval mode: the fused path is exact again
    reset_kernel_metrics()
    with torch.no_grad():
        fused = model(input_ids=ids).logits
    assert kernel_metrics()["kernels/lora_path"] == "torch"
    unpatch_peft_lora(model)
    with torch.no_grad():
        assert_near(fused, model(input_ids=ids).logits, 1e-5, "eval logits")


def test_disabled_adapter_falls_back(tiny_peft_model, assert_near):
    model = tiny_peft_model()
    ids = _ids(1, 5)
    patch_peft_lora(model, path="torch")
    reset_kernel_metrics()
    with torch.no_grad(), model.disable_adapter():
        patched = model(input_ids=ids).logits
    assert kernel_metrics()["kernels/lora_path"] == "peft"
    unpatch_peft_lora(model)
    with torch.no_grad(), model.disable_adapter():
        assert_near(patched, model(input_ids=ids).logits, 0.0, "logits")


def test_lm_head_operands_feed_selected_logprobs(tiny_peft_model, assert_near):
    model = tiny_peft_model(targets=["q_proj", "lm_head"])
    inner = model.base_model.model
    hidden = inner.model(input_ids=_ids(2, 7)).last_hidden_state.reshape(-1, 32)
    targets = torch.randint(0, 64, (14,), generator=torch.Generator().manual_seed(1))
    operands = lm_head_operands(inner.lm_head)
    assert operands is not None and operands[2] is not None
    weight, bias, lora = operands
    lp = selected_logprobs(hidden, weight, targets, bias=bias, lora=lora, path="torch")
    full = torch.log_softmax(inner.lm_head(hidden).float(), dim=-1)
    assert_near(lp, full.gather(1, targets[:, None]).squeeze(1), 5e-5, "logprobs")
    ref = reference_selected_logprobs(hidden, weight, targets, bias=bias, lora=lora)
    assert_near(lp, ref, 5e-5, "logprobs vs reference")

    plain = torch.nn.Linear(4, 3)
    assert lm_head_operands(plain) == (plain.weight, plain.bias, None)
    with model.disable_adapter():
        assert lm_head_operands(inner.lm_head)[2] is None


def test_detached_input_gets_the_base_gradient_alone(lora_operands, assert_near):
    """`detach_input`: A, B, W and b get the gradients they get without it; x gets W's alone."""
    x, w, b, a, bb, g = lora_operands(13, 40, 50, 5, torch.float32, torch.float32, True)
    lora_linear(x, w, a, bb, 0.75, b, path="torch").backward(g)
    plain = {"w": w.grad.clone(), "b": b.grad.clone(), "a": a.grad.clone(), "bb": bb.grad.clone()}
    for t in (x, w, b, a, bb):
        t.grad = None
    y = lora_linear(x, w, a, bb, 0.75, b, path="torch", detach_input=True)
    y.backward(g)
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, b, a, bb)]
    rx, rw, rb, ra, rbb = leaves
    ref = torch.nn.functional.linear(rx, rw, rb) + 0.75 * torch.nn.functional.linear(
        torch.nn.functional.linear(rx.detach(), ra), rbb)
    assert_near(y.detach(), ref.detach(), 1e-5, "y")
    ref.backward(g)
    assert_near(x.grad, rx.grad, 1e-5, "x")
    assert_near(x.grad, g @ w.detach(), 1e-5, "x is W's alone")
    for name, t in (("w", w), ("b", b), ("a", a), ("bb", bb)):
        assert_near(t.grad, plain[name], 1e-5, name)


def test_detach_lora_input_agrees_on_the_fused_and_the_peft_path(tiny_peft_model, peft_step, assert_near):
    from retrain.kernels.lora import detach_lora_input

    ids = _ids(2, 9)
    plain = tiny_peft_model()
    _, plain_grads = peft_step(plain, ids)
    model = tiny_peft_model()
    assert detach_lora_input(model) == 14 and detach_lora_input(model) == 0
    _, peft_grads = peft_step(model, ids)  # peft's forward, the lora_A pre-hooks detach
    patch_peft_lora(model, path="torch")
    _, fused_grads = peft_step(model, ids)
    assert set(fused_grads) == set(peft_grads)
    for name, grad in fused_grads.items():
        assert_near(grad, peft_grads[name], 1e-5, name)
    # the last layer's LoRA sees the same upstream gradient either way; the first layer's does not
    first = next(n for n in peft_grads if "layers.0." in n and "lora_A" in n)
    last = next(n for n in peft_grads if "layers.1.mlp.down_proj" in n and "lora_B" in n)
    assert_near(peft_grads[last], plain_grads[last], 1e-5, last)
    assert not torch.allclose(peft_grads[first], plain_grads[first], atol=1e-6)


def test_a_detached_lm_head_delta_detaches_its_hidden_state(tiny_peft_model):
    from retrain.kernels.lora import detach_lora_input

    model = tiny_peft_model(targets=["q_proj", "lm_head"])
    head = model.base_model.model.lm_head
    h = torch.randn(3, 32, requires_grad=True)
    (_, _, delta) = lm_head_operands(head)
    assert delta is not None and delta.dropout is not None and delta.dropout(h).requires_grad
    assert detach_lora_input(model) == 3  # two q_proj layers and the head
    (_, _, delta) = lm_head_operands(head)
    assert delta is not None and delta.dropout is not None and not delta.dropout(h).requires_grad
