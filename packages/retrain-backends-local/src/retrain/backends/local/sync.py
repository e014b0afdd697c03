"""A merged copy of the model for sampling: W + s·B·A per LoRA layer, refreshed before each
sampling call.

Decoding runs many small forwards where a LoRA layer costs three products and Python glue
instead of one. Sampling from a plain copy whose linear weights hold the merged values keeps
the training model untouched (merging in place and back would drift the frozen base weights
by rounding). The copy doubles the model's memory, so it is used on the CPU (small models)
unless the `sample_merged_lora` option says otherwise.
"""

from __future__ import annotations

import copy
from typing import Any

import torch


class MergedSampler:
    def __init__(self, base: torch.nn.Module) -> None:
        """`base` is the plain model *before* LoRA wrapping; it is copied."""
        self.model = copy.deepcopy(base)
        self.model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.pairs: list[tuple[Any, torch.nn.Linear]] = []

    def bind(self, peft_model: torch.nn.Module) -> int:
        """Pair every LoRA layer of the wrapped model with the copy's linear of the same name."""
        from peft.tuners.lora import LoraLayer

        targets = dict(self.model.named_modules())
        prefix = "base_model.model."
        for name, module in peft_model.named_modules():
            if isinstance(module, LoraLayer) and name.startswith(prefix):
                linear = targets.get(name[len(prefix):])
                if isinstance(linear, torch.nn.Linear):
                    self.pairs.append((module, linear))
        return len(self.pairs)

    @torch.no_grad()
    def refresh(self) -> None:
        for layer, linear in self.pairs:
            merged = layer.base_layer.weight.clone()
            for adapter in layer.active_adapters:
                a = layer.lora_A[adapter].weight
                b = layer.lora_B[adapter].weight
                merged.addmm_(b.to(merged.dtype), a.to(merged.dtype), alpha=layer.scaling[adapter])  # bf16 base
            linear.weight.copy_(merged)
