"""The Triton fused-LoRA kernel under Triton's CPU interpreter, against the unfused reference."""

from __future__ import annotations

import os

import pytest
import torch

from retrain.kernels.accelerators import kernel_metrics, reset_kernel_metrics
from retrain.kernels.lora import lora_linear, patch_peft_lora, reference_lora_linear

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="needs TRITON_INTERPRET=1 (run by test_kernels_triton.py)")

DTYPES = [(torch.float32, torch.float32), (torch.bfloat16, torch.float32),
          (torch.bfloat16, torch.bfloat16)]
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


@pytest.mark.parametrize(("x_dtype", "a_dtype"), DTYPES, ids=str)
@pytest.mark.parametrize("train_base", [False, True], ids=["frozen-base", "trained-base"])
def test_lora_linear_matches_reference(assert_near, x_dtype, a_dtype, train_base):
    # M=3·13 rows, K=40, O=50: partial tiles on every axis (interpreter tiles 16×32×16); r=5.
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 13, 40, generator=gen).to(x_dtype).requires_grad_()
    w = (torch.randn(50, 40, generator=gen) / 40**0.5).to(x_dtype).requires_grad_(train_base)
    b = torch.randn(50, generator=gen).to(x_dtype).requires_grad_(train_base)
    a = (torch.randn(5, 40, generator=gen) / 40**0.5).to(a_dtype).requires_grad_()
    bb = torch.randn(50, 5, generator=gen).to(a_dtype).requires_grad_()
    g = torch.randn(3, 13, 50, generator=gen).to(x_dtype)
    leaves = [x, w, b, a, bb]
    y = lora_linear(x, w, a, bb, 0.75, b, path="triton")
    y.backward(g)
    assert kernel_metrics()["kernels/lora_path"] == "triton"
    refs = [t.detach().float().requires_grad_(t.requires_grad) for t in leaves]
    ref = reference_lora_linear(refs[0], refs[1], refs[3], refs[4], 0.75, refs[2])
    ref.backward(g.float())
    assert y.dtype == x_dtype
    assert_near(y, ref, TOL[x_dtype], "output")
    for name, leaf, r in zip(["x", "W", "b", "A", "B"], leaves, refs, strict=True):
        if leaf.requires_grad:
            assert leaf.grad is not None and leaf.grad.dtype == leaf.dtype, name
            assert_near(leaf.grad, r.grad, TOL[leaf.dtype], f"grad {name}")
        else:
            assert leaf.grad is None, name


def test_patched_peft_model_runs_the_kernel(assert_near):
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    model = peft.get_peft_model(transformers.Qwen3ForCausalLM(config),
                                peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj",
                                                "v_proj", "down_proj"]))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.2)
    ids = torch.randint(0, 64, (1, 6), generator=torch.Generator().manual_seed(0))

    def step():
        model.zero_grad(set_to_none=True)
        logits = model(input_ids=ids).logits
        logits.logsumexp(-1).sum().backward()
        return logits.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

    ref_logits, ref_grads = step()
    assert patch_peft_lora(model, path="triton") == 3
    reset_kernel_metrics()
    logits, grads = step()
    assert kernel_metrics()["kernels/lora_triton_calls"] == 3
    assert_near(logits, ref_logits, 1e-5, "logits")
    for name, grad in grads.items():
        assert_near(grad, ref_grads[name], 1e-5, name)
