"""Fused LoRA linear (torch path) against the unfused reference, and the peft hook."""

from __future__ import annotations

import pytest
import torch

from retrain.kernels.accelerators import kernel_metrics, reset_kernel_metrics
from retrain.kernels.logprobs import reference_selected_logprobs, selected_logprobs
from retrain.kernels.lora import (
    lm_head_operands,
    lora_linear,
    patch_peft_lora,
    reference_lora_linear,
    unpatch_peft_lora,
)

# (x/W dtype, A/B dtype): fp32; a bf16 model with fp32 adapters (peft's default autocast);
# an all-bf16 model.
DTYPES = [(torch.float32, torch.float32), (torch.bfloat16, torch.float32),
          (torch.bfloat16, torch.bfloat16)]
# Output tolerance: one rounding to the output dtype (relative to the largest |y|).
OUT_TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def _operands(m, k, o, r, x_dtype, a_dtype, train_base, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(3, m, k, generator=gen).to(x_dtype).requires_grad_()
    w = (torch.randn(o, k, generator=gen) / k**0.5).to(x_dtype).requires_grad_(train_base)
    b = torch.randn(o, generator=gen).to(x_dtype).requires_grad_(train_base)
    a = (torch.randn(r, k, generator=gen) / k**0.5).to(a_dtype).requires_grad_()
    bb = torch.randn(o, r, generator=gen).to(a_dtype).requires_grad_()
    g = torch.randn(3, m, o, generator=gen).to(x_dtype)
    return x, w, b, a, bb, g


def check_lora(path, x_dtype, a_dtype, train_base, assert_near, shape=(13, 40, 24, 5)):
    m, k, o, r = shape
    x, w, b, a, bb, g = _operands(m, k, o, r, x_dtype, a_dtype, train_base)
    y = lora_linear(x, w, a, bb, 0.75, b, path=path)
    assert y.dtype == x_dtype and y.shape == (3, m, o)
    y.backward(g)
    leaves = [x, w, b, a, bb]
    got = [t.grad for t in leaves]
    # The reference in fp32 on the same (rounded) values: the fused form accumulates in fp32.
    ref_leaves = [t.detach().float().requires_grad_(t.requires_grad) for t in leaves]
    rx, rw, rb, ra, rbb = ref_leaves
    ref = reference_lora_linear(rx, rw, ra, rbb, 0.75, rb)
    ref.backward(g.float())
    assert_near(y, ref, OUT_TOL[x_dtype], "output")
    for name, leaf, mine, theirs in zip(["x", "W", "b", "A", "B"], leaves, got, ref_leaves,
                                        strict=True):
        if not leaf.requires_grad:
            assert mine is None, name
            continue
        assert mine is not None and mine.dtype == leaf.dtype, name
        assert_near(mine, theirs.grad, OUT_TOL[leaf.dtype], f"grad {name}")


@pytest.mark.parametrize(("x_dtype", "a_dtype"), DTYPES, ids=str)
@pytest.mark.parametrize("train_base", [False, True], ids=["frozen-base", "trained-base"])
def test_lora_linear_matches_reference(assert_near, x_dtype, a_dtype, train_base):
    check_lora("torch", x_dtype, a_dtype, train_base, assert_near)
    assert kernel_metrics()["kernels/lora_path"] == "torch"


def test_lora_linear_rejects_mismatched_shapes():
    x, w, _, a, bb, _ = _operands(4, 8, 6, 2, torch.float32, torch.float32, False)
    with pytest.raises(ValueError, match="in-features"):
        lora_linear(x, w[:, :4], a, bb, 1.0)
    with pytest.raises(ValueError, match="B shape"):
        lora_linear(x, w, a, bb[:, :1], 1.0)


# -- peft ----------------------------------------------------------------------------------------

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _tiny_peft_model(dtype=torch.float32, dropout=0.0, targets=TARGETS):
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    base = transformers.Qwen3ForCausalLM(config).to(dtype)
    lora = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout, target_modules=targets)
    model = peft.get_peft_model(base, lora)
    with torch.no_grad():  # peft starts B at zero; a random B makes the LoRA branch count
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.2)
    return model


def _step(model, ids):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    logits = model(input_ids=ids).logits
    logits.float().logsumexp(-1).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_patched_peft_model_matches_peft(assert_near, dtype):
    model = _tiny_peft_model(dtype)
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(0))
    ref_logits, ref_grads = _step(model, ids)
    assert patch_peft_lora(model, path="torch") == 14
    assert patch_peft_lora(model) == 0  # idempotent
    reset_kernel_metrics()
    logits, grads = _step(model, ids)
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


def test_active_dropout_falls_back_to_peft(assert_near):
    model = _tiny_peft_model(dropout=0.3)
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(0))
    model.train()
    ref_logits, ref_grads = _step(model, ids)
    patch_peft_lora(model, path="torch")
    reset_kernel_metrics()
    logits, grads = _step(model, ids)  # same seed: peft's own dropout masks
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


def test_disabled_adapter_falls_back(assert_near):
    model = _tiny_peft_model()
    ids = torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(0))
    patch_peft_lora(model, path="torch")
    reset_kernel_metrics()
    with torch.no_grad(), model.disable_adapter():
        patched = model(input_ids=ids).logits
    assert kernel_metrics()["kernels/lora_path"] == "peft"
    unpatch_peft_lora(model)
    with torch.no_grad(), model.disable_adapter():
        assert_near(patched, model(input_ids=ids).logits, 0.0, "logits")


def test_lm_head_operands_feed_selected_logprobs(assert_near):
    model = _tiny_peft_model(targets=[*TARGETS, "lm_head"])
    inner = model.base_model.model
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(0))
    hidden = inner.model(input_ids=ids).last_hidden_state.reshape(-1, 32)
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
