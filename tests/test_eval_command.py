"""`retrain eval` on a run that trained (SFT warmup + RL on arithmetic) against the untrained
base model, through the real command: the trained policy scores higher on held-out problems,
and every checkpoint gets a row. The commands run in this process (tiny_run.retrain): what they
print and score is the subject, not the process; the SFT warmup keeps it in the slow tier."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import tiny_run

pytestmark = pytest.mark.slow

CONFIG = """
[model]
model = "tiny"
[backend]
devices = "cpu"
adapter_path = "adapters"
[backend.options]
train_full_model = true
[algorithm]
advantage_mode = "maxrl"
transform_mode = "none"
[optimizer]
beta2 = 0.98
grad_clip_norm = 1.0
[training]
seed = 0
max_steps = 10
batch_size = 16
group_size = 8
max_tokens = 12
temperature = 1.0
top_p = 1.0
lr = 3e-4
sft_warmup_steps = 100
sft_batch_size = 64
sft_lr = 3e-3
sft_loss_fn = "cross_entropy"
save_every = 5
[data]
source = "arithmetic"
[reward]
type = "strict"
[eval]
at_end = true
[logging]
log_dir = "logs"
"""


def retrain(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`retrain ARGS` from `root`, in this process; the config file is the first argument
    after the verb ("run.toml")."""
    verb = [a for a in args if a == "eval"]
    rest = [a for a in args if a != "eval"]
    config = root / rest[0]
    return tiny_run.retrain(config, *verb, *rest[1:])


def test_a_trained_run_beats_the_base_model_on_held_out_problems(tmp_path: Path) -> None:
    (tmp_path / "run.toml").write_text(CONFIG)
    trained = retrain(tmp_path, "run.toml")
    assert trained.returncode == 0, trained.stderr[-3000:]
    base = retrain(tmp_path, "eval", "run.toml", "--json")
    assert base.returncode == 0, base.stderr[-3000:]
    after = retrain(tmp_path, "eval", "run.toml", "--run", "logs", "--all-checkpoints", "--json")
    assert after.returncode == 0, after.stderr[-3000:]
    [base_row] = json.loads(base.stdout)
    rows = json.loads(after.stdout)
    assert [(r["policy"], r["rl_steps"]) for r in rows] == [("checkpoint_step_5", 5), ("checkpoint_step_10", 10),
                                                            ("final", 10)]
    assert rows[-1]["pass@1"] > base_row["pass@1"], (base_row, rows)
    # the final adapter and the last checkpoint hold the same weights: the same score
    assert rows[-1]["pass@1"] == rows[-2]["pass@1"] and rows[0]["examples"] == base_row["examples"] > 0
    # the same config draws the same stream: the run's own final evaluation, reproduced
    [in_run] = [json.loads(line) for line in (tmp_path / "logs" / "eval.jsonl").read_text().splitlines()]
    assert in_run["step"] == 10 and in_run["eval/pass@1"] == rows[-1]["pass@1"]
    print(f"held-out pass@1: base {base_row['pass@1']:.3f}, trained {rows[-1]['pass@1']:.3f}")
    table = retrain(tmp_path, "eval", "run.toml", "--adapter", "adapters/final", "--k", "4", "--max-examples", "5")
    assert table.returncode == 0, table.stderr[-3000:]
    assert "held-out evaluation: 5 problems, k = 4" in table.stdout and "pass@4" in table.stdout
