"""Distillation in a run of two processes (`devices = "cpu,cpu"`: torchrun, gloo, FSDP2): each
rank loads the teacher beside its shard of the student and scores the completions it holds;
the run trains every step on the teacher's term, and its rows are rank 0's."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_distributed_run import retrain
from test_training_run import write_run

from retrain.io.log import read_jsonl
from retrain.models.load import ModelSpec, load_model

pytestmark = pytest.mark.slow


def test_two_processes_distil_from_a_local_teacher(tmp_path: Path) -> None:
    load_model(ModelSpec("tiny"), seed=5).save_pretrained(str(tmp_path / "teacher"))
    cfg = write_run(tmp_path, None, max_steps=2, batch_size=2, group_size=2, sft_warmup_steps=0, save_every=0)
    cfg.write_text(cfg.read_text().replace('devices = "cpu"', 'devices = "cpu,cpu"')
                   + f'[teacher]\nmodel = "tiny"\nadapter = "{tmp_path / "teacher"}"\nreward_coef = 0.0\n')
    done = retrain(cfg)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_jsonl(tmp_path / "logs" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1] and {r["world_size"] for r in rows} == {2}
    assert all(r["teacher/tokens"] == r["rl/completion_tokens"] > 0 and r["teacher/kl"] != 0.0 for r in rows)
    assert all(r["num_datums"] == 4 and not r["skipped"] for r in rows)  # every group trains on the teacher
