import sys

import pytest

from retrain.config.schema import LoggingConfig, TrainConfig
from retrain.training.wandb import (
    WANDB_HINT,
    NullSink,
    WandbMissing,
    WandbSink,
    create_wandb_sink,
    parse_tags,
    run_name,
    wandb_payload,
)


def config(tmp_path, **logging):
    return TrainConfig(logging=LoggingConfig(log_dir=str(tmp_path / "logs" / "run-7"), **logging))


def test_payload_mirrors_numeric_fields_under_train():
    row = {"step": 3, "loss": 0.5, "mean_reward": 1, "sepa_gate_open": True, "condition": "grpo+none",
           "rl/completion_tokens": 12, "optimizer/logical_batch_sha256": "ab" * 32, "nested": {"a": 1}}
    assert wandb_payload(row) == {"train/loss": 0.5, "train/mean_reward": 1, "train/sepa_gate_open": 1,
                                  "train/rl/completion_tokens": 12}


def test_run_name_and_tags(tmp_path):
    assert run_name(config(tmp_path)) == "run-7"
    assert run_name(config(tmp_path, wandb_run_name="named")) == "named"
    assert run_name(TrainConfig(logging=LoggingConfig(log_dir="")), "grpo+none") == "grpo+none"
    assert parse_tags(" a, b ,,c ") == ["a", "b", "c"] and parse_tags("") == []


def test_no_project_no_sink(tmp_path):
    assert isinstance(create_wandb_sink(config(tmp_path)), NullSink)


def test_missing_wandb_names_the_package(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(WandbMissing) as err:
        create_wandb_sink(config(tmp_path, wandb_project="p"))
    assert "`wandb` package is not installed" in str(err.value) and WANDB_HINT in str(err.value)


def test_offline_run_writes_the_logged_keys(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    for key, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_CONSOLE": "off",
                       "WANDB_CONFIG_DIR": str(tmp_path / "cfg"), "WANDB_CACHE_DIR": str(tmp_path / "cache"),
                       "WANDB_DATA_DIR": str(tmp_path / "data")}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    cfg = config(tmp_path, wandb_project="retrain-test", wandb_group="g1", wandb_tags="cond,seed42")
    try:
        with WandbSink(cfg, condition="grpo+none") as sink:
            for step in range(3):
                sink.log_step({"step": step, "loss": 1.0 / (step + 1), "mean_reward": 0.1 * step,
                               "correct_rate": 0.5, "condition": "grpo+none", "sepa_gate_open": False}, step)
    finally:
        if hasattr(wandb, "teardown"):
            wandb.teardown()
    [run_file] = (tmp_path / "logs" / "run-7" / "wandb").glob("offline-run-*/run-*.wandb")
    data = run_file.read_bytes()
    for key in (b"train/loss", b"train/mean_reward", b"train/correct_rate", b"train/sepa_gate_open"):
        assert key in data
    assert b"train/condition" not in data and b"train/step" not in data
    assert b"retrain-test" in data and b"run-7" in data and b"seed42" in data
