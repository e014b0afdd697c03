"""Runs that write through trackers, read back by each tracker's own library.

- RL with a warmup, evaluation and checkpoints, `[logging] trackers = ["tensorboard", "mlflow",
  "trackio", "jsonsink"]`, the last a third party's tracker installed as a distribution with an
  entry point in `retrain.trackers`: every metrics and eval row reaches each at the run's global
  step; `retrain plugins` lists the third party's beside the built-ins.
- SFT with W&B offline (`wandb_project`) and `checkpoint_artifacts = "wandb"`: the rows and the
  checkpoint, as a `retrain_checkpoint` artifact holding the checkpoint's files, land in the
  offline run directory with the recoverability fields; a checkpoint W&B cannot store stops a run
  that asked for fail-closed.
- The command trainer: the rows its program wrote, then its exit code, in TensorBoard.

Runs go through the command in this process (tiny_run.retrain); the fail-closed run is the slow
tier's (the SFT run is the fast tier's representative of a run with W&B).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import wandb_records
from test_sft_run import write_run as write_sft_run
from tiny_run import retrain, write_tiny_run

from retrain.io.log import read_jsonl
from retrain.training.trackers.sink import payload

JSONSINK = '''
import json


class JsonSink:
    """A third party's tracker: every call, one JSON line."""

    def __init__(self, config):
        self.path = None

    def start(self, info):
        self.path = info.log_dir / "jsonsink.jsonl"
        self._write({"start": info.name, "trainer": info.trainer, "condition": info.condition})

    def log_row(self, values, step):
        self._write({"step": step, "values": dict(values)})

    def log_artifact(self, artifact):
        self._write({"artifact": artifact.name})
        return None

    def finish(self, exit_code):
        self._write({"finish": exit_code})

    def _write(self, obj):
        with open(self.path, "a") as f:
            f.write(json.dumps(obj) + "\\n")
'''


def tracker_rows(log_dir: Path) -> list[tuple[int, dict[str, float | int]]]:
    """What a tracker should have received: (step, numbers) per row, at the run's global steps."""
    rows = read_jsonl(log_dir / "metrics.jsonl")
    warmup = sum(1 for r in rows if r.get("phase") == "sft")
    out = [(r["step"] if r.get("phase") == "sft" else warmup + r["step"], payload(r)) for r in rows]
    out += [(warmup + r["step"], payload(r, prefix="")) for r in read_jsonl(log_dir / "eval.jsonl")]
    return sorted(out, key=lambda pair: pair[0])


def series(rows: list[tuple[int, dict[str, float | int]]], key: str) -> list[tuple[int, float]]:
    return [(step, float(values[key])) for step, values in rows if key in values]


@pytest.fixture
def trackio_project(tmp_path: Path) -> str:
    return f"retrain-run-{tmp_path.name}"


def test_rl_run_writes_every_tracker(tmp_path: Path, install_distribution, monkeypatch: pytest.MonkeyPatch,
                                     trackio_project: str) -> None:
    install_distribution("retrain-jsonsink", "0.1", {"retrain.trackers": {"jsonsink": "jsonsink:JsonSink"}},
                         {"jsonsink.py": JSONSINK})
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    cfg = write_tiny_run(tmp_path, training={"max_steps": 2, "sft_warmup_steps": 1, "save_every": 1})
    cfg.write_text(cfg.read_text() + f'trackers = ["tensorboard", "mlflow", "trackio", "jsonsink"]\n'
                   f'tracker_project = "{trackio_project}"\n[eval]\nevery = 1\nk = 2\nbefore_train = true\n')
    res = retrain(cfg)
    assert res.returncode == 0, res.stderr
    log_dir = tmp_path / "run" / "logs"
    expected = tracker_rows(log_dir)
    assert [s for s, _ in expected] == [0, 1, 1, 2, 2, 3]  # warmup, eval 0, step 0, eval 1, step 1, eval 2
    metrics = read_jsonl(log_dir / "metrics.jsonl")
    assert all(key in metrics[-1] for key in ("sample_time_s", "score_time_s", "sync_time_s", "train_time_s"))

    calls = read_jsonl(log_dir / "jsonsink.jsonl")
    assert calls[0] == {"start": "logs", "trainer": "retrain", "condition": metrics[-1]["condition"]}
    got = [(c["step"], c["values"]) for c in calls[1:-1] if "step" in c]
    assert sorted(map(json.dumps, got)) == sorted(map(json.dumps, expected))  # the same rows, each once
    assert [c["artifact"] for c in calls if "artifact" in c] == ["warmup_step_1", "checkpoint_step_1",
                                                                   "checkpoint_step_2"]
    assert calls[-1] == {"finish": 0}

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir / "tensorboard"))
    events.Reload()
    for key in ("train/mean_reward", "train/loss", "eval/pass@1"):
        scalars = events.Scalars(key)
        assert [e.step for e in scalars] == [s for s, _ in series(expected, key)], key
        assert [e.value for e in scalars] == pytest.approx([v for _, v in series(expected, key)]), key

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(log_dir / "mlruns").as_uri())
    [run] = client.search_runs([client.get_experiment_by_name(trackio_project).experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["training.max_steps"] == "2"
    for key, name in (("train/mean_reward", "train/mean_reward"), ("eval/pass@1", "eval/pass_at_1")):
        got = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, name))
        assert got == series(expected, key), key

    from trackio.sqlite_storage import SQLiteStorage

    logs = SQLiteStorage.get_logs(trackio_project, "logs")
    assert [(r["step"], r["train/mean_reward"]) for r in logs if "train/mean_reward" in r] == \
        series(expected, "train/mean_reward")


def test_plugins_lists_a_third_party_tracker(tmp_path: Path, install_distribution) -> None:
    install_distribution("retrain-jsonsink", "0.1", {"retrain.trackers": {"jsonsink": "jsonsink:JsonSink"}},
                         {"jsonsink.py": JSONSINK})
    from retrain.commands.plugins.run import describe
    from retrain.config.schema import TrainConfig

    kind = describe(TrainConfig(), [])["kinds"]["tracker"]
    assert list(kind["builtins"]) == ["wandb", "tensorboard", "mlflow", "trackio"]
    assert kind["entry_point_group"] == "retrain.trackers"
    assert kind["entry_points"] == [{"name": "jsonsink", "value": "jsonsink:JsonSink",
                                     "distribution": "retrain-jsonsink"}]


@pytest.fixture
def wandb_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    wandb = pytest.importorskip("wandb")
    for key, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_CONSOLE": "off",
                       "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"), "WANDB_CACHE_DIR": str(tmp_path / "cache"),
                       "WANDB_DATA_DIR": str(tmp_path / "wandb-data")}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    yield wandb
    wandb.teardown()  # its service process ends with the test


def sft_run(root: Path, *logging: str) -> Path:
    """tests/test_sft_run.py's SFT run, 4 steps with a checkpoint after 2, plus `logging` lines."""
    cfg = write_sft_run(root, max_steps=4, batch_size=4, save_every=2)
    cfg.write_text(cfg.read_text() + "\n".join(logging) + "\n")
    return cfg


def test_sft_run_logs_to_wandb_with_its_checkpoint(tmp_path: Path, wandb_offline) -> None:  # type: ignore[no-untyped-def]
    cfg = sft_run(tmp_path, 'wandb_project = "retrain-test"', 'checkpoint_artifacts = "wandb"')
    res = retrain(cfg)
    assert res.returncode == 0, res.stderr
    run = wandb_records.offline_run(tmp_path / "logs")
    rows = wandb_records.history(run)
    assert [(r["_step"], r["train/loss"]) for r in rows if "train/loss" in r] == \
        [(s, v) for s, v in series(tracker_rows(tmp_path / "logs"), "train/loss")]
    [artifact] = wandb_records.artifacts(run)
    assert artifact.type == "retrain_checkpoint" and artifact.name == "checkpoints-logs"
    assert sorted(artifact.aliases) == ["checkpoint_step_2", "latest"]
    files = {entry.path for entry in artifact.manifest.contents}
    saved = tmp_path / "adapters" / "checkpoint_step_2"
    assert "trainer_state.json" in files and files == {str(p.relative_to(saved)) for p in saved.rglob("*")
                                                       if p.is_file()}
    meta = json.loads(artifact.metadata)
    assert meta["checkpoint"] == "checkpoint_step_2" and meta["steps"] == 2 and meta["trainer"] == "sft"
    assert meta["phase"] == "sft"
    assert meta["resume"].startswith("retrain ") and meta["save_every"] == 2
    status = [r for r in rows if "train/recoverability/latest_checkpoint_uploaded" in r]
    assert [(r["_step"], r["train/recoverability/latest_checkpoint_uploaded"],
             r["train/recoverability/latest_checkpoint_step"]) for r in status] == [(1, 1, 2)]
    summary = wandb_records.summary(run)
    assert summary["train/recoverability/latest_checkpoint_name"] == "checkpoint_step_2"
    assert summary["train/recoverability/latest_checkpoint_artifact"] == "checkpoints-logs:checkpoint_step_2"
    assert "wandb sync" in summary["train/recoverability/latest_checkpoint_reason"]


@pytest.mark.slow
def test_fail_closed_stops_a_run_whose_checkpoint_wandb_cannot_store(tmp_path: Path, wandb_offline,  # type: ignore[no-untyped-def]
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "not-a-folder"))  # where W&B stages artifact files
    cfg = sft_run(tmp_path, 'wandb_project = "retrain-test"', 'checkpoint_artifacts = "wandb"')
    res = retrain(cfg)
    assert res.returncode == 3, res.stderr
    assert "checkpoint_artifacts = \"wandb\": checkpoint checkpoint_step_2 was not stored in W&B" in res.stderr
    assert "resume with:" in res.stderr and "Traceback" not in res.stderr
    assert (tmp_path / "adapters" / "checkpoint_step_2" / "trainer_state.json").exists()
    assert len(read_jsonl(tmp_path / "logs" / "metrics.jsonl")) == 2
    meta = json.loads((tmp_path / "logs" / "run_meta.json").read_text())
    assert meta["status"] == "failed" and meta["failure_status"] == "exception:CheckpointNotStored"
    rows = wandb_records.history(wandb_records.offline_run(tmp_path / "logs"))
    assert [r["train/recoverability/latest_checkpoint_uploaded"] for r in rows
            if "train/recoverability/latest_checkpoint_uploaded" in r] == [0]


WRITE_ROWS = '''
import json, pathlib, sys
log_dir, adapter = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
rows = [{"step": 0, "phase": "sft", "loss": 2.0}, {"step": 0, "loss": 1.5}, {"step": 1, "loss": 1.0}]
(log_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in rows))
adapter.mkdir(parents=True)
'''


def test_command_trainer_mirrors_its_programs_rows(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (tmp_path / "write_rows.py").write_text(WRITE_ROWS)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"""
[backend]
adapter_path = "{tmp_path / 'adapter'}"
[training]
trainer = "command"
trainer_command = {json.dumps(f"{sys.executable} write_rows.py {{log_dir}} {{adapter_path}}")}
[logging]
log_dir = "{tmp_path / 'logs'}"
trackers = ["tensorboard"]
""")
    res = retrain(cfg)
    assert res.returncode == 0, res.stderr
    events = EventAccumulator(str(tmp_path / "logs" / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(0, 2.0), (1, 1.5), (2, 1.0)]
    assert [(e.step, e.value) for e in events.Scalars("train/command/exit_code")] == [(2, 0.0)]
