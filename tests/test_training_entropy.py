"""`uncertainty_kind = "shannon_entropy"` end to end: the trainer asks the backend for the
entropy of every sampled position's distribution through the sampling parameters, and the
GTPO transform weighs tokens by it (before the fix the backend was never asked, and the
pipeline failed on empty arrays)."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrain.io.log import read_jsonl
from retrain.training.console import SilentReporter
from retrain.training.trainers import train
from retrain.validation.load import load_config

# in this process (tiny_run.retrain, or the trainer itself): seconds, so the fast tier

REWARD = '''
def score(response, reference):
    return float(sum(ch.isdigit() for ch in response) >= 2)
'''


def run(root: Path, kind: str) -> list[dict[str, object]]:
    cfg = root / f"{kind}.toml"
    cfg.write_text(f"""
[model]
model = "tiny"
lora_rank = 4
[backend]
devices = "cpu"
adapter_path = "{root / kind / 'adapters'}"
[algorithm]
advantage_mode = "grpo"
transform_mode = "gtpo"
uncertainty_kind = "{kind}"
[training]
seed = 0
max_steps = 2
batch_size = 4
group_size = 4
max_tokens = 6
[data]
source = "arithmetic"
[reward]
type = "custom"
custom_module = "entropy_toy_reward"
[logging]
log_dir = "{root / kind / 'logs'}"
""")
    train(load_config(str(cfg)).config, SilentReporter())
    return [r for r in read_jsonl(root / kind / "logs" / "metrics.jsonl") if r.get("phase") != "sft"]


def test_shannon_entropy_trains_and_differs_from_surprisal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "entropy_toy_reward.py").write_text(REWARD)
    monkeypatch.syspath_prepend(str(tmp_path))
    entropy = run(tmp_path, "shannon_entropy")
    surprisal = run(tmp_path, "surprisal")
    assert [r["step"] for r in entropy] == [0, 1]
    assert entropy[0]["uncertainty_kind"] == "shannon_entropy"
    # the same seed samples the same first step and trains on the same groups; only the
    # uncertainty that weighs each token's advantage differs
    assert entropy[0]["mean_reward"] == surprisal[0]["mean_reward"]
    assert entropy[0]["num_datums"] == surprisal[0]["num_datums"] > 0
    assert entropy[0]["loss"] != surprisal[0]["loss"]
