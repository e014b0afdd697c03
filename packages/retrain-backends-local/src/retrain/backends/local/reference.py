"""The reference policy of `[training] kl_coef`: the base model the run started from.

With LoRA the reference is the same module with its adapter disabled, so no second copy of
the weights exists; the patched LoRA kernels honour `disable_adapters` like peft's own layers.
Full fine-tuning keeps a frozen copy made before the first update (twice the weights' memory).
Reference logprobs never carry a gradient.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator

import torch


class Reference:
    def __init__(self, model: torch.nn.Module, *, lora: bool) -> None:
        self.lora = lora
        self.frozen: torch.nn.Module | None = None
        if not lora:
            self.frozen = copy.deepcopy(model).eval()
            for p in self.frozen.parameters():
                p.requires_grad_(False)

    @contextlib.contextmanager
    def model(self, policy: torch.nn.Module) -> Iterator[torch.nn.Module]:
        if self.frozen is not None:
            yield self.frozen
            return
        with policy.disable_adapter():  # type: ignore[operator]
            yield policy

    def logprobs(self, policy: torch.nn.Module, compute: Callable[[torch.nn.Module], torch.Tensor]) -> torch.Tensor:
        """`compute(model)` on the reference, without gradient."""
        with torch.no_grad(), self.model(policy) as ref:
            return compute(ref).float()
