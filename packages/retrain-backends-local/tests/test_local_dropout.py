"""Dropout is off in the trainer's forward by default, for every family whose config carries a
rate: the trainer's logprobs (train mode) equal the sampler's, and the start-up says what was
turned off; `train_keep_dropout = true` keeps it, and the gap it makes shows the test can fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from test_local_families import PROMPTS, backend_of, datums_of, sampler_trainer_gap
from tiny_families import SHAPES, config_of, tokenizer

from retrain.models.dropout import disable_dropout
from retrain.models.quiet import no_progress_bars
from retrain.types import SamplingParams

RATE = 0.3


def _dropout_keys(config: Any, prefix: str = "") -> list[str]:
    keys = []
    for key, value in vars(config).items():
        if "dropout" in key and isinstance(value, int | float) and not isinstance(value, bool):
            keys.append(prefix + key)
        elif hasattr(value, "to_dict") and hasattr(value, "model_type"):
            keys += _dropout_keys(value, f"{prefix}{key}.")
    return keys


def _set(config: Any, dotted: str, value: float) -> None:
    *path, key = dotted.split(".")
    for part in path:
        config = getattr(config, part)
    setattr(config, key, value)


def _with_dropout(name: str) -> tuple[Any, list[str]]:
    config = config_of(name)
    keys = _dropout_keys(config)
    for key in keys:
        _set(config, key, RATE)
    return config, keys


DROPOUT_FAMILIES = sorted(name for name in SHAPES if _dropout_keys(config_of(name)))


def test_most_families_carry_a_dropout_rate() -> None:
    assert len(DROPOUT_FAMILIES) >= 10, DROPOUT_FAMILIES


def _checkpoint(name: str, folder: Path) -> Path:
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    config, _ = _with_dropout(name)
    auto = AutoModelForImageTextToText if name.endswith("multimodal") else AutoModelForCausalLM
    torch.manual_seed(0)
    with no_progress_bars():
        auto.from_config(config).save_pretrained(str(folder))
        tokenizer().save_pretrained(str(folder))
    return folder


@pytest.mark.parametrize("name", DROPOUT_FAMILIES)
def test_a_model_in_train_mode_drops_nothing_after_disable_dropout(name: str) -> None:
    from transformers import AutoModelForCausalLM

    config, keys = _with_dropout(name)
    if name.endswith("multimodal"):
        pytest.skip("the multimodal wrapper is covered through the backend below")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).train()
    ids = torch.tensor([[1, 20, 30, 40, 50, 60, 70, 80]])
    with torch.no_grad():
        noisy = [model(ids).logits for _ in range(2)]
        rates = disable_dropout(model)
        clean = model(ids).logits
        model.eval()
        want = model(ids).logits
    assert sorted(rates) == sorted(keys)
    assert not torch.equal(noisy[0], noisy[1]), "the rates set should have made two forwards differ"
    assert torch.equal(clean, want)


@pytest.mark.parametrize("name", DROPOUT_FAMILIES)
def test_the_trainer_matches_the_sampler_with_a_dropout_checkpoint(name: str, tiny_config, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                   capfd: pytest.CaptureFixture[str]) -> None:
    folder = _checkpoint(name, tmp_path / "model")
    backend = backend_of(tiny_config, folder)
    assert "dropout off: the checkpoint's config sets" in capfd.readouterr().err
    assert backend.model.training
    groups = backend.sample(PROMPTS, 2, SamplingParams(max_tokens=8, temperature=1.0))
    assert sampler_trainer_gap(backend, datums_of(PROMPTS, groups)) <= 1e-4


def test_keep_dropout_keeps_it(tiny_config, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    folder = _checkpoint("qwen2", tmp_path / "model")
    backend = backend_of(tiny_config, folder, "--backend-opt", "train_keep_dropout=true")
    assert "dropout off" not in capfd.readouterr().err
    groups = backend.sample(PROMPTS, 2, SamplingParams(max_tokens=8, temperature=1.0))
    assert sampler_trainer_gap(backend, datums_of(PROMPTS, groups)) > 1e-3
