"""A merged copy of the model for sampling: W + s·B·A per LoRA layer, from the live adapter
(refreshed before each sampling call) or from a published version.

Decoding runs many small forwards where a LoRA layer costs three products and Python glue
instead of one. Sampling from a plain copy whose linear weights hold the merged values keeps
the training model untouched (merging in place and back would drift the frozen base weights
by rounding). The copy doubles the model's memory, so it is used on the CPU (small models)
unless the `sample_merged_lora` option says otherwise, and always to sample ahead in-process
(`AheadSampler`).

peft also adapts parameters rather than linear layers: the fused experts of a mixture-of-experts
model where its v4-to-v5 target conversion turns `gate_proj`/`up_proj`/`down_proj` into the
experts' `gate_up_proj` and `down_proj` (DeepSeek-V3, GLM-4.5, Qwen3-Next: every model type
transformers converts as Qwen2-MoE). Their deltas are merged into the copy's parameters the same
way, so the copy samples what the trained model computes.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

import torch

from retrain.backends.local.versions import Snapshot, VersionStore
from retrain.backends.seeds import request_seeds
from retrain.types import SamplingParams

PREFIX = "base_model.model."  # peft's prefix of the wrapped model's module names


class MergedSampler:
    def __init__(self, base: torch.nn.Module) -> None:
        """`base` is the plain model *before* LoRA wrapping; it is copied."""
        self.model = copy.deepcopy(base)
        self.model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.pairs: list[tuple[str, Any, torch.nn.Linear]] = []  # (module name, LoRA layer, the copy's linear)
        #: (module name, peft's wrapper of a parameter, the copy's parameter)
        self.params: list[tuple[str, Any, torch.nn.Parameter]] = []

    def bind(self, peft_model: torch.nn.Module) -> int:
        """Pair every LoRA layer of the wrapped model with the copy's linear of the same name."""
        from peft.tuners.lora import LoraLayer, ParamWrapper

        targets = dict(self.model.named_modules())
        for name, module in peft_model.named_modules():
            if isinstance(module, ParamWrapper) and name.startswith(PREFIX):
                # nested wrappers (one per parameter of a module) all name the module they wrap
                owner = targets.get(name[len(PREFIX):].replace(".base_layer", ""))
                param = getattr(owner, module.parameter_name, None)
                if not isinstance(param, torch.nn.Parameter) or param.shape != module.get_param().shape:
                    raise RuntimeError(f"the sampling copy has no parameter {module.parameter_name} of {name}")
                self.params.append((name, module, param))
            elif isinstance(module, LoraLayer) and name.startswith(PREFIX):
                linear = targets.get(name[len(PREFIX):])
                if isinstance(linear, torch.nn.Linear):
                    self.pairs.append((name, module, linear))
        return len(self.pairs) + len(self.params)

    @torch.no_grad()
    def refresh(self) -> None:
        """The live adapter's weights, merged."""
        for _, layer, linear in self.pairs:
            merged = layer.base_layer.weight.clone()
            for adapter in layer.active_adapters:
                a = layer.lora_A[adapter].weight
                b = layer.lora_B[adapter].weight
                merged.addmm_(b.to(merged.dtype), a.to(merged.dtype), alpha=layer.scaling[adapter])  # bf16 base
            linear.weight.copy_(merged)
        for _, wrapper, param in self.params:
            merged = wrapper.get_param().clone()
            for adapter in wrapper.active_adapters:
                merged += expert_delta(wrapper, adapter, wrapper.lora_A[adapter].weight,
                                       wrapper.lora_B[adapter].weight).to(merged.dtype)
            param.copy_(merged)

    @torch.no_grad()
    def load(self, weights: Snapshot) -> None:
        """A published version's weights (retrain.backends.local.versions), merged."""
        for name, layer, linear in self.pairs:
            merged = layer.base_layer.weight.clone()
            for adapter in layer.active_adapters:
                a = weights[f"{name}.lora_A.{adapter}.weight"].to(merged.device, merged.dtype)
                b = weights[f"{name}.lora_B.{adapter}.weight"].to(merged.device, merged.dtype)
                merged.addmm_(b, a, alpha=layer.scaling[adapter])
            linear.weight.copy_(merged)
        for name, wrapper, param in self.params:
            merged = wrapper.get_param().clone()
            for adapter in wrapper.active_adapters:
                a = weights[f"{name}.lora_A.{adapter}.weight"].to(merged.device, merged.dtype)
                b = weights[f"{name}.lora_B.{adapter}.weight"].to(merged.device, merged.dtype)
                merged += expert_delta(wrapper, adapter, a, b).to(merged.dtype)
            param.copy_(merged)


def expert_delta(wrapper: Any, adapter: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The delta peft's `ParamWrapper` adds to a stack of experts' weights, from LoRA factors
    `a` [experts x rank, in] and `b` [out, rank x experts] (peft's layout and product,
    `ParamWrapper.get_delta_weight`, for weights given rather than its own)."""
    experts = int(wrapper.num_experts)
    if experts == 1:
        raise RuntimeError(f"a parameter LoRA of one expert ({wrapper.parameter_name}) is not merged for sampling")
    a = a.reshape(experts, -1, a.shape[-1])
    b = b.reshape(b.shape[0], -1, experts)
    layout = "e o i" if wrapper._did_swap_in_out_features else "e i o"
    return torch.einsum(f"o r e, e r i -> {layout}", b, a) * wrapper.scaling[adapter]


class AheadSampler:
    """The in-process engine sampling ahead (`max_async_level > 0`, engine = "pytorch"): the
    producer's thread samples a batch from a published version in a merged copy of its own
    while the trained model changes. Each batch draws from a generator seeded by the run's seed
    and the batch's name (`SamplingParams.batch_id`), not from a stream position, so a batch
    sampled again after a resume draws the same tokens."""

    def __init__(self, base: torch.nn.Module, seed: int, store: VersionStore) -> None:
        self.merged = MergedSampler(base)
        self.store = store
        self.seed = seed
        self.loaded = -1  # the version the copy holds
        self._lock = threading.Lock()

    def publish(self, version: int, weights: Snapshot, keep: int) -> None:
        with self._lock:
            self.store.add(version, weights)
            self.store.release_before(version - keep)

    def prepare(self, params: SamplingParams, device: torch.device) -> tuple[torch.nn.Module, torch.Generator]:
        """The copy holding `params.policy_version`, and the batch's generator."""
        assert params.policy_version is not None
        with self._lock:
            if self.loaded != params.policy_version:
                self.merged.load(self.store.get(params.policy_version))
                self.loaded = params.policy_version
        seeds = request_seeds(self.seed, params.batch_id if params.batch_id is not None else 0, 1)
        assert seeds is not None
        return self.merged.model, torch.Generator(device=device).manual_seed(seeds[0])

    def restore(self, store: VersionStore) -> None:
        with self._lock:
            self.store, self.loaded = store, -1
