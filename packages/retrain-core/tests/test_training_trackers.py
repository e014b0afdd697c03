"""Trackers as a kind: which a config selects, how validation refuses a wrong one, the fan-out's
error handling, and each built-in sink written and read back with its own library (TensorBoard's
event reader, MLflow's client on its file store, trackio's local store, W&B's offline run)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from retrain.config.errors import ConfigError
from retrain.config.schema import LoggingConfig, TrainConfig
from retrain.registry.core import lookup
from retrain.training.trackers.checkpoints import CheckpointNotStored, store_checkpoint
from retrain.training.trackers.fanout import Trackers
from retrain.training.trackers.mlflow import MlflowSink, metric_name
from retrain.training.trackers.select import build_trackers, project, run_info
from retrain.training.trackers.sink import (
    ArtifactFolder,
    Receipt,
    RunInfo,
    Sink,
    TrackerMissing,
    payload,
)
from retrain.training.trackers.tensorboard import TensorBoardSink
from retrain.training.trackers.trackio import TrackioSink
from retrain.training.trackers.wandb import (
    WandbSink,
    artifact_name,
    parse_tags,
)
from retrain.validation.load import load_config

ROWS = [{"step": s, "loss": 1.0 / (s + 1), "mean_reward": 0.25 * s, "skipped": s == 1, "condition": "grpo+none"}
        for s in range(3)]


def config(tmp_path: Path, **logging: object) -> TrainConfig:
    return TrainConfig(logging=LoggingConfig(log_dir=str(tmp_path / "logs" / "run-7"), **logging))  # type: ignore[arg-type]


def write_rows(sink: Sink, cfg: TrainConfig) -> RunInfo:
    info = run_info(cfg, "grpo+none")
    sink.start(info)
    for row in ROWS:
        sink.log_row(payload(row), row["step"])  # type: ignore[arg-type]
    sink.log_row(payload({"step": 2, "eval/pass@1": 0.5}, prefix=""), 3)
    sink.finish(0)
    return info


def test_payload_mirrors_numeric_fields_under_train() -> None:
    row = {"step": 3, "loss": 0.5, "mean_reward": 1, "sepa_gate_open": True, "condition": "grpo+none",
           "rl/completion_tokens": 12, "optimizer/logical_batch_sha256": "ab" * 32, "nested": {"a": 1}}
    assert payload(row) == {"train/loss": 0.5, "train/mean_reward": 1, "train/sepa_gate_open": 1,
                            "train/rl/completion_tokens": 12}
    assert payload({"step": 1, "eval/pass@1": 0.5}, prefix="") == {"eval/pass@1": 0.5}


def test_selection_names_and_projects(tmp_path: Path) -> None:
    assert config(tmp_path).logging.tracker_names() == []
    assert config(tmp_path, wandb_project="p", trackers=["tensorboard", "wandb"]).logging.tracker_names() == \
        ["wandb", "tensorboard"]
    assert project(config(tmp_path)) == "retrain"
    assert project(config(tmp_path, wandb_project="w")) == "w"
    assert project(config(tmp_path, wandb_project="w", tracker_project="t")) == "t"
    info = run_info(config(tmp_path), "grpo+none")
    assert info.name == "run-7" and info.log_dir == (tmp_path / "logs" / "run-7") and info.config["logging"]
    assert parse_tags(" a, b ,,c ") == ["a", "b", "c"] and artifact_name("run 7/x") == "checkpoints-run-7-x"
    built = build_trackers(config(tmp_path, trackers=["tensorboard", "mlflow", "trackio"]))
    assert built.names == ["tensorboard", "mlflow", "trackio"]
    assert lookup("tracker", "wandb").origin == "retrain.training.trackers.wandb:WandbSink"


def _load(tmp_path: Path, logging: str, training: str = "") -> TrainConfig:
    path = tmp_path / "run.toml"
    path.write_text(f'[model]\nmodel = "tiny"\n[training]\n{training}\n[logging]\n{logging}\n')
    return load_config(str(path)).config


def test_validation_refuses_unknown_twice_named_and_impossible_artifacts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, 'trackers = ["tensorbord", "mlflow", "mlflow"]')
    text = str(err.value)
    assert "unknown tracker 'tensorbord'" in text and "tensorboard" in text and "[logging] trackers" in text
    assert "'mlflow' is named 2 times" in text
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, 'checkpoint_artifacts = "wandb"', "save_every = 2")
    assert "checkpoint_artifacts" in str(err.value) and "W&B on" in str(err.value)
    ok = _load(tmp_path, 'checkpoint_artifacts = "wandb"\ntrackers = "wandb,tensorboard"', "save_every = 2")
    assert ok.logging.trackers == ["wandb", "tensorboard"]
    path = tmp_path / "run.toml"
    path.write_text('[model]\nmodel = "tiny"\n[logging]\ntracker_project = "p"\n')
    [warning] = [w for w in load_config(str(path)).warnings if "tracker_project" in str(w)]
    assert "no tracker is selected" in str(warning)


@pytest.mark.parametrize(("module", "sink"), [("wandb", WandbSink), ("tensorboard", TensorBoardSink),
                                              ("mlflow", MlflowSink), ("trackio", TrackioSink)])
def test_a_missing_package_names_its_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str,
                                           sink: type) -> None:
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(TrackerMissing) as err:
        sink(config(tmp_path)).start(run_info(config(tmp_path)))
    assert f"pip install 'retrain-core[{module}]'" in str(err.value) and "not installed" in str(err.value)
    assert ("wandb_project" if module == "wandb" else f"trackers names {module!r}") in str(err.value)


class Recording:
    def __init__(self, log: list[str], name: str, fail: str = "") -> None:
        self.log, self.name, self.fail = log, name, fail

    def start(self, info: RunInfo) -> None:
        self._do("start")

    def log_row(self, values: Mapping[str, float | int], step: int) -> None:
        self._do(f"row{step}")

    def log_artifact(self, artifact: ArtifactFolder) -> Receipt | None:
        self.log.append(f"{self.name}:artifact")
        return Receipt(self.name, self.fail != "artifact", reason="disk full" if self.fail == "artifact" else "")

    def finish(self, exit_code: int) -> None:
        self._do(f"finish{exit_code}")

    def _do(self, what: str) -> None:
        self.log.append(f"{self.name}:{what}")
        if what.startswith(self.fail or "-"):
            raise RuntimeError(f"{self.name} failed at {what}")


def test_fanout_finishes_every_sink_whatever_fails(tmp_path: Path) -> None:
    log: list[str] = []
    trackers = Trackers([("a", Recording(log, "a")), ("b", Recording(log, "b", fail="start")),
                         ("c", Recording(log, "c"))])
    with pytest.raises(RuntimeError, match="b failed at start"):
        trackers.start(run_info(config(tmp_path)))
    assert log == ["a:start", "b:start", "a:finish1"]
    log.clear()
    trackers = Trackers([("a", Recording(log, "a", fail="finish")), ("b", Recording(log, "b"))])
    trackers.log_row({"train/loss": 1.0}, 4)
    trackers.log_row({}, 5)  # a row with no number reaches no tracker
    with pytest.raises(RuntimeError, match="a failed at finish0"):
        trackers.finish(0)
    assert log == ["a:row4", "b:row4", "a:finish0", "b:finish0"] and trackers.sinks == []


def test_checkpoint_policy(tmp_path: Path) -> None:
    art = ArtifactFolder(tmp_path, "checkpoint_step_1", 1, 4)
    warned: list[str] = []
    log: list[str] = []
    stores = Trackers([("wandb", Recording(log, "wandb", fail="artifact")), ("tb", Recording(log, "tb"))])
    assert store_checkpoint(stores, "off", art, warned.append) == [] and log == []
    receipts = store_checkpoint(stores, "auto", art, warned.append)
    assert [r.stored for r in receipts] == [False, True]
    assert warned == [f"checkpoint checkpoint_step_1 was not stored in wandb (disk full); it is saved at {tmp_path}"]
    with pytest.raises(CheckpointNotStored, match="fail-closed") as err:
        store_checkpoint(stores, "wandb", art, warned.append)
    assert "disk full" in str(err.value) and log[-2:] == ["tb:artifact", "wandb:artifact"]  # W&B's alone
    with pytest.raises(CheckpointNotStored, match="no W&B run is live"):
        store_checkpoint(Trackers(), "wandb", art, warned.append)


def test_tensorboard_event_file_reads_back(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    info = write_rows(TensorBoardSink(config(tmp_path)), config(tmp_path))
    events = EventAccumulator(str(info.log_dir / "tensorboard"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == {"train/loss", "train/mean_reward", "train/skipped", "eval/pass@1"}
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
    assert [(e.step, e.value) for e in events.Scalars("train/skipped")] == [(0, 0.0), (1, 1.0), (2, 0.0)]
    assert [(e.step, e.value) for e in events.Scalars("eval/pass@1")] == [(3, 0.5)]


def test_mlflow_file_store_reads_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    cfg = config(tmp_path, tracker_project="arith", wandb_project="ignored-here")
    info = write_rows(MlflowSink(cfg), cfg)
    client = MlflowClient(tracking_uri=(info.log_dir / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("arith")
    [run] = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "run-7" and run.info.status == "FINISHED"
    assert run.data.tags["retrain.condition"] == "grpo+none"
    assert run.data.params["logging.tracker_project"] == "arith" and run.data.params["training.trainer"] == "retrain"
    history = client.get_metric_history(run.info.run_id, "train/mean_reward")
    assert sorted((m.step, m.value) for m in history) == [(0, 0.0), (1, 0.25), (2, 0.5)]
    assert metric_name("eval/pass@1") == "eval/pass_at_1"
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "eval/pass_at_1")] == [(3, 0.5)]


def test_trackio_local_store_reads_back(tmp_path: Path) -> None:
    from trackio.sqlite_storage import SQLiteStorage

    cfg = config(tmp_path, tracker_project=f"retrain-test-{tmp_path.name}")
    write_rows(TrackioSink(cfg), cfg)
    logs = SQLiteStorage.get_logs(f"retrain-test-{tmp_path.name}", "run-7")
    train = [(r["step"], r["train/loss"], r["train/skipped"]) for r in logs if "train/loss" in r]
    assert train == [(0, 1.0, 0), (1, 0.5, 1), (2, pytest.approx(1 / 3), 0)]
    assert [(r["step"], r["eval/pass@1"]) for r in logs if "eval/pass@1" in r] == [(3, 0.5)]
