"""The local backend's memory policy on CUDA: the allocator's expandable segments, emptying the
cache after each sample and train call, gradient checkpointing (reentrant or not, the last N
layers left out) and offloading the activations autograd saves to CPU memory.

Each is a `[backend.options]` key (docs/backends.md); on the CPU none of them changes anything
and loading warns so (`cuda_only` in retrain.backends.local.schema.LOCAL_OPTIONS).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

log = logging.getLogger(__name__)

ALLOC_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def expandable_segments(mode: str, skip_last_n: int) -> dict[str, int]:
    """Turn on the CUDA allocator's expandable segments: `on` always, `auto` when some layers run
    without checkpointing (their activations grow and shrink the pool step by step). An
    allocator setting already in the environment wins. Metrics: what was asked and done."""
    preset = any("expandable_segments" in os.environ.get(v, "") for v in ALLOC_VARS)
    want = mode == "on" or (mode == "auto" and skip_last_n > 0)
    done = 0
    if want and not preset and torch.cuda.is_available():
        setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None) \
            or torch.cuda.memory._set_allocator_settings
        try:
            setter("expandable_segments:True")
            done = 1
        except (RuntimeError, AttributeError) as e:  # an older allocator: the run goes on without
            log.warning("could not turn on CUDA expandable segments: %s", e)
    return {"local_expandable_segments_requested": int(want), "local_expandable_segments_enabled": done,
            "local_expandable_segments_env_preset": int(preset)}


def empty_cache(device: torch.device, enabled: bool) -> None:
    """Hand the caching allocator's free blocks back after a sample or train call, so the next
    phase (a different shape of activations) starts from a compact pool."""
    if enabled and device.type == "cuda":
        torch.cuda.empty_cache()


def configure_checkpointing(model: Any, enabled: bool, use_reentrant: str, skip_last_n: int) -> dict[str, int]:
    """Gradient checkpointing on `model` (a transformers model, peft-wrapped or not).

    `use_reentrant` "true"/"false" picks torch.utils.checkpoint's implementation; "auto" keeps
    transformers' default. The last `skip_last_n` checkpointed layers recompute nothing: their
    activations stay in memory, which buys back their recomputation time where memory allows.
    Metrics: layers that checkpoint, that could, and that were left out."""
    if not enabled:  # a model loads without it; a variant's own checkpointing is left alone
        return {"local_checkpointed_layers": 0, "local_checkpointable_layers": 0, "local_checkpoint_skipped_layers": 0}
    kwargs = {} if use_reentrant == "auto" else {"gradient_checkpointing_kwargs": {"use_reentrant": use_reentrant == "true"}}
    model.gradient_checkpointing_enable(**kwargs)
    # (transformers makes the embeddings' output require grad, which reentrant checkpointing needs
    # for the LoRA weights inside checkpointed layers to get gradients: the test checks they do)
    from transformers.modeling_layers import GradientCheckpointingLayer

    # the repeated blocks, in model order (transformers flags the backbone too; it is not a layer)
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    skipped = layers[len(layers) - skip_last_n:] if skip_last_n > 0 else []
    for m in skipped:
        m.gradient_checkpointing = False
    return {"local_checkpointed_layers": sum(bool(m.gradient_checkpointing) for m in layers),
            "local_checkpointable_layers": len(layers), "local_checkpoint_skipped_layers": len(skipped)}


@dataclass
class Offload:
    """`[backend.options] train_save_on_cpu`: the tensors autograd saves during a training forward
    wait for the backward in CPU memory (pinned: copied back without blocking). With
    `min_numel` > 0 only tensors of at least that many elements move; small ones are not worth
    a copy each way."""

    enabled: bool
    pin_memory: bool = True
    min_numel: int = 0
    offloaded: int = 0  # tensors moved since the last `take`
    offloaded_bytes: int = 0

    def context(self, device: torch.device) -> contextlib.AbstractContextManager[Any]:
        if not self.enabled or device.type != "cuda":
            return contextlib.nullcontext()
        if self.min_numel <= 0:
            return torch.autograd.graph.save_on_cpu(pin_memory=self.pin_memory)
        return self._selective()

    @contextlib.contextmanager
    def _selective(self) -> Iterator[None]:
        def pack(t: torch.Tensor) -> tuple[torch.device, torch.Tensor]:
            if t.device.type != "cuda" or t.numel() < self.min_numel:
                return t.device, t
            host = torch.empty(t.size(), dtype=t.dtype, layout=t.layout, pin_memory=self.pin_memory)
            host.copy_(t, non_blocking=self.pin_memory)
            self.offloaded += 1
            self.offloaded_bytes += t.numel() * t.element_size()
            return t.device, host

        def unpack(packed: tuple[torch.device, torch.Tensor]) -> torch.Tensor:
            device, t = packed
            return t.to(device, non_blocking=self.pin_memory)

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            yield

    def take(self) -> dict[str, int]:
        out = {"local_saved_tensors_offloaded": self.offloaded, "local_saved_bytes_offloaded": self.offloaded_bytes}
        self.offloaded = self.offloaded_bytes = 0
        return out
