"""A model from a local directory (as a user's checkpoint is) loads through the same path as a
hub id: config + weights + tokenizer written to a tmp dir, then sampled and trained."""

from __future__ import annotations

from pathlib import Path

import torch

from retrain.backends.local.backend import LocalBackend
from retrain.models.load import ModelSpec, load_model, load_tokenizer
from retrain.types import Datum, SamplingParams


def test_local_directory_checkpoint(tiny_config, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec = ModelSpec("tiny", config_overrides=(("num_hidden_layers", 2), ("hidden_size", 64),
                                               ("intermediate_size", 128), ("head_dim", 16)))
    model = load_model(spec, seed=5)
    model.save_pretrained(tmp_path / "ckpt")
    load_tokenizer(spec).save_pretrained(tmp_path / "ckpt")

    backend = LocalBackend(tiny_config("--model", str(tmp_path / "ckpt"), "--model-local-files-only",
                                       "--model-revision", "main"))
    base = backend.model.get_base_model()
    assert base.config.num_hidden_layers == 2
    with torch.no_grad():
        ids = torch.tensor([backend.tokenizer.encode_prompt("1+1=")])
        assert torch.allclose(model(input_ids=ids).logits, backend.model(input_ids=ids).logits, atol=1e-6)
    out = backend.sample([backend.tokenizer.encode_prompt("1+1=")], 2, SamplingParams(max_tokens=4))
    prompt = backend.tokenizer.encode_prompt("1+1=")
    c = out[0][0]
    step = backend.train_step([Datum(tokens=prompt + c.token_ids, logprobs=[0.0] * len(prompt) + c.logprobs,
                                     advantages=[0.0] * len(prompt) + [1.0] * len(c.token_ids))], 1e-3, 0.0)
    assert step.tokens == len(c.token_ids)
