"""The README's main command: the bundled retrain.toml trains `tiny` on arithmetic and the
mean reward of its last 10 RL steps beats its first 10 by at least 0.3; it evaluates the
held-out sums before RL and at the end. (The three-minute budget is measured by the demo
benchmark, not asserted here.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from retrain.io.log import read_jsonl

pytestmark = pytest.mark.slow


def test_demo_learns(demo_run: Path) -> None:
    """The run itself is the `demo_run` session fixture (tests/conftest.py), shared with the
    export round trip (tests/test_export_vllm.py)."""
    stdout = (demo_run / "stdout.log").read_text()
    rows = [r for r in read_jsonl(demo_run / "logs" / "demo" / "metrics.jsonl") if r.get("phase") != "sft"]
    assert len(rows) == 400
    first = sum(r["mean_reward"] for r in rows[:10]) / 10
    last = sum(r["mean_reward"] for r in rows[-10:]) / 10
    assert last - first >= 0.3, (first, last)
    assert "mean reward, first 10 RL steps" in stdout and "mean reward, last 10 RL steps" in stdout
    # held-out sums before RL and after it, in eval.jsonl and in the closing summary
    evals = read_jsonl(demo_run / "logs" / "demo" / "eval.jsonl")
    assert [r["step"] for r in evals] == [0, 400] and all(0 <= r["eval/pass@1"] <= r["eval/pass@8"] <= 1 for r in evals)
    assert "held-out (16 problems), after 0 RL steps" in stdout
    assert "held-out (16 problems), after 400 RL steps" in stdout
    assert (demo_run / "adapters" / "demo" / "final" / "model.safetensors").exists()
    assert "export it: retrain export logs/demo --out exports/demo" in stdout
