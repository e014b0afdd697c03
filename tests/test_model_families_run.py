"""A Qwen3.5 checkpoint as the hub ships it (`Qwen3_5ForConditionalGeneration` with its vision
tower; tiny, random) trained by the real `retrain` command, in this process: before the model
families, its run died at its first sample and two third-party lines reached the terminal
first. The run trains two RL steps, saves a checkpoint and says in its step rows what sampled
(retrain's decoder, on its hybrid layers)."""

from __future__ import annotations

import sys
from pathlib import Path

from tiny_run import retrain as retrain_here
from tiny_run import write_tiny_run

from retrain.io.log import read_jsonl

sys.path.insert(0, str(Path(__file__).parents[1] / "packages" / "retrain-backends-local" / "tests"))
from tiny_families import write_checkpoint


def test_a_hub_qwen35_checkpoint_trains_through_the_command(tmp_path: Path) -> None:
    folder = write_checkpoint("qwen3_5 multimodal", tmp_path / "qwen35")
    cfg = write_tiny_run(tmp_path, training={"save_every": 2})
    cfg.write_text(cfg.read_text().replace('model = "tiny"', f'model = "{folder}"'))
    done = retrain_here(cfg)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[transformers]" not in done.stdout + done.stderr and "falling back" not in done.stderr
    rows = [r for r in read_jsonl(tmp_path / "run" / "logs" / "metrics.jsonl") if "engine_decoder" in r]
    assert len(rows) == 2 and all(r["engine_decoder"] == "retrain" for r in rows)
    assert rows[0]["local_qwen35_gated_delta_kernel"] == "torch"
    assert (tmp_path / "run" / "adapters" / "checkpoint_step_2" / "adapter_model.safetensors").is_file()
