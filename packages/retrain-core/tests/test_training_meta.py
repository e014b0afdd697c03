"""RunStatus, the one writer of run_meta.json every trainer records its state with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from retrain.training.interrupt import RunInterrupted
from retrain.training.meta import RunStatus
from retrain.validation.load import load_config


def status_in(tmp_path: Path, **kwargs: Any) -> tuple[RunStatus, Path]:
    log_dir = tmp_path / "logs"
    config = load_config(None, ["--log-dir", str(log_dir)], import_plugins=False).config
    return RunStatus(config, config_path="run.toml", **kwargs), log_dir / "run_meta.json"


def test_running_then_succeeded_in_a_folder_it_makes(tmp_path: Path) -> None:
    status, meta = status_in(tmp_path, world_size=2)
    with status.recorded():
        assert json.loads(meta.read_text())["status"] == "running"
    status.succeeded("adapters/final", last_row={"step": 0})
    got = json.loads(meta.read_text())
    assert (got["status"], got["policy_ref"], got["metrics"], got["world_size"], got["config_path"]) == (
        "succeeded", "adapters/final", {"step": 0}, 2, "run.toml")
    assert "failure_status" not in got and "error_message" not in got


def test_an_exception_is_recorded_unless_the_block_recorded_the_end_first(tmp_path: Path) -> None:
    status, meta = status_in(tmp_path)
    with pytest.raises(KeyError), status.recorded():
        raise KeyError("lost")
    got = json.loads(meta.read_text())
    assert (got["status"], got["failure_status"], got["error_message"]) == ("failed", "exception:KeyError", "'lost'")
    with pytest.raises(RuntimeError), status.recorded():
        status.failed("replay_mismatch", "the loss differs")
        raise RuntimeError("the loss differs")
    got = json.loads(meta.read_text())
    assert (got["failure_status"], got["error_message"]) == ("replay_mismatch", "the loss differs")


def test_an_interrupt_the_run_saved_at_is_interrupted(tmp_path: Path) -> None:
    written: list[dict[str, Any]] = []
    status, meta = status_in(tmp_path, write=lambda m: written.append(dict(m)))
    with pytest.raises(RunInterrupted), status.recorded():
        raise RunInterrupted("interrupted after step 3")
    assert [m["status"] for m in written] == ["running", "interrupted"]
    assert written[-1]["error_message"] == "interrupted after step 3" and "failure_status" not in written[-1]
    assert not meta.exists()
