"""Whether this machine shows a GPU to this process, answered without importing torch (so
`retrain explain`, `trace` and `init` can warn in a second): an NVIDIA driver's /proc entry or
device node, or ROCm's /dev/kfd, unless CUDA_VISIBLE_DEVICES hides every device. It says what
torch would most likely find; a run still asks torch itself."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def gpu_visible(environ: Mapping[str, str] | None = None, root: Path = Path("/")) -> bool:
    env = os.environ if environ is None else environ
    if env.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return False
    return ((root / "proc/driver/nvidia/version").exists() or any((root / "dev").glob("nvidia[0-9]*"))
            or (root / "dev/kfd").exists())


def asks_for_gpu(devices: str) -> bool:
    """`[backend] devices` names a GPU ("gpu:0", "cuda:1", "gpu:0,gpu:1")."""
    return any(d.strip().split(":")[0] in ("gpu", "cuda") for d in devices.split(",") if d.strip())
