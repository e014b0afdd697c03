"""A checkpoint that has not learned language is named at load, in one line: its loss on a fixed
sentence near log(vocab). A model that has learned the sentence is not; the built-in `tiny`
(random by design) never is."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from retrain.backends.local.backend import LocalBackend
from retrain.models.load import ModelSpec, load_model, load_tokenizer
from retrain.models.untrained import NEAR_UNIFORM, SENTENCE, sentence_loss, untrained_note

SMALL = (("num_hidden_layers", 2), ("hidden_size", 64), ("intermediate_size", 128), ("head_dim", 16))


def _taught(model: torch.nn.Module, tokenizer, steps: int = 60) -> torch.nn.Module:  # type: ignore[no-untyped-def]
    """The model after fitting the sentence: what a trained checkpoint looks like to the check."""
    ids = tokenizer(SENTENCE, return_tensors="pt").input_ids
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        opt.zero_grad()
        model(ids, labels=ids).loss.backward()
        opt.step()
    return model.eval()


def test_a_random_model_is_named_and_a_trained_one_is_not() -> None:
    spec = ModelSpec("tiny", config_overrides=SMALL)
    model, tokenizer = load_model(spec, seed=0), load_tokenizer(spec)
    loss, vocab = sentence_loss(model, tokenizer)
    assert vocab == 103 and loss > NEAR_UNIFORM * math.log(vocab)
    note = untrained_note(model, tokenizer, "ckpt/")
    assert note is not None and note.count("\n") == 0
    assert "[model] model = 'ckpt/' looks untrained or broken" in note and "103 tokens" in note
    assert untrained_note(_taught(model, tokenizer), tokenizer, "ckpt/") is None


def test_loading_names_a_random_checkpoint_and_never_the_built_in_tiny(
        tiny_config, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    LocalBackend(tiny_config())
    assert "looks untrained" not in capsys.readouterr().err
    spec = ModelSpec("tiny", config_overrides=SMALL)
    load_model(spec, seed=5).save_pretrained(tmp_path / "ckpt")
    load_tokenizer(spec).save_pretrained(tmp_path / "ckpt")
    LocalBackend(tiny_config("--model", str(tmp_path / "ckpt")))
    err = capsys.readouterr().err
    assert f"retrain: [model] model = '{tmp_path / 'ckpt'}' looks untrained or broken" in err
