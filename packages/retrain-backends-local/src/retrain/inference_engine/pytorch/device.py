"""Where the model runs, for the local backend and the serving engine alike: the first listed
device (CPU when CUDA is absent); under torchrun, the device of this process's rank. Also the
autocast dtype chosen for a device and the one in effect around a call."""

from __future__ import annotations

import sys

import torch

from retrain.process.world import World


def plan_device(devices: str) -> torch.device:
    first = next((d.strip() for d in devices.split(",") if d.strip()), "cpu")
    if first == "cpu":
        return torch.device("cpu")
    index = int(first.split(":", 1)[1]) if ":" in first else 0
    if not torch.cuda.is_available():
        print(f"retrain: {first} requested but CUDA is not available; training on the CPU", file=sys.stderr)
        return torch.device("cpu")
    return torch.device("cuda", index)


def rank_device(devices: str, world: World) -> torch.device:
    """`devices` listing one entry per process (as `retrain` launches them): the entry of this
    process's local rank; otherwise every process takes the listed kind, CUDA device
    `LOCAL_RANK` on a GPU node. CUDA requested but absent is an error: ranks would pile
    onto the CPU unnoticed."""
    entries = [d.strip() for d in devices.split(",") if d.strip()] or ["cpu"]
    entry = entries[world.local_rank] if len(entries) == world.size else entries[0]
    if entry == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        from retrain.errors import UserError

        raise UserError(f"[backend] devices = {devices!r}: {entry} requested but CUDA is not available "
                        '(devices = "cpu" trains every process on the CPU)')
    if len(entries) == world.size:
        return torch.device("cuda", int(entry.split(":", 1)[1]) if ":" in entry else 0)
    return torch.device("cuda", world.local_rank)


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """bf16 autocast on CUDA; none on the CPU (fp32 keeps CPU runs exact and reproducible)."""
    return torch.bfloat16 if device.type == "cuda" else None


def active_autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The dtype of the autocast the caller entered for this device kind, None outside one: the
    sampler runs under its caller's autocast rather than choosing its own."""
    kind = device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None
