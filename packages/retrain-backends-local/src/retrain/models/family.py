"""What retrain needs to know about a model family, asked of one module per family and chosen
by the config's `model_type` (`families.family_of`). Nothing family-specific lives outside `models/`.

A family answers:

- `plan(config)`: how each decoder layer runs (`retrain.models.layers.DecoderPlan`): the
  contract a decoder that runs the weights itself reads (`forward.lean`; Qwen3.5's hybrid
  layers, Gemma's windows and Qwen3-MoE's routers are described here for it to implement).
- `lora_targets(model, suffixes)`: what LoRA adapts. A causal LM: the suffixes themselves. A
  multimodal checkpoint's text model, or a model with fused experts: the exact names of its
  linear layers ending with one.
- `end_of_turn`: tokens that end an assistant turn in the family's chat format, stop tokens
  of sampling beside the tokenizer's EOS and the checkpoint's generation config's.
- `prepare(model, options)`: kernel choices made once the model is loaded (Qwen3.5's gated
  delta rule), with the metrics that say what was chosen.

The base class is every other causal LM's family (llama, mistral, qwen2, qwen3, smollm3,
olmo2, phi3, granite, ...). For the llama layer (`LLAMA_LAYERS`) transformers' config
says all there is; any other model type's plan says, in `unstated`, what it leaves out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

from retrain.models import multimodal
from retrain.models.layers import DecoderPlan, plan_of

#: model types whose layers are the llama layer (RMSNorm before attention and MLP, rotary q/k,
#: q/k norms where the module has them, a SiLU-gated MLP): their plan is the config's
LLAMA_LAYERS = frozenset({"llama", "mistral", "qwen2", "qwen3"})
#: what other families' layers compute beyond a plan's fields
UNSTATED = {
    "smollm3": "layers without rotary embeddings (no_rope_layers)",
    "olmo2": "norms after attention and MLP only, q/k norms over all heads at once",
    "phi3": "fused qkv and gate_up projections",
    "granite": "embedding, residual and attention multipliers",
}


class Family:
    name: ClassVar[str] = "causal LM"
    model_types: ClassVar[tuple[str, ...]] = ()
    end_of_turn: ClassVar[tuple[str, ...]] = ()
    #: `[backend.options]` only this family reads, with their defaults
    options: ClassVar[Mapping[str, Any]] = {}
    #: its routers' weights are stated (`routed_weights`), so its routing can be replayed
    replays_routing: ClassVar[bool] = False

    def plan(self, config: Any) -> DecoderPlan:
        text = text_config(config)
        plan = plan_of(text)
        kind = str(getattr(text, "model_type", ""))
        if kind in LLAMA_LAYERS:
            return plan
        why = UNSTATED.get(kind, "no family module states all of its layers")
        return replace(plan, unstated=f"model type {kind!r}: {why}")

    def lora_targets(self, model: Any, suffixes: list[str]) -> list[str]:
        """Suffixes as given, except for a multimodal checkpoint's text model and a model with
        fused experts: there the exact names of the linear layers they end (peft would also
        adapt fused expert tensors by their names, which neither the merged sampler nor vLLM
        follows)."""
        fused = any(".experts." in name for name, _ in model.named_parameters())
        if fused or multimodal.hub_type(model) is not None:
            return multimodal.exact_targets(model, suffixes)
        return suffixes

    def routed_weights(self, router: Any, scores: Any, ids: Any) -> Any:
        """The weights [tokens, k] the family's `router` gives experts `ids` [tokens, k], from
        `scores`, the router's first output: what its forward computes for the experts it picks
        itself, computed for any (routing replay, `retrain.models.routing`), differentiable
        through `scores`."""
        raise NotImplementedError(f"{self.name} models: no router whose weights retrain states")

    def prepare(self, model: Any, options: Mapping[str, Any]) -> dict[str, float | int | str]:
        """Kernel choices for `model` on its device; the metrics naming them. UserError for an
        option this machine cannot honour."""
        return {}

    def eos_token_ids(self, tokenizer: Any, model: Any, base: Sequence[int]) -> list[int]:
        """`base` (the tokenizer's EOS) with the checkpoint's generation-config EOS ids and the
        family's end-of-turn tokens the tokenizer knows, in that order, without repeats."""
        out = list(base)
        generation = getattr(model, "generation_config", None)
        ids = getattr(generation, "eos_token_id", None)
        for i in ids if isinstance(ids, list) else [ids]:
            if isinstance(i, int) and i not in out and 0 <= i < _vocab(model):
                out.append(i)
        vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
        for token in self.end_of_turn:
            i = vocab.get(token)
            if isinstance(i, int) and i not in out:
                out.append(i)
        return out


def text_config(config: Any) -> Any:
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def _vocab(model: Any) -> int:
    return int(getattr(text_config(model.config), "vocab_size", 0) or 0)


class SoftCapped:
    """A head whose logits are soft-capped: cap * tanh(head(h) / cap)."""

    def __init__(self, head: Any, cap: float) -> None:
        self.head, self.cap = head, cap

    def __call__(self, hidden: Any) -> Any:
        import torch

        return self.cap * torch.tanh(self.head(hidden) / self.cap)
