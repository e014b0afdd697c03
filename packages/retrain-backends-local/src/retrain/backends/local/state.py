"""The local backend's training state on disk, in one process or many: checkpoints (weights,
optimizer, RNG streams) to resume from, and trained weights alone (adapters) to evaluate.

A multi-process world gathers to rank 0, which writes the single-process layout
(`local.distributed`), so either kind of run loads what the other wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from retrain.backends.local.checkpointing import (
    load_weights,
    read_checkpoint,
    read_meta,
    save_weights,
    weights_folder,
    write_checkpoint,
    write_dir_atomic,
)
from retrain.errors import UserError
from retrain.process.world import World


def rng_state(device: torch.device, sample: torch.Generator, select: torch.Generator) -> dict[str, Any]:
    """torch's global stream, the sampling and token-selection generators, and CUDA's."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "sample": sample.get_state(), "select": select.get_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(rng: dict[str, Any], device: torch.device, sample: torch.Generator, select: torch.Generator) -> None:
    torch.set_rng_state(rng["torch"])
    sample.set_state(rng["sample"])
    select.set_state(rng["select"])
    if "cuda" in rng and device.type == "cuda":
        torch.cuda.set_rng_state(rng["cuda"], device)


def check_seed(path: str, *, seed: int, model_name: str) -> None:
    """A model initialised from the seed (a tiny model) resumes only under the same seed."""
    saved = read_meta(Path(path)).get("seed")
    if saved != seed:
        raise RuntimeError(f"checkpoint {path} was trained on {model_name!r} initialised with "
                           f"seed {saved}; this run uses seed {seed} (use the same [training] seed)")


def save_checkpoint(path: str, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer, lora: bool,
                    world: World, rng: dict[str, Any], meta: dict[str, Any],
                    extra: Callable[[Path], None] | None = None) -> str:
    """`extra` adds files of its own (written by rank 0 in a multi-process run)."""
    if world.distributed:
        from retrain.backends.local import distributed

        distributed.save_checkpoint(path, model, optimizer, world, lora=lora, rng=rng, meta=meta, extra=extra)
        return str(Path(path))
    return str(write_checkpoint(path, model=model, lora=lora, optimizer=optimizer, rng=rng, meta=meta, extra=extra))


def load_checkpoint(path: str, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer, lora: bool,
                    world: World) -> dict[str, Any]:
    """Weights and optimizer restored in place; the RNG streams of this rank."""
    if world.distributed:
        from retrain.backends.local import distributed

        return distributed.read_checkpoint(path, model, optimizer, world, lora=lora)
    rng, _ = read_checkpoint(path, model=model, lora=lora, optimizer=optimizer)
    return rng


def load_adapter(path: str, *, model: torch.nn.Module, lora: bool, world: World) -> None:
    """Trained weights alone (a `save_adapter` folder or a checkpoint's); a folder holding the
    other kind of weights than this config trains is refused."""
    folder = weights_folder(Path(path), lora=lora)
    adapter = (folder / "adapter_model.safetensors").is_file()
    if adapter != lora or not any(folder.glob("*.safetensors")):
        kind = "a LoRA adapter" if lora else "full model weights (train_full_model = true)"
        raise UserError(f"{path} does not hold {kind}, which this config trains")
    if world.distributed:
        from retrain.backends.local import distributed

        distributed.load_weights(model, folder, lora=lora)
    else:
        load_weights(model, folder, lora=lora)


def save_adapter(path: str, *, model: torch.nn.Module, lora: bool, world: World) -> str:
    if not world.distributed:
        return str(write_dir_atomic(path, lambda tmp: save_weights(model, tmp, lora=lora)))
    from retrain.backends.local import distributed

    distributed.save_adapter(path, model, world, lora=lora)
    return str(Path(path))
