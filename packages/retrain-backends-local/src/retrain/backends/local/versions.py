"""Published versions of the trained LoRA weights (retrain.backends.protocol.VersionedSampler).

Version N is the adapter after N RL updates. A snapshot is the adapter's tensors, full (never
sharded) and on the CPU, keyed by the model's own parameter names (`...lora_A.default.weight`,
which peft's `save_pretrained(state_dict=...)` writes as an adapter folder). The store keeps
the versions that batches in flight may still sample from (the newest `keep + 1`) and is saved
in checkpoints (`retrain.io.layout.SAMPLER_VERSIONS`), so a resumed run samples those batches again
from the very weights the uninterrupted run used.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import torch

from retrain.io.layout import SAMPLER_VERSIONS
from retrain.process.world import World

Snapshot = dict[str, torch.Tensor]


def adapter_names(model: torch.nn.Module) -> list[str]:
    """The parameters a version holds: every LoRA matrix (frozen A matrices included)."""
    return [n for n, _ in model.named_parameters() if "lora_" in n]


def snapshot(model: torch.nn.Module, world: World) -> Snapshot:
    """The adapter's tensors, full and on the CPU: on rank 0 of a world ({} on the others, and
    every rank must call it), or in the one process."""
    out: Snapshot = {}
    names = set(adapter_names(model))
    for name, p in model.named_parameters():
        if name not in names:
            continue
        full = p.detach()
        if world.distributed:
            from torch.distributed.tensor import DTensor

            full = full.full_tensor() if isinstance(full, DTensor) else full
        if world.leader:
            out[name] = full.to("cpu", copy=True)
    return out


@contextlib.contextmanager
def swapped(model: torch.nn.Module, weights: Snapshot) -> Iterator[None]:
    """The model holds `weights` for the duration, then its own again (one process)."""
    params = dict(model.named_parameters())
    own = {n: params[n].detach().clone() for n in weights}
    with torch.no_grad():
        for n, t in weights.items():
            params[n].copy_(t)
    try:
        yield
    finally:
        with torch.no_grad():
            for n, t in own.items():
                params[n].copy_(t)


class VersionStore:
    def __init__(self) -> None:
        self.versions: dict[int, Snapshot] = {}

    def add(self, version: int, weights: Snapshot) -> None:
        self.versions[version] = weights

    def get(self, version: int) -> Snapshot:
        try:
            return self.versions[version]
        except KeyError:
            held = ", ".join(map(str, sorted(self.versions))) or "none"
            raise RuntimeError(f"policy version {version} is not held (held: {held})") from None

    def release_before(self, oldest: int) -> list[int]:
        """Forget the versions older than `oldest`; those forgotten."""
        gone = sorted(v for v in self.versions if v < oldest)
        for v in gone:
            del self.versions[v]
        return gone

    def save(self, folder: Path) -> None:
        from safetensors.torch import save_file

        tensors = {f"{v}/{name}": t.contiguous() for v, snap in self.versions.items() for name, t in snap.items()}
        save_file(tensors, str(folder / SAMPLER_VERSIONS),
                  metadata={"versions": json.dumps(sorted(self.versions))})

    @classmethod
    def load(cls, folder: Path) -> VersionStore | None:
        """The versions a checkpoint saved; None when it saved none."""
        path = folder / SAMPLER_VERSIONS
        if not path.is_file():
            return None
        from safetensors.torch import load_file

        store = cls()
        for key, t in load_file(str(path)).items():
            version, name = key.split("/", 1)
            store.versions.setdefault(int(version), {})[name] = t
        return store
