"""The unsloth backend: the local backend with the policy loaded and LoRA-wrapped by Unsloth's
FastLanguageModel, and Unsloth's inference mode switched on around sampling. Loss, datums,
sampling engine, server sync and checkpoints (PEFT-loadable adapters) are the local backend's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch

from retrain.backends.local.backend import LocalBackend
from retrain.backends.unsloth.plan import UnslothPlan, plan
from retrain.config.schema import TrainConfig
from retrain.models.load import ModelSpec


@contextlib.contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    if not value:
        yield
        return
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


class UnslothBackend(LocalBackend):
    patch_lora_kernels = False  # Unsloth's LoRA layers run its own kernels
    own_decoder = False  # Unsloth samples through its own inference mode (for_inference)

    def _load_base(self, config: TrainConfig, spec: ModelSpec) -> tuple[torch.nn.Module, Any]:
        from unsloth import FastLanguageModel

        self.fast = FastLanguageModel
        self.plan: UnslothPlan = plan(config, str(self.device))
        with _environ("UNSLOTH_TILED_MLP", self.plan.tiled_mlp_mode):
            model, tokenizer = FastLanguageModel.from_pretrained(**self.plan.load)
        return model, tokenizer

    def _apply_lora(self, model: torch.nn.Module, config: TrainConfig) -> torch.nn.Module:
        wrapped: torch.nn.Module = self.fast.get_peft_model(model, **self.plan.peft)
        return wrapped

    def _place(self, model: torch.nn.Module) -> torch.nn.Module:
        return model if self.plan.quantized else model.to(self.device)

    @contextlib.contextmanager
    def _sampling_mode(self) -> Iterator[None]:
        self.fast.for_inference(self.model)
        try:
            yield
        finally:
            self.fast.for_training(self.model)

    def runtime_metrics(self) -> dict[str, float | int | str]:
        load = self.plan.load
        return {**super().runtime_metrics(), "unsloth_backend_enabled": 1,
                "unsloth_max_seq_length": load["max_seq_length"],
                "unsloth_load_in_4bit": int(load["load_in_4bit"]), "unsloth_load_in_8bit": int(load["load_in_8bit"]),
                "unsloth_load_in_16bit": int(load["load_in_16bit"])}
