"""The Triton fused-LoRA kernel under Triton's CPU interpreter, against the unfused reference.

Shapes cross every tile edge (interpreter tiles 16 × 32 × 16): M = 3·13 rows, K = 40, O = 50.
"""

from __future__ import annotations

import os

import pytest
import torch

from retrain.kernels.accelerators import kernel_metrics, reset_kernel_metrics
from retrain.kernels.lora import patch_peft_lora

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="needs TRITON_INTERPRET=1 (run by test_kernels_triton.py)")

# (x/W dtype, A/B dtype): fp32; a bf16 model with fp32 adapters (peft's default autocast);
# an all-bf16 model.
DTYPES = [(torch.float32, torch.float32), (torch.bfloat16, torch.float32),
          (torch.bfloat16, torch.bfloat16)]


@pytest.mark.parametrize(("x_dtype", "a_dtype"), DTYPES, ids=str)
@pytest.mark.parametrize("train_base", [False, True], ids=["frozen-base", "trained-base"])
def test_lora_linear_matches_reference(check_lora, x_dtype, a_dtype, train_base):
    check_lora("triton", x_dtype, a_dtype, train_base)
    assert kernel_metrics()["kernels/lora_path"] == "triton"


def test_patched_peft_model_runs_the_kernel(tiny_peft_model, peft_step, assert_near):
    model = tiny_peft_model(targets=["q_proj", "v_proj", "down_proj"], layers=1)
    ids = torch.randint(0, 64, (1, 6), generator=torch.Generator().manual_seed(0))
    ref_logits, ref_grads = peft_step(model, ids)
    assert patch_peft_lora(model, path="triton") == 3
    reset_kernel_metrics()
    logits, grads = peft_step(model, ids)
    assert kernel_metrics()["kernels/lora_triton_calls"] == 3
    assert_near(logits, ref_logits, 1e-5, "logits")
    for name, grad in grads.items():
        assert_near(grad, ref_grads[name], 1e-5, name)
