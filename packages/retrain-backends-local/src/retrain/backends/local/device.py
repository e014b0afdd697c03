"""Where the local backend runs: the first listed device (CPU when CUDA is absent)."""

from __future__ import annotations

import sys

import torch


def plan_device(devices: str) -> torch.device:
    first = next((d.strip() for d in devices.split(",") if d.strip()), "cpu")
    if first == "cpu":
        return torch.device("cpu")
    index = int(first.split(":", 1)[1]) if ":" in first else 0
    if not torch.cuda.is_available():
        print(f"retrain: {first} requested but CUDA is not available; training on the CPU", file=sys.stderr)
        return torch.device("cpu")
    return torch.device("cuda", index)


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """bf16 autocast on CUDA; none on the CPU (fp32 keeps CPU runs exact and reproducible)."""
    return torch.bfloat16 if device.type == "cuda" else None
