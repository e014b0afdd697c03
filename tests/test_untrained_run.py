"""A run that trains nothing does not end "Training complete": with the strict reward and no
warmup the random tiny model never writes a boxed sum, every group ties at 0 and no step
makes an update; the closing summary and `retrain status` say so and why. The command runs in
this process (tests/tiny_run.py): the summary is the subject, not the process."""

from __future__ import annotations

from pathlib import Path

from tiny_run import retrain, write_tiny_run

from retrain.io.log import read_jsonl
from retrain.status.format import render
from retrain.status.scan import scan_all


def test_a_run_whose_groups_all_tie_says_it_trained_nothing(tmp_path: Path) -> None:
    cfg = write_tiny_run(tmp_path, training={"max_steps": 3})
    cfg.write_text(cfg.read_text().replace('type = "custom"\ncustom_module = "toy_reward"', 'type = "strict"'))
    res = retrain(cfg)
    assert res.returncode == 0, res.stderr
    rows = read_jsonl(tmp_path / "run" / "logs" / "metrics.jsonl")
    assert [r["num_datums"] for r in rows] == [0, 0, 0] and all(r["mean_reward"] == 0 for r in rows)
    assert "Training complete" not in res.stdout
    assert "Run complete, nothing trained: " in res.stdout
    assert "  warning: no RL step trained: every group's completions tied, and none scored as correct" in res.stdout
    assert "sft_warmup_steps" in res.stdout
    [run] = scan_all(tmp_path).runs
    assert run.state == "finished" and (run.warning or "").startswith("no RL step trained: ")
    assert "warning=no RL step trained" in render(scan_all(tmp_path))
