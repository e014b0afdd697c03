"""The routers of a mixture-of-experts model, and their forwards wrapped for a while: the
sampler records what they choose (`retrain.inference_engine.pytorch.routes`), the trainer
replays it (`retrain.backends.local.replay`; rollout routing replay, `[inference]
routing_replay`).

Every MoE block transformers ships calls its router module on the flat hidden states
[tokens, hidden] and reads back (scores, weights [tokens, k], expert ids [tokens, k]); the
experts module then runs each token through its k experts, weighted. A router is found by its
class name (`...Router`, peft's wrapper of one included) inside decoder layer `l`
(`...layers.<l>....`), the same test retrain's decoder makes (`forward.build`). How a family's
router weighs experts is the family's to say (`Family.routed_weights`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from retrain.models.families import family_of
from retrain.models.family import text_config
from retrain.models.layers import DecoderPlan

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
#: (scores, weights, ids) of one router call on [tokens, hidden]
RouterOutput = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def is_router(module: nn.Module) -> bool:
    return type(getattr(module, "base_layer", module)).__name__.endswith("Router")


def routers(model: nn.Module) -> dict[int, nn.Module]:
    """Decoder layer index -> that layer's router module (the outermost, where peft wraps one)."""
    out: dict[int, nn.Module] = {}
    taken: list[str] = []
    for name, module in model.named_modules():
        if not is_router(module) or any(name.startswith(t + ".") for t in taken):
            continue
        found = _LAYER.findall(name)
        if not found:
            continue
        layer = int(found[-1])
        if layer in out:
            raise RuntimeError(f"two routers in decoder layer {layer} ({name})")
        out[layer] = module
        taken.append(name)
    return out


def moe_shape(config: Any) -> tuple[int, int, int]:
    """(decoder layers, experts, experts per token) of a model with routed layers, from its
    family's plan; (layers, 0, 0) for a dense model."""
    plan: DecoderPlan = family_of(config).plan(config)
    routed = [p for p in plan.layers if p.mlp in ("moe", "dense+moe")]
    layers = int(getattr(text_config(config), "num_hidden_layers", 0) or len(plan.layers))
    if not routed:
        return layers, 0, 0
    return layers, max(p.experts for p in routed), max(p.experts_per_token for p in routed)


@contextlib.contextmanager
def wrapped(model: nn.Module, wrap: Callable[[int, nn.Module, Callable[[torch.Tensor], RouterOutput]],
                                            Callable[[torch.Tensor], RouterOutput]]) -> Iterator[int]:
    """Every router's forward replaced by `wrap(layer, router, its own forward)` for the
    duration (an attribute of the instance: the class, and every other model, are untouched);
    yields how many routers."""
    found = routers(model)
    before = {layer: router.__dict__.get("forward") for layer, router in found.items()}
    for layer, router in found.items():
        router.forward = wrap(layer, router, router.forward)  # type: ignore[method-assign]
    try:
        yield len(found)
    finally:
        for layer, router in found.items():
            if before[layer] is None:
                del router.forward
            else:
                router.forward = before[layer]  # type: ignore[method-assign]
