"""The README's main command: the bundled retrain.toml trains `tiny` on arithmetic and the
mean reward of its last 10 RL steps beats its first 10 by at least 0.3; it evaluates the
held-out sums before RL and at the end. (The three-minute budget is measured by the demo
benchmark, not asserted here.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from retrain.io.log import read_jsonl

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def test_demo_learns(tmp_path: Path) -> None:
    shutil.copy(REPO / "retrain.toml", tmp_path / "retrain.toml")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "retrain.cli"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=1200, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [r for r in read_jsonl(tmp_path / "logs" / "demo" / "metrics.jsonl") if r.get("phase") != "sft"]
    assert len(rows) == 400
    first = sum(r["mean_reward"] for r in rows[:10]) / 10
    last = sum(r["mean_reward"] for r in rows[-10:]) / 10
    assert last - first >= 0.3, (first, last)
    assert "mean reward, first 10 RL steps" in proc.stdout and "mean reward, last 10 RL steps" in proc.stdout
    # held-out sums before RL and after it, in eval.jsonl and in the closing summary
    evals = read_jsonl(tmp_path / "logs" / "demo" / "eval.jsonl")
    assert [r["step"] for r in evals] == [0, 400] and all(0 <= r["eval/pass@1"] <= r["eval/pass@8"] <= 1 for r in evals)
    assert "held-out (16 problems), after 0 RL steps" in proc.stdout
    assert "held-out (16 problems), after 400 RL steps" in proc.stdout
    assert (tmp_path / "adapters" / "demo" / "final" / "model.safetensors").exists()
