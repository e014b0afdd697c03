"""The model an export writes: the base the run trained on with its trained weights applied.

A LoRA adapter is merged into the base in float32 (W + scale * B @ A, peft's merge); full
weights replace the base's. The base is loaded the way the run loaded it
(`retrain.models.load`: the built-in `tiny` from its seed, a folder, a hub id, a GGUF), which
for a multimodal checkpoint is its text model alone; the export then keeps the checkpoint's
towers: the hub's class is loaded whole and its text weights replaced by the trained ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from retrain.backends.export import BaseModel
from retrain.backends.local.checkpointing import load_weights, weights_folder
from retrain.errors import UserError
from retrain.models import multimodal
from retrain.models.deferred import deferred_optional_imports
from retrain.models.load import ModelSpec, load_model, load_tokenizer, resolved
from retrain.models.quiet import import_model_classes, no_progress_bars
from retrain.models.source import require_model
from retrain.models.tiny import is_tiny


@dataclass
class Trained:
    #: what the hf format writes: the text model, or a multimodal checkpoint's hub class
    model: torch.nn.Module
    #: the trained causal LM (the text model of a multimodal checkpoint), float32, eval mode
    text: torch.nn.Module
    tokenizer: Any
    spec: ModelSpec
    #: the multimodal checkpoint's model type (None for a causal LM)
    multimodal: str | None


def spec_of(base: BaseModel) -> ModelSpec:
    return ModelSpec(base.name, base.revision, base.local_files_only, base.trust_remote_code)


def load_trained(base: BaseModel, weights: Path, *, lora: bool, towers: bool = True) -> Trained:
    """The base with `weights` applied, float32, in eval mode; `towers` False leaves a
    multimodal checkpoint's towers unloaded (an export of its text model)."""
    spec = spec_of(base)
    require_model(spec.name, spec.revision, spec.local_files_only)
    if is_tiny(spec.name) and base.seed is None:
        raise UserError("the base model is the built-in 'tiny', whose weights come from the run's seed, "
                        "and no seed is recorded with these weights", hint="pass --seed N ([training] seed)")
    with deferred_optional_imports():
        import_model_classes()
    text = load_model(spec, seed=base.seed or 0, dtype=torch.float32)
    tokenizer = load_tokenizer(spec)
    if lora:
        text = merged(text, weights)
    else:
        _load_full(text, weights)
    text.eval()
    kind = multimodal.hub_type(text)
    model = with_towers(text, spec) if kind is not None and towers else text
    return Trained(model.eval(), text, tokenizer, spec, kind)


def merged(model: torch.nn.Module, folder: Path) -> torch.nn.Module:
    """`model` with the LoRA adapter in `folder` merged into its weights (peft's merge in the
    model's float32); UserError when the adapter does not fit the model."""
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

    folder = weights_folder(folder, lora=True)
    with multimodal.text_adapter(model, folder) as local:
        config = LoraConfig.from_pretrained(str(local))
    config.inference_mode = True
    try:
        with torch.random.fork_rng(devices=[]):  # peft's init of A is overwritten: keep the caller's stream
            wrapped = get_peft_model(model, config)
        load_weights(wrapped, folder, lora=True)
    except (RuntimeError, ValueError, KeyError) as exc:
        raise UserError(f"{folder}: the adapter does not fit the base model: {_first_line(exc)}",
                        hint="export from the run's folder, or name the base it was trained on with --base") from None
    _require_every_lora_weight(wrapped, folder, set(get_peft_model_state_dict(wrapped)))
    with torch.no_grad():
        return wrapped.merge_and_unload()


def _require_every_lora_weight(wrapped: Any, folder: Path, expected: set[str]) -> None:
    from retrain.backends.local.checkpointing import read_weights

    saved = set(read_weights(weights_folder(folder, lora=True), lora=True))
    missing = sorted(expected - saved)
    if missing:
        raise UserError(f"{folder}: the adapter lacks weights its config targets ({', '.join(missing[:3])} ...)")


def _load_full(model: torch.nn.Module, folder: Path) -> None:
    folder = weights_folder(folder, lora=False)
    try:
        load_weights(model, folder, lora=False)
    except RuntimeError as exc:
        raise UserError(f"{folder}: the weights do not fit the base model: {_first_line(exc)}",
                        hint="export from the run's folder, or name the base it was trained on with --base") from None


def with_towers(text: torch.nn.Module, spec: ModelSpec) -> torch.nn.Module:
    """The multimodal checkpoint's own class, whole (its towers as shipped), holding `text`'s
    weights in place of its language model's."""
    import transformers
    from transformers import AutoConfig, AutoModelForImageTextToText

    spec = resolved(spec)
    where = dict(revision=spec.revision or None, local_files_only=spec.local_files_only,
                 trust_remote_code=spec.trust_remote_code)
    config = AutoConfig.from_pretrained(spec.name, **where)
    names = getattr(config, "architectures", None) or []
    cls = getattr(transformers, names[0], None) if names else None
    with no_progress_bars():
        full = (cls or AutoModelForImageTextToText).from_pretrained(spec.name, config=config, dtype=torch.float32,
                                                                    **where)
    state = multimodal.hub_names(text.state_dict())
    own = full.state_dict()
    strays = sorted(k for k in state if k not in own)
    if strays:
        raise UserError(f"{spec.name}: the trained text weights do not map onto the checkpoint's class "
                        f"{type(full).__name__} ({', '.join(strays[:3])} ...)")
    with torch.no_grad():
        for key, value in state.items():
            own[key].copy_(value)
    return full


def checkpoint_dtype(spec: ModelSpec) -> torch.dtype:
    """The dtype the base checkpoint ships in (its config's `dtype`/`torch_dtype`), float32
    where it names none (the built-in `tiny`, a GGUF's conversion)."""
    if is_tiny(spec.name):
        return torch.float32
    from transformers import AutoConfig

    spec = resolved(spec)
    config = AutoConfig.from_pretrained(spec.name, revision=spec.revision or None,
                                        local_files_only=spec.local_files_only,
                                        trust_remote_code=spec.trust_remote_code)
    for source in (config, getattr(config, "get_text_config", lambda: config)()):
        value = getattr(source, "dtype", None) or getattr(source, "torch_dtype", None)
        if isinstance(value, str):
            value = getattr(torch, value, None)
        if isinstance(value, torch.dtype) and value.is_floating_point:
            return value
    return torch.float32


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
