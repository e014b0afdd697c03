"""The distillation teacher loaded beside the student (`[teacher] model`, retrain.backends.local.
teacher): its logprobs of given tokens are a plain forward's, whatever the rows' lengths and
however they are batched; a LoRA adapter is merged, a folder of full weights replaces them; it
is frozen, in eval mode and its own dtype; a teacher whose tokenizer is not the student's is
refused naming both models. And the local reward model (`[reward] type = "model"`) scores a
text as the classifier alone does, batched or not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from retrain.backends.local.reward_model import LocalClassifier
from retrain.backends.local.teacher import load_teacher
from retrain.models.load import ModelSpec, load_model, load_tokenizer
from retrain.models.tiny import ASSETS
from retrain.teacher.protocol import ScoreRow
from retrain.teacher.tokens import TokenizerMismatch
from retrain.validation.load import load_config

TINY = ModelSpec("tiny")


def config(tmp_path: Path, **teacher: Any) -> Any:
    lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in {"model": "tiny", "device": "cpu", **teacher}.items())
    path = tmp_path / "t.toml"
    path.write_text(f'[model]\nmodel = "tiny"\n[backend]\ndevices = "cpu"\n[training]\nseed = 0\n'
                    f'temperature = 1.0\ntop_p = 1.0\n[teacher]\n{lines}\n')
    return load_config(path, [], import_plugins=False).config


def trained_adapter(folder: Path) -> torch.nn.Module:
    """A LoRA adapter on tiny (seed 0) with non-zero weights, saved to `folder`; the model it
    makes, unmerged."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(load_model(TINY, seed=0), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj",
                                                                                                   "down_proj"]))
    with torch.no_grad():
        gen = torch.Generator().manual_seed(7)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    model.save_pretrained(str(folder))
    return model.eval()


def direct(model: torch.nn.Module, row: ScoreRow) -> list[float]:
    """log softmax of one unpadded forward, at each scored position."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([row.tokens])).logits[0].float()
    lps = torch.log_softmax(logits, dim=-1)
    return [float(lps[j - 1, row.tokens[j]]) for j in range(row.start, len(row.tokens))]


ROWS = [ScoreRow([1, 5, 9, 11, 40, 41, 2], 3), ScoreRow([1, 7, 8, 30, 31, 32, 33, 34, 35, 36, 2], 4),
        ScoreRow([1, 60, 2], 1), ScoreRow([1, 5, 9, 11, 40, 41, 2, 3, 50], 6)]


def test_the_teachers_logprobs_are_a_direct_forwards_within_1e_5(tmp_path: Path) -> None:
    reference = trained_adapter(tmp_path / "lora")
    c = config(tmp_path, adapter=str(tmp_path / "lora"), batch_size=3)
    teacher = load_teacher(c, student_tokenizer=load_tokenizer(TINY), device=torch.device("cpu"), seed=0)
    assert teacher.name == f"tiny + {tmp_path / 'lora'}"
    assert not teacher.model.training and not any(p.requires_grad for p in teacher.model.parameters())
    assert all(p.dtype == torch.float32 for p in teacher.model.parameters())
    got = teacher.score(ROWS)
    for row, lps in zip(ROWS, got, strict=True):
        want = direct(reference, row)
        assert len(lps) == len(row.tokens) - row.start
        assert max(abs(a - b) for a, b in zip(lps, want, strict=True)) < 1e-5, (row, lps, want)
    # the adapter changed the model: the merged teacher is not the base
    base = direct(load_model(TINY, seed=0).eval(), ROWS[0])
    assert max(abs(a - b) for a, b in zip(got[0], base, strict=True)) > 1e-3
    # batching and order do not matter
    assert teacher.score(ROWS[::-1]) == got[::-1] or all(
        max(abs(a - b) for a, b in zip(x, y, strict=True)) < 1e-6 for x, y in zip(teacher.score(ROWS[::-1]), got[::-1],
                                                                                    strict=True))


def test_full_weights_replace_the_base_and_the_dtype_is_the_teachers(tmp_path: Path) -> None:
    other = load_model(TINY, seed=5).eval()
    other.save_pretrained(str(tmp_path / "full"))
    c = config(tmp_path, adapter=str(tmp_path / "full"))
    teacher = load_teacher(c, student_tokenizer=load_tokenizer(TINY), device=torch.device("cpu"), seed=0)
    for row, lps in zip(ROWS, teacher.score(ROWS), strict=True):
        assert max(abs(a - b) for a, b in zip(lps, direct(other, row), strict=True)) < 1e-5
    half = load_teacher(config(tmp_path, dtype="bfloat16"), student_tokenizer=load_tokenizer(TINY),
                        device=torch.device("cpu"), seed=0)
    assert all(p.dtype == torch.bfloat16 for p in half.model.parameters())
    want = direct(load_model(TINY, seed=0).eval(), ROWS[1])
    assert max(abs(a - b) for a, b in zip(half.score(ROWS[1:2])[0], want, strict=True)) < 0.1  # bf16's precision


def test_a_teacher_with_another_tokenizer_is_refused_naming_both(tmp_path: Path) -> None:
    folder = tmp_path / "other-teacher"
    load_model(TINY, seed=0).save_pretrained(str(folder))
    tokenizer = load_tokenizer(TINY)
    tokenizer.add_tokens(["<|teacher-only|>"])
    tokenizer.save_pretrained(str(folder))
    with pytest.raises(TokenizerMismatch) as refused:
        load_teacher(config(tmp_path, model=str(folder)), student_tokenizer=load_tokenizer(TINY),
                     device=torch.device("cpu"), seed=0)
    message = str(refused.value)
    assert f"[teacher] model = {str(folder)!r}" in message and "[model] model = 'tiny'" in message
    assert "do not share a tokenizer (vocabularies of 104 and 103 tokens)" in message


def classifier_folder(folder: Path, labels: int) -> Path:
    """A tiny random Qwen3 sequence classifier with tiny's tokenizer."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    raw = json.loads((ASSETS / "config.json").read_text())
    raw.pop("architectures")
    cfg = AutoConfig.for_model(raw.pop("model_type"), **raw, num_labels=labels)
    torch.manual_seed(3)
    AutoModelForSequenceClassification.from_config(cfg).save_pretrained(str(folder))
    load_tokenizer(TINY).save_pretrained(str(folder))
    return folder


def reward_config(tmp_path: Path, folder: Path, **reward: Any) -> Any:
    values = {"type": "model", "model": str(folder), "model_batch_size": 3, **reward}
    lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in values.items())
    path = tmp_path / "r.toml"
    path.write_text(f'[model]\nmodel = "tiny"\n[backend]\ndevices = "cpu"\n[reward]\n{lines}\n')
    return load_config(path, [], import_plugins=False).config


def test_the_local_reward_model_scores_a_text_as_the_classifier_alone(tmp_path: Path) -> None:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = classifier_folder(tmp_path / "rm", labels=1)
    texts = ["1+2=\n\\boxed{3}", "9+9=\n\\boxed{18} and more text after it", "5+0=\n5", "7+1=\n"]
    classifier = LocalClassifier(reward_config(tmp_path, folder))
    got = classifier.classify(texts)
    model = AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    for text, logits in zip(texts, got, strict=True):
        with torch.no_grad():
            want = model(**tokenizer(text, return_tensors="pt")).logits[0].tolist()  # one text: no padding
        assert len(logits) == 1 and abs(logits[0] - want[0]) < 1e-5, (text, logits, want)
    with pytest.raises(Exception, match="one-label head"):
        LocalClassifier(reward_config(tmp_path, classifier_folder(tmp_path / "rm3", labels=3)))
