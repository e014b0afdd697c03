"""The language model of a multimodal checkpoint (`Qwen3_5ForConditionalGeneration`,
`Gemma3ForConditionalGeneration`, `Gemma4ForConditionalGeneration`, any `*ForConditionalGeneration`
whose text config has a causal-LM class in transformers), loaded alone for text RL.

retrain trains on token ids: the vision and audio towers would never run. The text config's
own causal-LM class (`Qwen3_5ForCausalLM`, `Gemma3ForCausalLM`, ...) is built and only the text
path's weights are read from the checkpoint (the towers' tensors are never loaded, on the CPU
or the device); it computes the same logits as the multimodal class on text (a test checks
each family), and every part of retrain that runs a causal LM (the trainer's logprobs, the
sampler's forwards, FSDP) runs it unchanged.

Checkpoints keep the hub's layout. transformers 5 names a multimodal model's text modules
`model.language_model.<...>` (older checkpoints: `language_model.model.<...>`), the text class
names them `model.<...>`; the head is `lm_head` in both. A LoRA adapter is saved under the
hub class's names (`hub_names`), which is what peft loads onto the hub's class and what vLLM
and SGLang map onto their own; it is read back through `local_names`.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: where transformers 5's multimodal classes keep the text model, and where the text class does
HUB_TEXT = "model.language_model."
LOCAL_TEXT = "model."
#: checkpoint keys of the text path (transformers 5's layout, then the legacy llava layout) ->
#: the text class's names
CHECKPOINT_KEYS = {
    r"^model\.language_model\.": "model.",
    r"^language_model\.model\.": "model.",
    r"^language_model\.lm_head\.": "lm_head.",
}
#: set on the text model loaded from a multimodal checkpoint: the hub's model type
MARK = "_retrain_multimodal_type"
PEFT_PREFIX = "base_model.model."


@dataclass(frozen=True)
class TextPath:
    model_class: type
    config: Any  # the checkpoint's text config
    hub_type: str  # the checkpoint's model type (qwen3_5, gemma3, ...)


def text_path(config: Any) -> TextPath | None:
    """The text model of a multimodal checkpoint's `config`; None for a causal LM's config or a
    multimodal one whose text config has no causal-LM class in transformers."""
    get = getattr(config, "get_text_config", None)
    text = get() if callable(get) else config
    if text is config or text is None:
        return None
    from transformers import AutoModelForCausalLM

    model_class = AutoModelForCausalLM._model_mapping.get(type(text), None)
    if model_class is None:
        return None
    return TextPath(model_class, text, str(config.model_type))


def load_text_path(path: TextPath, name: str, **kwargs: Any) -> Any:
    """The text model with the checkpoint's text weights; ValueError naming the weights it lacks.
    transformers' load report (every tower tensor listed as unexpected) is not printed."""
    from retrain.models.quiet import dropped_log_records

    with dropped_log_records("transformers.modeling_utils", "LOAD REPORT"):
        model, info = path.model_class.from_pretrained(name, config=path.config, key_mapping=CHECKPOINT_KEYS,
                                                       output_loading_info=True, **kwargs)
    missing = [k for k in info.get("missing_keys", ()) if not _tied_head(model, k)]
    if missing:
        raise ValueError(f"its text model's weights are not in the checkpoint ({', '.join(sorted(missing)[:3])} ...)")
    setattr(model, MARK, path.hub_type)
    return model


def _tied_head(model: Any, key: str) -> bool:
    return key == "lm_head.weight" and bool(getattr(model.config, "tie_word_embeddings", False))


def hub_type(model: Any) -> str | None:
    """The multimodal checkpoint's model type when `model` (peft-wrapped or not) is its text
    model loaded alone, else None."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    value = getattr(base, MARK, None)
    return value if isinstance(value, str) else None


def hub_names(state: Mapping[str, Any]) -> dict[str, Any]:
    """Adapter keys of the text model (`base_model.model.model.layers...`) under the hub's names."""
    return {_rename(k, LOCAL_TEXT, HUB_TEXT): v for k, v in state.items()}


def local_names(state: Mapping[str, Any]) -> dict[str, Any]:
    """The inverse of `hub_names`, for adapters and full weights alike: the text model's names
    from the hub's (either layout: transformers saves a text model's full weights under them
    too); keys already in the text model's names pass through."""
    out = {}
    for key, value in state.items():
        prefix = PEFT_PREFIX if key.startswith(PEFT_PREFIX) else ""
        rest = key[len(prefix):]
        for pattern, replacement in CHECKPOINT_KEYS.items():
            rest = re.sub(pattern, replacement, rest)
        out[prefix + rest] = value
    return out


def hub_module_names(names: list[str] | str | None) -> list[str] | str | None:
    """An adapter config's `target_modules` under the hub's names: exact names are renamed,
    suffixes and regular expressions are left as they are."""
    if not isinstance(names, list):
        return names
    return [_rename(n, LOCAL_TEXT, HUB_TEXT) if n.startswith(LOCAL_TEXT) else n for n in names]


def _rename(key: str, old: str, new: str) -> str:
    prefix = PEFT_PREFIX if key.startswith(PEFT_PREFIX) else ""
    rest = key[len(prefix):]
    if rest.startswith(old) and not (old == LOCAL_TEXT and rest.startswith(HUB_TEXT)):
        return prefix + new + rest[len(old):]
    return key


@contextmanager
def text_adapter(model: Any, folder: Path) -> Iterator[Path]:
    """An adapter folder `model` can load with peft: `folder` itself, or, when `model` is a
    multimodal checkpoint's text model and the adapter names the hub's modules, a copy under
    the text model's names (in a temporary folder, removed on exit)."""
    config_file = folder / "adapter_config.json"
    config = json.loads(config_file.read_text())
    targets = config.get("target_modules")
    hub = isinstance(targets, list) and any(t.startswith(HUB_TEXT) for t in targets)
    if hub_type(model) is None or not hub:
        yield folder
        return
    from safetensors.torch import load_file, save_file

    with tempfile.TemporaryDirectory(prefix="retrain-adapter-") as tmp:
        local = Path(tmp)
        config["target_modules"] = [_rename(t, HUB_TEXT, LOCAL_TEXT) for t in targets]
        (local / "adapter_config.json").write_text(json.dumps(config))
        weights = load_file(str(folder / "adapter_model.safetensors"))
        save_file(local_names(weights), str(local / "adapter_model.safetensors"), metadata={"format": "pt"})
        yield local


def exact_targets(model: Any, suffixes: list[str]) -> list[str]:
    """The reference's exact-target rule (models/gemma4.py): the names of the text model's
    linear layers whose last component is one of `suffixes` (a tower's layers of the same name
    are never adapted; peft cannot wrap Gemma 4's clipped tower linears). ValueError if none."""
    import torch

    wanted = set(suffixes)
    names = [name for name, module in model.named_modules()
             if name.startswith(LOCAL_TEXT) and isinstance(module, torch.nn.Linear)
             and name.rsplit(".", 1)[-1] in wanted]
    if not names:
        raise ValueError(f"no linear layer of the text model ends with any of {', '.join(sorted(wanted))}")
    return names
