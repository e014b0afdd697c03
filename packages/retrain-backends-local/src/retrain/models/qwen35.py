"""Qwen3.5 (`qwen3_5`, its MoE sibling `qwen3_5_moe`, text-only and as the hub ships them):
hybrid layers, ChatML's end of turn, and the kernels of its gated-delta layers.

Three of every four layers are Gated DeltaNet (linear attention): no keys and values, a
recurrent state per head and a short causal convolution (`models.layers`: `linear`). Their
two costly functions come from packages transformers looks for when its modeling module is
imported: the chunked gated delta rule (and its one-token recurrent form) from
flash-linear-attention, the causal conv1d (and its one-token update) from causal-conv1d;
without them it runs its own torch reference and logs one line per function saying so.

`[backend.options] qwen35_gated_delta_kernel` chooses (`gated_delta_choice`):
- `off`: transformers' own choice, untouched.
- `torch`: the torch reference, whatever is installed (the exact path, for checking another).
- `auto`: the fastest installed that runs here: flash-linear-attention on a CUDA device when
  it is installed, else the torch reference.
- `flash_qla`: FlashQLA's kernels, refused by name when its package or its GPU (compute
  capability 9.0 or 10.0) is absent; not built yet where both are present.
`qwen35_gated_delta_chunk_size` (`auto` or a number of tokens) is the torch reference's chunk
length (64 by default); a number selects the torch reference, the only path that takes one.
(`cudnn_causal_conv1d_shim`, cuDNN's causal conv1d standing in for causal-conv1d, is not built
yet: the config is refused at load, `retrain.validation.built`.)

The choice is made by setting the modeling module's functions (the module transformers calls
them from); every model of the process runs the last choice, which `prepare` makes from the
functions transformers installed, so a later `off` restores them. Calling the torch references
directly is also what keeps transformers' "falling back" lines off the terminal: retrain
reports the same fact once, in its metrics (`local_qwen35_gated_delta_kernel`,
`local_qwen35_causal_conv1d`).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from retrain.errors import UserError
from retrain.models.family import Family, text_config
from retrain.models.layers import DecoderPlan, plan_of

KERNEL = "[backend.options] qwen35_gated_delta_kernel"
CHUNK = "[backend.options] qwen35_gated_delta_chunk_size"
RULES = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")
CONVS = ("causal_conv1d_fn", "causal_conv1d_update")
#: the functions transformers installed in each modeling module, before retrain set any
_INSTALLED: dict[str, dict[str, Any]] = {}


@dataclass(frozen=True)
class GatedDeltaChoice:
    kernel: str  # "transformers", "torch" or "fla"
    chunk_size: int | None  # the torch reference's chunk length when set


def gated_delta_choice(mode: str, chunk: str, device_type: str) -> GatedDeltaChoice:
    """The kernel `mode` and `chunk` ask for on a device of `device_type`; UserError naming
    the option when it cannot run here."""
    size = _chunk_size(chunk)
    if mode == "flash_qla":
        raise UserError(f"{KERNEL} = \"flash_qla\": {_flash_qla_problem(device_type)}",
                        hint="qwen35_gated_delta_kernel = \"auto\" picks the fastest kernel installed")
    if size is not None and mode == "off":
        raise UserError(f"{CHUNK} = {chunk!r} sets the torch reference's chunk length, and "
                        f"qwen35_gated_delta_kernel = \"off\" leaves transformers' choice untouched",
                        hint="qwen35_gated_delta_kernel = \"torch\" (or \"auto\") with a chunk size")
    if mode == "off":
        return GatedDeltaChoice("transformers", None)
    if mode == "auto" and size is None and device_type == "cuda" and _installed("fla"):
        return GatedDeltaChoice("fla", None)
    return GatedDeltaChoice("torch", size)


def _chunk_size(chunk: str) -> int | None:
    text = str(chunk).strip().lower()
    if text in ("", "auto"):
        return None
    try:
        size = int(text)
    except ValueError:
        size = 0
    if size <= 0:
        raise UserError(f"{CHUNK} = {chunk!r}: must be \"auto\" or a positive number of tokens",
                        hint="qwen35_gated_delta_chunk_size = \"64\" (the torch reference's default)")
    return size


def _flash_qla_problem(device_type: str) -> str:
    if not _installed("flash_qla"):
        return "the flash-qla package is not installed"
    import torch

    if device_type != "cuda" or torch.cuda.get_device_capability() not in ((9, 0), (10, 0)):
        return "FlashQLA's kernels need a CUDA GPU of compute capability 9.0 or 10.0"
    return "FlashQLA's kernels are not built yet in this version"


def _installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def apply_gated_delta(model: Any, choice: GatedDeltaChoice) -> dict[str, float | int | str]:
    """Set the gated-delta and conv1d functions of `model`'s modeling module as `choice` says;
    the metrics naming what runs."""
    module = sys.modules[type(model).__module__]
    installed = _INSTALLED.setdefault(module.__name__, {n: getattr(module, n) for n in RULES + CONVS
                                                        if hasattr(module, n)})
    for name, function in installed.items():
        setattr(module, name, function)
    if not installed:
        return {}
    conv = "causal_conv1d" if _installed("causal_conv1d") else "torch"
    if choice.kernel == "torch":
        _use_reference(module, installed, RULES)
        if choice.chunk_size is not None:
            module.torch_chunk_gated_delta_rule = functools.partial(
                installed["torch_chunk_gated_delta_rule"].__wrapped__, chunk_size=choice.chunk_size)
    if conv == "torch" and choice.kernel != "transformers":
        _use_reference(module, installed, CONVS)  # what transformers would run, without its line
    kernel = {"transformers": "fla" if _installed("fla") else "torch"}.get(choice.kernel, choice.kernel)
    return {"local_qwen35_gated_delta_kernel": kernel,
            "local_qwen35_gated_delta_chunk_size": choice.chunk_size or (64 if kernel == "torch" else 0),
            "local_qwen35_causal_conv1d": conv}


def _use_reference(module: Any, installed: Mapping[str, Any], names: tuple[str, ...]) -> None:
    for name in names:
        reference = getattr(installed.get(name), "__wrapped__", None)
        if reference is not None:
            setattr(module, name, reference)


class Qwen35(Family):
    name: ClassVar[str] = "Qwen3.5"
    options: ClassVar[Mapping[str, Any]] = {"qwen35_gated_delta_kernel": "auto", "qwen35_gated_delta_chunk_size": "auto"}
    model_types: ClassVar[tuple[str, ...]] = ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")
    end_of_turn: ClassVar[tuple[str, ...]] = ("<|im_end|>",)
    replays_routing: ClassVar[bool] = True

    def plan(self, config: Any) -> DecoderPlan:
        """Beside the hybrid layers: (1 + w) RMSNorms, a query projection that also yields a
        sigmoid gate on each head's output, and the multimodal rotary's three position axes
        (a text token at the same position on each: the plain rotary over its partial
        dimensions)."""
        return replace(plan_of(text_config(config)), norm="fp32 1 + weight", attention_gate=True, rope_axes=3)

    def routed_weights(self, router: Any, scores: Any, ids: Any) -> Any:
        """Qwen3.5-MoE's router is Qwen3-MoE's, always renormalising over the k chosen."""
        from retrain.models.qwen3_moe import softmax_top

        return softmax_top(scores, ids, renormalise=True)

    def prepare(self, model: Any, options: Mapping[str, Any]) -> dict[str, float | int | str]:
        device = next(model.parameters()).device.type
        choice = gated_delta_choice(str(options.get("qwen35_gated_delta_kernel", "auto")),
                                    str(options.get("qwen35_gated_delta_chunk_size", "auto")), device)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        return apply_gated_delta(base, choice)
