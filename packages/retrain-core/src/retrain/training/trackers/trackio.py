"""trackio: one run per training run in the project `[logging] tracker_project` (else
`wandb_project`, else "retrain"), in trackio's local store (`TRACKIO_DIR`, by default under the
Hugging Face cache; `trackio show` opens it), or the Space or server trackio's own environment
variables name.

`pip install 'retrain-core[trackio]'`; imported when the run starts. Its automatic CPU and GPU
sampling stays off: a run's series are its rows. trackio stores no checkpoint of ours
(`checkpoint_artifacts` is W&B's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.training.trackers.select import project
from retrain.training.trackers.sink import ArtifactFolder, Receipt, RunInfo, import_tracker


class TrackioSink:
    def __init__(self, config: TrainConfig) -> None:
        self.project = project(config)
        self.run: Any = None

    def start(self, info: RunInfo) -> None:
        trackio = import_tracker("trackio", "trackio", "trackio")
        self.run = trackio.init(project=self.project, name=info.name, config=dict(info.config), embed=False,
                                auto_log_gpu=False, auto_log_cpu=False)

    def log_row(self, values: Mapping[str, float | int], step: int) -> None:
        self.run.log(dict(values), step=step)

    def log_artifact(self, artifact: ArtifactFolder) -> Receipt | None:
        return None

    def finish(self, exit_code: int) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
