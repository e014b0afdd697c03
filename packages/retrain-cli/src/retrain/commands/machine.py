"""What a config asks of this machine that it does not have, said before a run starts
(`explain`, `trace`, `run`): torch-free, so it costs nothing."""

from __future__ import annotations

from retrain.config.schema import TrainConfig
from retrain.process.gpus import asks_for_gpu, gpu_visible
from retrain.validation.backend import backend_entry, capabilities_of


def machine_warnings(config: TrainConfig) -> list[str]:
    """A backend that trains on this machine's devices (capability `local_devices`) is configured
    for a GPU this machine does not show."""
    devices = config.backend.devices
    here = capabilities_of(backend_entry(config)).local_devices
    if here and asks_for_gpu(devices) and not gpu_visible():
        return [f"[backend] devices = {devices!r}: no GPU is visible on this machine, so the run would train "
                "on the CPU (retrain init -t cpu writes a config sized for a CPU)"]
    return []
