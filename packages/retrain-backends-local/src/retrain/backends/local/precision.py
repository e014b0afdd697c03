"""The dtype of a LoRA run's frozen base weights (`train_base_dtype`).

On CUDA the model computes under bf16 autocast (retrain.inference_engine.pytorch.device), which rounds
every fp32 weight to bf16 at each product: keeping the frozen base in bf16 gives the same
products from half the memory and bandwidth, with no cast per step. The adapters (and so the
optimizer's state and every gradient step) stay fp32, and so do buffers such as rotary
frequencies. The sampler reads the same module, so it samples from the same bf16 weights.
On the CPU there is no autocast and bf16 products are slow: fp32 stays the default there, and
bf16 is refused.
"""

from __future__ import annotations

import torch

from retrain.errors import UserError

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def base_dtype(option: str, device: torch.device, *, lora: bool) -> torch.dtype:
    """The frozen weights' dtype for `train_base_dtype = option`."""
    if option == "auto":
        wanted = lora and device.type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if wanted else torch.float32
    if option not in DTYPES:
        raise UserError(f"[backend.options] train_base_dtype = {option!r}: one of auto, bfloat16, float32")
    if option == "bfloat16" and device.type != "cuda":
        raise UserError("[backend.options] train_base_dtype = \"bfloat16\" needs a CUDA device (the CPU trains "
                        "without autocast)", hint='train_base_dtype = "auto"')
    if option == "bfloat16" and not lora:
        raise UserError("[backend.options] train_base_dtype = \"bfloat16\" is for LoRA runs: with "
                        "train_full_model = true every weight trains", hint='train_base_dtype = "auto"')
    return DTYPES[option]


def cast_frozen(model: torch.nn.Module, dtype: torch.dtype) -> int:
    """Cast the floating parameters that do not train to `dtype`, in place; how many changed."""
    changed = 0
    for p in model.parameters():
        if not p.requires_grad and p.is_floating_point() and p.dtype != dtype:
            p.data = p.data.to(dtype)
            changed += 1
    return changed
