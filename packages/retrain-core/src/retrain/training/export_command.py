"""The line a finished run's summary ends with: the `retrain export` command that writes its
final weights as a transformers folder, when its backend writes exports
(`BackendDefinition.export`; a backend whose weights stay on its service has none)."""

from __future__ import annotations

import shlex
from pathlib import Path

from retrain.config.schema import TrainConfig


def export_command(config: TrainConfig) -> str | None:
    from retrain.backends import catalog

    name = config.backend.backend
    entry = catalog.entry_for(name, config.backend.options)
    if entry is None or not entry.definition.export:
        return None
    log_dir = config.logging.log_dir
    out = Path("exports") / (Path(log_dir).name or "run")
    return shlex.join(["retrain", "export", log_dir, "--out", str(out)])
