"""TensorBoard: one event file per run under `<log_dir>/tensorboard/` (`tensorboard --logdir
<log_dir>/tensorboard`), a scalar per number of each row (`train/loss`, `eval/pass@1`, ...).

The writer is the `tensorboard` package's own (`pip install 'retrain-core[tensorboard]'`),
imported when the run starts; it needs neither TensorFlow nor torch. Scalars are written as
`simple_value` summaries, the form every TensorBoard reader understands. TensorBoard stores
no artifacts.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.io.layout import TENSORBOARD_DIR
from retrain.training.trackers.sink import ArtifactFolder, Receipt, RunInfo, import_tracker


class TensorBoardSink:
    def __init__(self, config: TrainConfig) -> None:
        self.writer: Any = None

    def start(self, info: RunInfo) -> None:
        writer = import_tracker("tensorboard.summary.writer.event_file_writer", "tensorboard", "tensorboard")
        self._event = import_tracker("tensorboard.compat.proto.event_pb2", "tensorboard", "tensorboard").Event
        self._summary = import_tracker("tensorboard.compat.proto.summary_pb2", "tensorboard", "tensorboard").Summary
        self.writer = writer.EventFileWriter(str(info.log_dir / TENSORBOARD_DIR))

    def log_row(self, values: Mapping[str, float | int], step: int) -> None:
        summary = self._summary(value=[self._summary.Value(tag=key, simple_value=float(value))
                                       for key, value in values.items()])
        self.writer.add_event(self._event(wall_time=time.time(), step=step, summary=summary))
        self.writer.flush()  # a row per step: the dashboard sees it while the run goes on

    def log_artifact(self, artifact: ArtifactFolder) -> Receipt | None:
        return None

    def finish(self, exit_code: int) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
