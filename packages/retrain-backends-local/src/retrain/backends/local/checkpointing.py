"""Checkpoint directories written atomically: weights, optimizer, RNG streams, metadata.

The weights sit at the checkpoint's top level, as the reference lays them out, so
`peft.PeftModel.from_pretrained(checkpoint_step_N)` (or `from_pretrained` of the full model)
loads a checkpoint directly; `optimizer.pt`, `rng.pt`, `checkpoint.json` and the trainer's
`trainer_state.json` sit beside them. Checkpoints written by retrain 0.1.0 nested the weights
under `adapter/` or `model/`; they still load.

The directory is assembled under a temporary name, every file is fsynced, then renamed into
place; a reader (or a resumed run) sees a complete checkpoint or none. An existing directory
of the same name (left by a run killed after writing it but before recording it) is replaced.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from retrain.io.atomic import write_dir_atomic
from retrain.models import multimodal
from retrain.models.quiet import no_progress_bars

#: where 0.1.0 checkpoints kept their weights
LEGACY_WEIGHTS = {True: "adapter", False: "model"}


def save_weights(model: Any, folder: Path, *, lora: bool, state_dict: dict[str, torch.Tensor] | None = None) -> None:
    """A LoRA adapter (loadable with peft.PeftModel.from_pretrained) or the full model;
    `state_dict` replaces the model's own (full weights gathered from sharded ones)."""
    extra = {} if state_dict is None else {"state_dict": state_dict}
    with no_progress_bars():
        if lora:
            model.save_pretrained(str(folder), **extra)
        else:
            model.save_pretrained(str(folder), safe_serialization=True, **extra)
    if lora and multimodal.hub_type(model) is not None:
        _hub_layout(folder)


def _hub_layout(folder: Path) -> None:
    """A multimodal checkpoint's adapter under the names of the hub's class
    (`retrain.models.multimodal`), so peft, vLLM and SGLang load it onto the checkpoint as shipped."""
    from safetensors.torch import load_file, save_file

    weights = folder / "adapter_model.safetensors"
    save_file(multimodal.hub_names(load_file(str(weights))), str(weights), metadata={"format": "pt"})
    config_file = folder / "adapter_config.json"
    config = json.loads(config_file.read_text())
    config["target_modules"] = multimodal.hub_module_names(config.get("target_modules"))
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def read_weights(folder: Path, *, lora: bool) -> dict[str, torch.Tensor]:
    """The tensors of a weights folder as the model names them (adapter keys without the
    adapter's name)."""
    from safetensors.torch import load_file

    # retrain's models never name a module model.language_model.*: a multimodal checkpoint
    # trains as its text model, whose adapter is saved under the hub's names (and whose full
    # weights transformers saves so, Qwen3.5's included)
    if lora:
        return multimodal.local_names(load_file(str(folder / "adapter_model.safetensors")))
    state: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        state.update(load_file(str(f)))
    return multimodal.local_names(state)


def load_weights(model: Any, folder: Path, *, lora: bool) -> None:
    if lora:
        from peft import set_peft_model_state_dict

        state = read_weights(folder, lora=True)
        result = set_peft_model_state_dict(model, state)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise RuntimeError(f"checkpoint {folder} has keys the model lacks: {unexpected[:3]}")
        return
    state = read_weights(folder, lora=False)
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {k for k in missing if k.endswith("lm_head.weight")}
    if set(missing) - tied or unexpected:
        raise RuntimeError(f"checkpoint {folder} does not match the model (missing {sorted(missing)[:3]}, "
                           f"unexpected {sorted(unexpected)[:3]})")


def weights_folder(folder: Path, *, lora: bool) -> Path:
    """Where a checkpoint or adapter folder keeps its weights (0.1.0 nested them)."""
    legacy = folder / LEGACY_WEIGHTS[lora]
    return legacy if legacy.is_dir() else folder


def write_checkpoint(path: str | Path, *, model: Any, lora: bool, optimizer: torch.optim.Optimizer,
                     rng: dict[str, Any], meta: dict[str, Any], extra: Callable[[Path], None] | None = None,
                     weights: dict[str, torch.Tensor] | None = None,
                     optimizer_state: dict[str, Any] | None = None) -> Path:
    """`extra(tmp)` adds files of its own before the directory is renamed into place;
    `weights` and `optimizer_state` replace the model's and optimizer's own state dicts."""

    def fill(tmp: Path) -> None:
        save_weights(model, tmp, lora=lora, state_dict=weights)
        torch.save(optimizer.state_dict() if optimizer_state is None else optimizer_state, tmp / "optimizer.pt")
        torch.save(rng, tmp / "rng.pt")
        (tmp / "checkpoint.json").write_text(json.dumps({**meta, "lora": lora}, indent=2, sort_keys=True) + "\n")
        if extra is not None:
            extra(tmp)

    return write_dir_atomic(path, fill)


def read_meta(folder: Path) -> dict[str, Any]:
    """A checkpoint's `checkpoint.json`: what `write_checkpoint` was given, and `lora`."""
    meta: dict[str, Any] = json.loads((folder / "checkpoint.json").read_text())
    return meta


def checkpoint_meta(folder: Path, *, lora: bool) -> dict[str, Any]:
    """The checkpoint's metadata; RuntimeError when it holds the other kind of weights (a LoRA
    adapter for a full-model run, or full weights for a LoRA run)."""
    meta = read_meta(folder)
    if bool(meta.get("lora")) != lora:
        kind = "a LoRA adapter" if meta.get("lora") else "full model weights"
        raise RuntimeError(f"checkpoint {folder} holds {kind}, which this run does not train")
    return meta


class CheckpointUnreadable(RuntimeError):
    """A checkpoint file that does not load; the message names it."""


@contextlib.contextmanager
def reading(folder: Path, name: str) -> Iterator[None]:
    """Name the file when loading it fails (a resume checks digests first, so this is the
    damage they cannot see, or a checkpoint written before they were kept)."""
    try:
        yield
    except CheckpointUnreadable:
        raise
    except Exception as exc:
        raise CheckpointUnreadable(f"checkpoint {folder}: {name} does not load ({type(exc).__name__}: {exc})") from exc


def read_checkpoint(path: str | Path, *, model: Any, lora: bool,
                    optimizer: torch.optim.Optimizer) -> tuple[dict[str, Any], dict[str, Any]]:
    """Restore weights and optimizer in place; return (rng streams, metadata)."""
    folder = Path(path)
    meta = checkpoint_meta(folder, lora=lora)  # the kind of weights: a mismatch, not damage
    weights = weights_folder(folder, lora=lora)
    with reading(folder, "the weights (" + ", ".join(sorted(p.name for p in weights.glob("*.safetensors"))) + ")"):
        load_weights(model, weights, lora=lora)
    with reading(folder, "optimizer.pt"):
        optimizer.load_state_dict(torch.load(folder / "optimizer.pt", weights_only=True))
    with reading(folder, "rng.pt"):
        rng = torch.load(folder / "rng.pt", weights_only=False)
    return rng, meta
