"""A TTT-Discover run on the tiny model through the real `retrain` command: two steps that
write `discover_*` rows, prompts carrying the discovery memory, and the final archive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from retrain.io.log import read_jsonl

pytestmark = pytest.mark.slow

REWARD = '''
def score(response, reference):
    """A graded toy reward with spread on an untrained model: the share of digits, capped."""
    return min(1.0, sum(ch.isdigit() for ch in response) / 4)
'''


def test_two_step_discover_run(tmp_path: Path) -> None:
    (tmp_path / "toy_reward.py").write_text(REWARD)
    cfg = tmp_path / "run.toml"
    cfg.write_text(f"""
[model]
model = "tiny"
lora_rank = 4
[backend]
devices = "cpu"
adapter_path = "{tmp_path / 'adapters'}"
[algorithm]
algorithm_mode = "ttt_discover_entropic"
[algorithm.params]
context_k = 2
[training]
trainer = "ttt_discover"
seed = 0
max_steps = 2
batch_size = 2
group_size = 4
max_tokens = 8
temperature = 1.0
lr = 1e-2
save_every = 0
[data]
source = "arithmetic"
[reward]
type = "custom"
custom_module = "toy_reward"
[logging]
log_dir = "{tmp_path / 'logs'}"
""")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    res = subprocess.run([sys.executable, "-m", "retrain.cli", str(cfg)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr
    logs = tmp_path / "logs"
    rows = read_jsonl(logs / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1]
    for r in rows:
        assert r["discover_archive_size"] == 1 + (r["step"] + 1) * 8
        assert "discover_beta" in r and r["discover_beta"] >= 0
    assert any(r["discover_beta"] > 0 for r in rows), "no group had spread"
    generations = read_jsonl(logs / "emergence" / "generations.jsonl")
    assert generations and all("Discovery memory:" in g["prompt"] for g in generations)
    second = [g for g in generations if g["step"] == 1]
    assert any("Other promising attempts:" in g["prompt"] for g in second)
    archive = json.loads((logs / "discover_archive.json").read_text())
    entries = archive["entries"]
    assert len(entries) == 17 and archive["n_total"] == 4
    assert entries[0]["parent"] is None and entries[0]["text"] == ""
    best = max(e["reward"] for e in entries)
    assert rows[-1]["discover_archive_best_reward"] == best
    assert (tmp_path / "adapters" / "final" / "adapter_model.safetensors").exists()
