"""`[training] kl_coef` on the tiny model through the real `retrain` command: the KL to the
reference is zero before the first update (LoRA starts as the base model; full fine-tuning
starts as its frozen copy) and non-zero after it, in `kl/mean` and `kl/max`; and the penalty
changes training (the final weights differ from the same run without it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from retrain.io.log import read_jsonl

pytestmark = pytest.mark.slow

REWARD = '''
def score(response, reference):
    return float(sum(ch.isdigit() for ch in response) >= 2)
'''


def run(root: Path, full: bool, kl_coef: float) -> list[dict[str, object]]:
    (root / "toy_reward.py").write_text(REWARD)
    options = "[backend.options]\ntrain_full_model = true\n" if full else ""
    cfg = root / "run.toml"
    cfg.write_text(f"""
[model]
model = "tiny"
lora_rank = 4
[backend]
devices = "cpu"
adapter_path = "{root / 'adapters'}"
{options}
[algorithm]
advantage_mode = "grpo"
transform_mode = "none"
[training]
seed = 0
max_steps = 3
batch_size = 2
group_size = 4
max_tokens = 8
temperature = 1.0
lr = 1e-2
save_every = 0
kl_coef = {kl_coef}
kl_estimator = "k3"
[data]
source = "arithmetic"
[reward]
type = "custom"
custom_module = "toy_reward"
custom_function = "score"
[logging]
log_dir = "{root / 'logs'}"
""")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    res = subprocess.run([sys.executable, "-m", "retrain.cli", str(cfg)], cwd=root, env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr
    return read_jsonl(root / "logs" / "metrics.jsonl")


@pytest.mark.parametrize("full", [False, True], ids=["lora", "full"])
def test_kl_is_zero_before_the_first_update_and_not_after(tmp_path: Path, full: bool) -> None:
    rows = [r for r in run(tmp_path, full, 0.1) if r.get("num_datums", 0)]
    assert len(rows) >= 2, "fewer than two steps trained"
    assert rows[0]["kl/mean"] == 0.0 and rows[0]["kl/max"] == 0.0
    assert all(float(r["kl/mean"]) > 0 and float(r["kl/max"]) >= float(r["kl/mean"])  # type: ignore[arg-type]
               for r in rows[1:])


def test_the_penalty_changes_training(tmp_path: Path) -> None:
    with_kl, without = tmp_path / "kl", tmp_path / "plain"
    with_kl.mkdir()
    without.mkdir()
    run(with_kl, False, 1.0)
    rows = run(without, False, 0.0)
    assert "kl/mean" not in rows[0]
    name = "adapters/final/adapter_model.safetensors"
    assert (with_kl / name).read_bytes() != (without / name).read_bytes()
