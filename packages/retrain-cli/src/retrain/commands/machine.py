"""What a config asks of this machine that it does not have, said before a run starts
(`explain`, `trace`, `run`): torch-free, so it costs nothing."""

from __future__ import annotations

from retrain.config.schema import TrainConfig
from retrain.process.gpus import asks_for_gpu, gpu_visible


def machine_warnings(config: TrainConfig) -> list[str]:
    devices = config.backend.devices
    if config.backend.backend in ("local", "unsloth") and asks_for_gpu(devices) and not gpu_visible():
        return [f"[backend] devices = {devices!r}: no GPU is visible on this machine, so the run would train "
                "on the CPU (retrain init -t cpu writes a config sized for a CPU)"]
    return []
