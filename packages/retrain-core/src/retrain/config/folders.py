"""Where a run writes: its `[logging] log_dir`, and its adapter folder, `[backend] adapter_path`.

Left unset, the adapter folder is `<log_dir>/adapters`, so two runs with their own log
directories never share one (the reference's default, one fixed `/tmp/retrain_adapter` for
every run, let a second run overwrite the first's checkpoints). Loading fills it in
(`with_run_folders`), so every reader of a loaded config sees the folder the run writes;
`adapter_folder` answers for a config built in code as well.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from retrain.config.schema import TrainConfig

#: the adapter folder's name under the log directory when `adapter_path` is unset
DEFAULT_ADAPTERS = "adapters"


def adapter_folder(config: TrainConfig) -> Path:
    """The folder the run saves its checkpoints and final weights under."""
    return Path(config.backend.adapter_path or Path(config.logging.log_dir) / DEFAULT_ADAPTERS)


def with_run_folders(config: TrainConfig) -> TrainConfig:
    """`config` with an unset `adapter_path` filled in as `<log_dir>/adapters`."""
    if config.backend.adapter_path:
        return config
    backend = msgspec.structs.replace(config.backend, adapter_path=str(adapter_folder(config)))
    return msgspec.structs.replace(config, backend=backend)
