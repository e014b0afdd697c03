"""A GTPO-HICRA run on the tiny model whose planning masks come from the semantic detector,
offline, with the packaged all-MiniLM-L6-v2; a model that is not there fails at the start in
one line instead of falling back to regex."""

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
    return min(1.0, sum(ch.isdigit() for ch in response) / 4)
'''


def write(root: Path, model: str = "all-MiniLM-L6-v2") -> Path:
    (root / "toy_reward.py").write_text(REWARD)
    cfg = root / "run.toml"
    cfg.write_text(f"""
[model]
model = "tiny"
lora_rank = 4
[backend]
devices = "cpu"
adapter_path = "{root / 'adapters'}"
[algorithm]
algorithm_mode = "maxrl_gtpo_hicra"
[planning]
detector = "semantic"
model = "{model}"
[training]
seed = 0
max_steps = 2
batch_size = 2
group_size = 4
max_tokens = 16
temperature = 1.0
save_every = 0
[data]
source = "arithmetic"
[reward]
type = "custom"
custom_module = "toy_reward"
[logging]
log_dir = "{root / 'logs'}"
""")
    return cfg


def retrain(cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "retrain.cli", *args, str(cfg)], cwd=cfg.parent, env=env,
                          capture_output=True, text=True, timeout=900, check=False)


def test_gtpo_hicra_run_with_the_semantic_detector(tmp_path: Path) -> None:
    res = retrain(write(tmp_path))
    assert res.returncode == 0, res.stderr
    rows = read_jsonl(tmp_path / "logs" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1]
    assert rows[0]["condition"] == "maxrl_gtpo_hicra"
    trained = [r for r in rows if not r["skipped"]]
    assert trained, "every group tied"
    assert all(0.0 <= r["planning_token_fraction"] <= 1.0 for r in trained)


def test_a_missing_model_folder_stops_the_run_in_one_line(tmp_path: Path) -> None:
    res = retrain(write(tmp_path, model=str(tmp_path / "no-such-model")))
    assert res.returncode == 2
    assert "is not a local folder" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "logs" / "metrics.jsonl").exists()
