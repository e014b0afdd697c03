"""Checkpoints the export tests export: a family's tiny random checkpoint (tests/tiny_families.py,
written as the hub ships it, towers included) with a LoRA adapter saved the way the local
backend saves one (its wrapping rule, `retrain.backends.local.checkpointing.write_checkpoint`),
its B matrices drawn so the adapter moves every logit."""

from __future__ import annotations

from pathlib import Path

import torch
from tiny_families import write_checkpoint

from retrain.backends.local.checkpointing import write_checkpoint as write_trained
from retrain.backends.local.lora import apply_lora
from retrain.models.families import family_of
from retrain.models.load import ModelSpec, load_model

#: longer than the sliding windows of the matrix (4 tokens), inside every vocabulary
IDS = torch.tensor([[1, 5, 9, 13, 20, 31, 44, 60, 70, 80, 90, 100]])


def with_adapter(model: torch.nn.Module, spread: float = 0.2) -> torch.nn.Module:
    """`model` wrapped as the backend wraps it (rank 4, alpha 8, the family's targets), B random."""
    family = family_of(model.config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        wrapped = apply_lora(model, rank=4, alpha=8, dropout=0.0,
                             resolve=lambda suffixes: family.lora_targets(model, suffixes))
    with torch.no_grad():
        for name, weight in wrapped.named_parameters():
            if "lora_B" in name:
                weight.normal_(0, spread, generator=torch.Generator().manual_seed(len(name)))
    return wrapped.eval()


def lora_checkpoint(name: str, root: Path) -> tuple[Path, Path, torch.nn.Module]:
    """(the base checkpoint's folder, a LoRA checkpoint trained on it, the wrapped model)."""
    base = write_checkpoint(name, root / "base")
    wrapped = with_adapter(load_model(ModelSpec(str(base)), seed=0))
    optimizer = torch.optim.AdamW([p for p in wrapped.parameters() if p.requires_grad])
    folder = write_trained(root / "checkpoint_step_2", model=wrapped, lora=True, optimizer=optimizer, rng={},
                           meta={"seed": 0, "model": str(base)})
    return base, folder, wrapped


def full_checkpoint(name: str, root: Path) -> tuple[Path, Path, torch.nn.Module]:
    """(the base checkpoint's folder, a full-weight checkpoint trained on it, the trained model):
    every weight of the text model moved."""
    base = write_checkpoint(name, root / "base")
    model = load_model(ModelSpec(str(base)), seed=0).eval()
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for weight in model.parameters():
            weight.add_(torch.randn(weight.shape, generator=g) * 0.05)
    optimizer = torch.optim.AdamW(model.parameters())
    folder = write_trained(root / "checkpoint_step_2", model=model, lora=False, optimizer=optimizer, rng={},
                           meta={"seed": 0, "model": str(base)})
    return base, folder, model


def logits(model: torch.nn.Module, ids: torch.Tensor = IDS) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits.float()
