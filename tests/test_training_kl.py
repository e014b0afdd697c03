"""`[training] kl_coef` on the tiny model through the real `retrain` command: the KL to the
reference is zero before the first update (LoRA starts as the base model; full fine-tuning
starts as its frozen copy) and non-zero after it, in `kl/mean` and `kl/max`; and the penalty
changes training (the final weights differ from the same run without it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_run import retrain, write_tiny_run

from retrain.io.log import read_jsonl

# in this process (tiny_run.retrain, or the trainer itself): seconds, so the fast tier


def run(root: Path, full: bool, kl_coef: float) -> list[dict[str, object]]:
    tables: dict[str, dict[str, object]] = {"algorithm": {"advantage_mode": "grpo", "transform_mode": "none"}}
    if full:
        tables["backend.options"] = {"train_full_model": True}
    cfg = write_tiny_run(root, training={"max_steps": 3, "kl_coef": kl_coef, "kl_estimator": "k3"}, tables=tables)
    res = retrain(cfg)
    assert res.returncode == 0, res.stderr
    return read_jsonl(root / "run" / "logs" / "metrics.jsonl")


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
    name = "run/adapters/final/adapter_model.safetensors"
    assert (with_kl / name).read_bytes() != (without / name).read_bytes()
