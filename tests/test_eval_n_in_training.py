"""`[eval] n` in evaluations during training: the trainer draws n samples per problem and
the row records n, pass@1 over all n and the unbiased pass@k (in process, tiny model)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_run import write_tiny_run

from retrain.io.log import read_jsonl
from retrain.training.trainers import train
from retrain.validation.load import load_config


def test_the_trainer_draws_n_samples_per_held_out_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = write_tiny_run(tmp_path, training={"max_steps": 1},
                         tables={"eval": {"at_end": True, "k": 2, "n": 6, "max_examples": 3}})
    train(load_config(cfg, [], import_plugins=False).config)
    [row] = read_jsonl(tmp_path / "run" / "logs" / "eval.jsonl")
    assert row["eval/n"] == 6 and row["eval/k"] == 2
    assert 0.0 <= row["eval/pass@1"] <= row["eval/pass@2"] <= 1.0
