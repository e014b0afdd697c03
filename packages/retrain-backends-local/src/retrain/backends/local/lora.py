"""LoRA wrapping with peft: rank, alpha, dropout, target modules and layer selection."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from retrain.errors import UserError

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def parse_layers(spec: str, num_layers: int) -> list[int] | None:
    """`last:N`, `first:N`, `all`, or a list like `0,2-3`; None means every layer."""
    text = spec.strip().lower()
    if not text or text == "all":
        return None
    if m := re.fullmatch(r"(last|first):(\d+)", text):
        n = min(int(m.group(2)), num_layers)
        return list(range(num_layers - n, num_layers)) if m.group(1) == "last" else list(range(n))
    layers: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            a, b = part.split("-", 1)
            layers.update(range(int(a), int(b) + 1))
        elif part:
            layers.add(int(part))
    bad = [i for i in layers if not 0 <= i < num_layers]
    if bad:
        raise ValueError(f"lora_layers_to_transform {spec!r}: layers {bad} outside 0..{num_layers - 1}")
    return sorted(layers)


def apply_lora(model: Any, *, rank: int, alpha: int, dropout: float, targets: str = "",
               layers: str = "", layers_pattern: str = "layers",
               resolve: Callable[[list[str]], list[str]] | None = None) -> Any:
    """`resolve` turns the target suffixes into what peft is given (the model family's rule:
    `retrain.models.family.Family.lora_targets`); a ValueError of it is the user's error."""
    from peft import LoraConfig, get_peft_model

    target_modules = [t.strip() for t in targets.split(",") if t.strip()] or list(DEFAULT_TARGETS)
    if resolve is not None:
        try:
            target_modules = resolve(target_modules)
        except ValueError as exc:
            raise UserError(f"[backend.options] lora_target_modules = {targets!r}: {exc}",
                            hint="name suffixes of the text model's linear layers (q_proj, ..., down_proj)") from None
    num_layers = int(getattr(model.config, "num_hidden_layers", 0) or 0)
    chosen = parse_layers(layers, num_layers) if num_layers else None
    config = LoraConfig(
        task_type="CAUSAL_LM",
        r=rank,
        lora_alpha=alpha if alpha > 0 else 2 * rank,
        lora_dropout=dropout,
        target_modules=target_modules,
        layers_to_transform=chosen,
        layers_pattern=layers_pattern if chosen is not None else None,
    )
    return get_peft_model(model, config)


def freeze_lora_a(model: Any) -> int:
    """LoRA-FA (`[backend.options] lora_freeze_a`): every adapter's A keeps its random init and
    only B trains, which halves the adapter's optimizer state and lets the backward skip A's
    gradient. Returns how many A matrices were frozen."""
    frozen = 0
    for name, param in model.named_parameters():
        if ".lora_A." in name and param.requires_grad:
            param.requires_grad_(False)
            frozen += 1
    return frozen
