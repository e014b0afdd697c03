"""retrain.kernels: selected-token logprobs and fused LoRA, Triton on CUDA with exact torch paths.

The public names resolve lazily, so `import retrain.kernels` imports neither torch nor triton.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "selected_logprobs": "logprobs",
    "reference_selected_logprobs": "logprobs",
    "LoRAHead": "lora_head",
    "lora_linear": "lora",
    "reference_lora_linear": "lora",
    "patch_peft_lora": "lora",
    "unpatch_peft_lora": "lora",
    "detach_lora_input": "lora",
    "lm_head_operands": "lora",
    "set_kernel_mode": "accelerators",
    "kernel_mode": "accelerators",
    "kernel_metrics": "accelerators",
    "reset_kernel_metrics": "accelerators",
    "unrecorded": "accelerators",
}

__all__ = [
    "LoRAHead",
    "detach_lora_input",
    "kernel_metrics",
    "kernel_mode",
    "lm_head_operands",
    "lora_linear",
    "patch_peft_lora",
    "reference_lora_linear",
    "reference_selected_logprobs",
    "reset_kernel_metrics",
    "selected_logprobs",
    "set_kernel_mode",
    "unpatch_peft_lora",
    "unrecorded",
]

if TYPE_CHECKING:
    from retrain.kernels.accelerators import (
        kernel_metrics,
        kernel_mode,
        reset_kernel_metrics,
        set_kernel_mode,
        unrecorded,
    )
    from retrain.kernels.logprobs import reference_selected_logprobs, selected_logprobs
    from retrain.kernels.lora import (
        detach_lora_input,
        lm_head_operands,
        lora_linear,
        patch_peft_lora,
        reference_lora_linear,
        unpatch_peft_lora,
    )
    from retrain.kernels.lora_head import LoRAHead


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'retrain.kernels' has no attribute {name!r}")
    return getattr(importlib.import_module(f"retrain.kernels.{module}"), name)
