"""`uncertainty_kind = "shannon_entropy"` end to end: the trainer asks the backend for the
entropy of every sampled position's distribution through the sampling parameters, and the
GTPO transform weighs tokens by it (before the fix the backend was never asked, and the
pipeline failed on empty arrays)."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrain.config import load_config
from retrain.io.log import read_jsonl
from retrain.training.console import SilentReporter
from retrain.training.trainer import train

pytestmark = pytest.mark.slow


def run(tmp_path: Path, kind: str) -> list[dict[str, object]]:
    flags = ["--model", "tiny", "--devices", "cpu", "--seed", "0", "--lora-rank", "4", "--data-source", "arithmetic",
             "--max-steps", "2", "--batch-size", "2", "--group-size", "4", "--max-tokens", "6",
             "--advantage-mode", "grpo", "--transform-mode", "gtpo", "--uncertainty-kind", kind,
             "--reward-type", "match", "--log-dir", str(tmp_path / kind / "logs"),
             "--adapter-path", str(tmp_path / kind / "adapters")]
    train(load_config(None, flags, import_plugins=False).config, SilentReporter())
    return [r for r in read_jsonl(tmp_path / kind / "logs" / "metrics.jsonl") if r.get("phase") != "sft"]


def test_shannon_entropy_trains_and_differs_from_surprisal(tmp_path: Path) -> None:
    entropy = run(tmp_path, "shannon_entropy")
    surprisal = run(tmp_path, "surprisal")
    assert [r["step"] for r in entropy] == [0, 1]
    assert entropy[0]["uncertainty_kind"] == "shannon_entropy"
    # the same seed samples the same first step; only the uncertainty values differ
    assert entropy[0]["mean_reward"] == surprisal[0]["mean_reward"]
    assert entropy[0]["exec_surprisal_mean"] != surprisal[0]["exec_surprisal_mean"]
    assert float(entropy[0]["exec_surprisal_mean"]) > 0.0  # type: ignore[arg-type]
