"""A new trainer needs nothing edited in core: a third-party distribution registers a
function under entry-point group `retrain.trainers`, `[training] trainer` names it, and the
entry the `retrain` command trains through (retrain.training.trainers.train) runs it; the
trainer records the run's state through the shared run-state writer (RunStatus)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tiny_run import Messages, write_tiny_run

from retrain.io.log import read_jsonl
from retrain.training.trainers import train
from retrain.validation.load import load_config

TRAINER = '''
import json
from pathlib import Path

from retrain.io.layout import FINAL, METRICS
from retrain.training.meta import RunStatus
from retrain.training.result import RunResult


def run(config, reporter=None, *, config_path=""):
    """One "step" that writes a metrics row and an adapter folder."""
    status = RunStatus(config, config_path=config_path)
    with status.recorded():
        log_dir = Path(config.logging.log_dir)
        row = {"step": 0, "loss": 0.25, "trainer": config.training.trainer, "model": config.model.model}
        (log_dir / METRICS).write_text(json.dumps(row) + "\\n")
        adapter = Path(config.backend.adapter_path) / FINAL
        adapter.mkdir(parents=True)
        (adapter / "weights.txt").write_text("tiny")
    status.succeeded(str(adapter), last_row=row)
    return RunResult(str(log_dir), str(adapter), 1, {"trainer": config.training.trainer})


def broken(config, reporter=None, *, config_path=""):
    with RunStatus(config, config_path=config_path).recorded():
        raise ValueError("the plugin broke")
'''


def config_naming(root: Path, trainer: str, install_distribution) -> tuple[Path, Any]:  # type: ignore[no-untyped-def]
    install_distribution("retrain-trainer-tiny", "0.1.0",
                         {"retrain.trainers": {"tiny_plugin": "tiny_trainer_plugin:run",
                                               "tiny_broken": "tiny_trainer_plugin:broken"}},
                         {"tiny_trainer_plugin.py": TRAINER})
    cfg = write_tiny_run(root, training={"trainer": trainer})
    return cfg, load_config(cfg, [], import_plugins=False).config


def test_a_trainer_from_an_entry_point_runs_and_records_success(
        tmp_path: Path, install_distribution) -> None:  # type: ignore[no-untyped-def]
    cfg, config = config_naming(tmp_path, "tiny_plugin", install_distribution)
    result = train(config, Messages(), config_path=str(cfg))
    logs, adapters = tmp_path / "run" / "logs", tmp_path / "run" / "adapters"
    assert result.final_adapter == str(adapters / "final") and result.summary == {"trainer": "tiny_plugin"}
    assert read_jsonl(logs / "metrics.jsonl") == [{"step": 0, "loss": 0.25, "trainer": "tiny_plugin",
                                                    "model": "tiny"}]
    assert (adapters / "final" / "weights.txt").read_text() == "tiny"
    meta = json.loads((logs / "run_meta.json").read_text())
    assert meta["status"] == "succeeded" and meta["trainer"] == "tiny_plugin"
    assert meta["policy_ref"] == str(adapters / "final")
    assert meta["metrics"]["loss"] == 0.25 and meta["config_path"] == str(cfg)


def test_a_failing_entry_point_trainer_records_its_failure(
        tmp_path: Path, install_distribution) -> None:  # type: ignore[no-untyped-def]
    cfg, config = config_naming(tmp_path, "tiny_broken", install_distribution)
    with pytest.raises(ValueError, match="the plugin broke"):
        train(config, Messages(), config_path=str(cfg))
    meta = json.loads((tmp_path / "run" / "logs" / "run_meta.json").read_text())
    assert meta["status"] == "failed" and meta["failure_status"] == "exception:ValueError"
    assert meta["error_message"] == "the plugin broke"


def test_a_misspelt_trainer_is_refused_naming_the_registered_ones(
        tmp_path: Path, install_distribution) -> None:  # type: ignore[no-untyped-def]
    from retrain.config.errors import ConfigError

    with pytest.raises(ConfigError, match=r"unknown trainer 'tiny_plugn'.*did you mean 'tiny_plugin'"):
        config_naming(tmp_path, "tiny_plugn", install_distribution)
