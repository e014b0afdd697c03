"""`--format hf`: a transformers folder of the trained model, as the hub ships a checkpoint.

What `AutoModelForCausalLM.from_pretrained(folder)` and `AutoTokenizer.from_pretrained(folder)`
load offline: the config and sharded safetensors in the chosen dtype (the LoRA merged in
float32 first, then cast), the tokenizer as a `PreTrainedTokenizerFast` (tokenizer.json, the
class every transformers since 4.x and every server loads), its chat template, and a
generation config whose EOS ids are the family's end-of-turn tokens besides the tokenizer's
(`retrain.models.family`), so generation stops where the run's sampling stopped. A multimodal
checkpoint keeps its towers and its processor's files.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from retrain.backends.local.export.model import Trained, checkpoint_dtype
from retrain.models.families import family_of
from retrain.models.load import resolved
from retrain.models.quiet import no_progress_bars

#: files of a multimodal checkpoint's processor, copied beside the model when the base has them
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json")
#: the tokenizer classes of transformers 5 that older loaders do not know, and the one they do
PORTABLE_TOKENIZER = "PreTrainedTokenizerFast"
UNPORTABLE_TOKENIZERS = frozenset({"TokenizersBackend"})
#: tokenizer_config.json entries that describe a load rather than the tokenizer (auto_map: hub code)
LOADING_KEYS = ("auto_map", "is_local", "local_files_only", "name_or_path")


def export_dtype(trained: Trained, dtype: str) -> torch.dtype:
    return checkpoint_dtype(trained.spec) if dtype == "auto" else getattr(torch, dtype)


def write_hf(trained: Trained, out: Path, *, dtype: str, max_shard_size: str) -> list[str]:
    """Write the folder into `out` (empty); the notes for the user."""
    target = export_dtype(trained, dtype)
    model = trained.model.to(target)
    model.config.use_cache = True
    with no_progress_bars():
        model.save_pretrained(str(out), max_shard_size=max_shard_size, safe_serialization=True)
    write_tokenizer(trained.tokenizer, out)
    write_generation_config(trained, out)
    copied = copy_processor_files(trained, out) if trained.multimodal else []
    shards = sorted(p.name for p in out.glob("*.safetensors"))
    notes = [f"{len(shards)} safetensors shard{'s' if len(shards) != 1 else ''} in {str(target).removeprefix('torch.')}"]
    if trained.multimodal:
        notes.append(f"a {trained.multimodal} checkpoint with its towers ({type(model).__name__})"
                     + (f" and its processor ({', '.join(copied)})" if copied else ""))
    return notes


def write_tokenizer(tokenizer: Any, out: Path) -> None:
    """The tokenizer as `save_pretrained` writes it, with a class every loader knows and no
    hub-specific loading code."""
    tokenizer.save_pretrained(str(out))
    config_file = out / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    if config.get("tokenizer_class") in UNPORTABLE_TOKENIZERS or "tokenizer_class" not in config:
        config["tokenizer_class"] = PORTABLE_TOKENIZER
    for key in LOADING_KEYS:  # how this process loaded it, not what the tokenizer is
        config.pop(key, None)
    config_file.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def eos_ids(trained: Trained) -> list[int]:
    """The tokenizer's EOS, the base's generation-config EOS ids and the family's end-of-turn
    tokens: what the run's sampling stopped at."""
    tok = trained.tokenizer
    base = [tok.eos_token_id] if isinstance(tok.eos_token_id, int) else []
    return family_of(trained.text.config).eos_token_ids(tok, trained.text, base)


def write_generation_config(trained: Trained, out: Path) -> None:
    from transformers import GenerationConfig

    own = getattr(trained.text, "generation_config", None)
    config = GenerationConfig.from_dict(own.to_dict()) if own is not None else GenerationConfig()
    ids = eos_ids(trained)
    config.eos_token_id = ids if len(ids) != 1 else ids[0]
    config._from_model_config = False  # its own file: transformers must not rebuild it from config.json
    tok = trained.tokenizer
    if isinstance(tok.pad_token_id, int):
        config.pad_token_id = tok.pad_token_id
    if isinstance(tok.bos_token_id, int):
        config.bos_token_id = tok.bos_token_id
    config.save_pretrained(str(out))


def copy_processor_files(trained: Trained, out: Path) -> list[str]:
    """The base's processor files, where the base is a folder here or in the hub cache."""
    copied = []
    for name in PROCESSOR_FILES:
        found = base_file(trained, name)
        if found is not None:
            shutil.copyfile(found, out / name)
            copied.append(name)
    return copied


def base_file(trained: Trained, name: str) -> Path | None:
    spec = resolved(trained.spec)
    folder = Path(spec.name).expanduser()
    if folder.is_dir():
        return folder / name if (folder / name).is_file() else None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    cached = try_to_load_from_cache(spec.name, name, revision=spec.revision or None)
    return Path(cached) if isinstance(cached, str) else None
