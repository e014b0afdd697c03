"""Load a causal LM and its tokenizer: the built-in `tiny`, a local path, or a hub id (a
multimodal checkpoint's language model alone: `retrain.models.multimodal`)."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from retrain.models.deferred import deferred_optional_imports
from retrain.models.gguf import converted, gguf_source
from retrain.models.multimodal import load_text_path, text_path
from retrain.models.quiet import import_model_classes, no_progress_bars
from retrain.models.tiny import ASSETS, is_tiny
from retrain.models.unavailable import ModelUnavailable


@dataclass(frozen=True)
class ModelSpec:
    name: str
    revision: str = ""
    local_files_only: bool = False
    trust_remote_code: bool = False
    config_overrides: tuple[tuple[str, Any], ...] = ()


def resolved(spec: ModelSpec) -> ModelSpec:
    """A GGUF (file, folder, packaged name) as the Hugging Face folder converted from it
    (retrain.models.gguf); any other spec as it is."""
    source = gguf_source(spec.name)
    if source is None:
        return spec
    return replace(spec, name=str(converted(source)), revision="", local_files_only=True)


def load_tokenizer(spec: ModelSpec) -> Any:
    from transformers import AutoTokenizer

    if is_tiny(spec.name):
        return AutoTokenizer.from_pretrained(str(ASSETS), local_files_only=True)
    spec = resolved(spec)
    return AutoTokenizer.from_pretrained(spec.name, revision=spec.revision or None,
                                         local_files_only=spec.local_files_only,
                                         trust_remote_code=spec.trust_remote_code)


def load_model(spec: ModelSpec, *, seed: int, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """The model in eval-free default state on the CPU. `tiny` is initialised from `seed` with
    a private generator state, so loading it never disturbs the caller's RNG streams."""
    with deferred_optional_imports():
        import_model_classes()
    from transformers import AutoConfig, AutoModelForCausalLM

    if is_tiny(spec.name):
        raw = json.loads((ASSETS / "config.json").read_text())
        raw.update(dict(spec.config_overrides))
        model_type = raw.pop("model_type")
        config = AutoConfig.for_model(model_type, **raw)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        return model
    named = spec.name
    spec = resolved(spec)
    # a hub id keeps its download and loading bars (a real checkpoint can take minutes to
    # arrive); a folder on this machine (a GGUF's conversion included) loads in seconds, silently
    local = Path(spec.name).expanduser().is_dir()
    where = dict(revision=spec.revision or None, local_files_only=spec.local_files_only,
                 trust_remote_code=spec.trust_remote_code)
    try:
        with no_progress_bars() if local else contextlib.nullcontext():
            text = text_path(AutoConfig.from_pretrained(spec.name, **where))
            if text is not None:  # a multimodal checkpoint: its language model alone
                return load_text_path(text, spec.name, dtype=dtype, **where)
            return AutoModelForCausalLM.from_pretrained(spec.name, dtype=dtype, **where)
    except (OSError, ValueError, KeyError) as exc:  # missing, unreachable, or an architecture transformers lacks
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelUnavailable(f"[model] model = {named!r} cannot be loaded: {reason}") from None
