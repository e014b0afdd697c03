"""MLflow: one MLflow run per training run, in the experiment `[logging] tracker_project`
(else `wandb_project`, else "retrain").

The store is `MLFLOW_TRACKING_URI` when it is set (a tracking server, a database, a folder);
otherwise a file store in the run directory, `<log_dir>/mlruns` (`mlflow ui --backend-store-uri
<log_dir>/mlruns`). MLflow keeps its file store in maintenance mode and refuses it unless
`MLFLOW_ALLOW_FILE_STORE` is set, so a run that chooses it sets that variable for its own
process when the user has not. The client is `mlflow-skinny` (`pip install
'retrain-core[mlflow]'`), imported when the run starts.

The resolved config becomes the run's parameters (`section.key`); each row's numbers its
metrics, with the characters MLflow refuses in a name replaced (`eval/pass@1` ->
`eval/pass_at_1`). MLflow stores no checkpoint of ours (`checkpoint_artifacts` is W&B's).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.io.layout import MLFLOW_DIR
from retrain.training.interrupt import STOP_SIGNALS, stopped_exit_code
from retrain.training.trackers.select import project
from retrain.training.trackers.sink import ArtifactFolder, Receipt, RunInfo, import_tracker

#: MLflow's limits per log_batch call, and on a parameter's value
BATCH_METRICS, BATCH_PARAMS, PARAM_CHARS = 1000, 100, 6000
_REFUSED = re.compile(r"[^\w./\- :]")


def metric_name(key: str) -> str:
    return _REFUSED.sub("_", key.replace("@", "_at_"))


def params(config: Mapping[str, Any]) -> dict[str, str]:
    """`section.key` -> the value as text (JSON for lists and tables), cut to MLflow's limit."""
    out: dict[str, str] = {}
    for section, table in config.items():
        items = table.items() if isinstance(table, Mapping) else [("", table)]
        for key, value in items:
            text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
            out[metric_name(f"{section}.{key}" if key else section)] = text[:PARAM_CHARS]
    return out


def tracking_uri(info: RunInfo) -> str:
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    if uri:
        return uri
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return (info.log_dir / MLFLOW_DIR).as_uri()


class MlflowSink:
    def __init__(self, config: TrainConfig) -> None:
        self.experiment = project(config)
        self.client: Any = None
        self.run_id = ""

    def start(self, info: RunInfo) -> None:
        tracking = import_tracker("mlflow.tracking", "mlflow", "mlflow-skinny")
        entities = import_tracker("mlflow.entities", "mlflow", "mlflow-skinny")
        self._metric, param = entities.Metric, entities.Param
        self.client = tracking.MlflowClient(tracking_uri=tracking_uri(info))
        found = self.client.get_experiment_by_name(self.experiment)
        experiment_id = found.experiment_id if found is not None else self.client.create_experiment(self.experiment)
        run = self.client.create_run(experiment_id, run_name=info.name,
                                     tags={"retrain.trainer": info.trainer, "retrain.condition": info.condition,
                                           "retrain.log_dir": str(info.log_dir)})
        self.run_id = run.info.run_id
        pairs = [param(k, v) for k, v in params(info.config).items()]
        for i in range(0, len(pairs), BATCH_PARAMS):
            self.client.log_batch(self.run_id, params=pairs[i:i + BATCH_PARAMS])

    def log_row(self, values: Mapping[str, float | int], step: int) -> None:
        now = int(time.time() * 1000)
        metrics = [self._metric(metric_name(k), float(v), now, step) for k, v in values.items()]
        for i in range(0, len(metrics), BATCH_METRICS):
            self.client.log_batch(self.run_id, metrics=metrics[i:i + BATCH_METRICS])

    def log_artifact(self, artifact: ArtifactFolder) -> Receipt | None:
        return None

    def finish(self, exit_code: int) -> None:
        if self.client is not None and self.run_id:
            stopped = {stopped_exit_code(s) for s in STOP_SIGNALS}  # stopped by a signal, saved
            status = "FINISHED" if exit_code == 0 else "KILLED" if exit_code in stopped else "FAILED"
            self.client.set_terminated(self.run_id, status=status)
            self.client, self.run_id = None, ""
